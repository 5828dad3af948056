"""Runs one benchmark task in this (fresh) process and writes its result as JSON; run.py starts
one per task, so that no compile cache, kernel or allocator state carries over between cases
and a crash costs one row only.

    .venv/bin/python benches/worker.py TASK OUT.json [--budget S] [--repeat N] [--threads N]

Tasks: ``case:<name>`` (see cases.py), ``cache:<name>``, ``layers``, ``bandwidth``, ``overhead``,
``interleaved``, ``checks``, ``symbolic``, ``generate``, ``batches``, ``vision_batches``,
``segmentation``, ``constants``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
# Repeated on every compile with caches disabled; it would bury the logs.
warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")

import cache  # noqa: E402
import compare  # noqa: E402
import constants  # noqa: E402
import layers  # noqa: E402
import measure  # noqa: E402
import probes  # noqa: E402
import shapes  # noqa: E402
import torch  # noqa: E402
from cases import all_cases  # noqa: E402


def run_task(task: str, budget_s: float, repeat: int | None) -> dict:
    kind, _, name = task.partition(":")
    if kind == "case":
        return compare.run_case(all_cases()[name], budget_s, repeat)
    if kind == "cache":
        return cache.first_call(name)
    if kind == "layers":
        return layers.resnet50_layers(budget_s, repeat)
    if kind == "bandwidth":
        return probes.bandwidth(budget_s, repeat)
    if kind == "overhead":
        return probes.call_overhead()
    if kind == "interleaved":
        return probes.interleaved(budget_s, repeat)
    if kind == "checks":
        return probes.checks(budget_s, repeat)
    if kind == "symbolic":
        return probes.symbolic(budget_s, repeat)
    if kind == "generate":
        return shapes.generate(budget_s, repeat)
    if kind == "batches":
        return shapes.batches(budget_s, repeat)
    if kind == "vision_batches":
        return shapes.vision_batches(budget_s, repeat)
    if kind == "segmentation":
        return shapes.segmentation(budget_s, repeat)
    if kind == "memory":
        return shapes.memory(budget_s, repeat)
    if kind == "constants":
        return constants.run(budget_s, repeat)
    raise ValueError(f"unknown task {task!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("out")
    parser.add_argument("--budget", type=float, default=0.75)
    parser.add_argument("--repeat", type=int)
    parser.add_argument("--threads", type=int)
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    try:
        result = run_task(opts.task, opts.budget, opts.repeat)
    except Exception as e:
        result = {"error": measure.error_text(e)}
    with open(opts.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
