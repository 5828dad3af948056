"""One case, eager vs Inductor vs fxmlir, in a fresh process: check each backend against eager,
time its first call (compile) after a process warm-up, then the median of its timed calls; for
fxmlir also keep the per-graph, per-stage compile timings from ``fxmlir.backend.history``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import measure
import torch
from cases import Case
from fxmlir import backend as fxmlir_backend

BACKENDS = ("inductor", "fxmlir")


def _last_seq() -> int:
    return max((r.seq for r in fxmlir_backend.history), default=-1)


def fxmlir_compiles(since_seq: int) -> dict[str, Any]:
    """fxmlir's compile records after ``since_seq``: each graph's stage timings (ms) and where
    its kernel came from (compiled, or reused from memory or from the disk cache), the
    per-stage sums over graphs and the total."""
    graphs = [
        {
            "name": r.name,
            "nodes": r.nodes,
            "source": getattr(r, "source", "memory" if r.cached else "compiled"),
            "total_ms": r.total_ms,
            "timings": dict(r.timings),
        }
        for r in fxmlir_backend.history
        if r.seq > since_seq
    ]
    stages: dict[str, float] = {}
    sources: dict[str, int] = {}
    for g in graphs:
        sources[g["source"]] = sources.get(g["source"], 0) + 1
        for stage, ms in g["timings"].items():
            if stage != "total":
                stages[stage] = stages.get(stage, 0.0) + ms
    return {
        "graphs": graphs,
        "stages_ms": stages,
        "total_ms": sum(g["total_ms"] for g in graphs),
        "sources": sources,
    }


def run_backend(
    backend: str,
    fn: Callable[..., Any],
    args: tuple,
    expected: Any,
    budget_s: float,
    repeat: int | None,
    time_calls: bool = True,
) -> dict[str, Any]:
    """First call, check and (with ``time_calls``) median time of one backend; an exception
    is recorded in ``error`` rather than raised."""
    result: dict[str, Any] = {}
    since = _last_seq()
    try:
        compiled, out, times = measure.first_call(backend, fn, args)
        result.update(times)
        result["check"] = measure.check(out, expected)
        if backend == "fxmlir":
            result["compile"] = fxmlir_compiles(since)
        if time_calls:
            result.update(measure.median_ms(compiled, args, budget_s, repeat))
    except Exception as e:  # a failing backend is reported, not fatal
        result["error"] = measure.error_text(e)
    return result


def run_case(case: Case, budget_s: float, repeat: int | None) -> dict[str, Any]:
    """Eager's time, and each backend's first call, check and time, by backend."""
    fn, args = case.build()
    row: dict[str, Any] = {}
    with torch.no_grad():
        measure.process_warmup(BACKENDS)
        expected = fn(*args)
        row["eager"] = measure.median_ms(fn, args, budget_s, repeat)
        for backend in BACKENDS:
            row[backend] = run_backend(backend, fn, args, expected, budget_s, repeat)
    return row
