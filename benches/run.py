"""``make bench``: eager vs Inductor vs fxmlir on every case in one run, plus the probes.

Every task runs in a fresh process (benches/worker.py) with a fresh, empty FXMLIR_CACHE_DIR
and Inductor's caches disabled, so both compilers start cold. Per case: one warm-up compile of
an unrelated graph per backend (one-time process costs), eager's median time, then for each
backend the first call (Dynamo + aot_autograd + compile + one run), a check against eager and
the median time of repeated calls (about ``--budget`` seconds of calls, at least 5), all under
``torch.no_grad()`` with torch's thread count. Then: ResNet-50's convolutions one by one, the
memory-bandwidth probe, the call overhead probe, a compiled model interleaved with eager
parallel ops, weights as inputs vs constants and the disk cache cold/warm.

Writes bench-results/results.json, results.md and results.png (method: docs/performance.md).

    .venv/bin/python benches/run.py [--cases mlp,gemm_256,overhead] [--repeat 5] [--budget S]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import cache
import fxmlir
import machine
import report
import torch
from cases import all_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results"
WORKER = pathlib.Path(__file__).with_name("worker.py")
#: Tasks besides the cases, in the order they run.
EXPERIMENTS = (
    "layers",
    "overhead",
    "interleaved",
    "checks",
    "symbolic",
    "generate",
    "batches",
    "vision_batches",
    "segmentation",
    "memory",
    "constants",
    "cache",
)


class Runner:
    """Starts worker processes, one per task, and collects their JSON results."""

    def __init__(self, opts: argparse.Namespace):
        self.opts = opts
        self.logs = opts.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        for stale in self.logs.glob("*.log"):
            stale.unlink()
        self.spawned = 0
        #: Per task: wall time, seconds waited for a quiet machine, the fraction of the CPUs
        #: that other processes used while it ran, and each CPU's FMA speed before it.
        self.tasks: dict[str, dict[str, Any]] = {}

    def spawn(self, task: str, env_changes: dict[str, str] | None = None) -> dict[str, Any]:
        """Runs ``task`` in a new process; a crash or timeout becomes ``{"error": ...}``."""
        self.spawned += 1
        label = f"{self.spawned:02d}-{task.replace(':', '-')}"
        log = self.logs / f"{label}.log"
        waited, _ = machine.wait_until_quiet(self.opts.quiet_wait)
        if waited > 2:
            print(f"  (waited {waited:.0f} s for other work to stop)", flush=True)
        speeds = machine.cpu_speeds()
        with tempfile.TemporaryDirectory(prefix="fxmlir-bench-") as tmp:
            env = dict(os.environ, FXMLIR_CACHE_DIR=str(pathlib.Path(tmp, "cache")))
            env.pop("FXMLIR_DUMP_DIR", None)  # dumping slows compiles down
            env.update(env_changes or {})
            out = pathlib.Path(tmp, "result.json")
            cmd = [sys.executable, str(WORKER), task, str(out), "--budget", str(self.opts.budget)]
            if self.opts.repeat:
                cmd += ["--repeat", str(self.opts.repeat)]
            if self.opts.threads:
                cmd += ["--threads", str(self.opts.threads)]
            meter = machine.Meter()
            with log.open("w") as f:
                # A session of its own, so that a timeout also ends the worker's children
                # (Inductor's compile workers).
                proc = subprocess.Popen(
                    cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
                )
                try:
                    proc.wait(timeout=self.opts.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if out.exists():
                result = json.loads(out.read_text())
            elif proc.returncode == -signal.SIGKILL:
                result = {"error": f"timed out after {self.opts.timeout:.0f} s (log: {log})"}
            else:
                result = {"error": f"worker exited with {proc.returncode}: {_last_line(log)}"}
        wall, others = time.perf_counter() - meter.start[0], meter.others()
        self.tasks[label] = {
            "wall_s": wall,
            "waited_s": waited,
            "others_busy": others,
            "cpu_gflops": speeds,
        }
        result["others_busy"] = others
        result["cpu_gflops"] = speeds
        busy = (
            f"  (others used {others:.0%} of the CPUs)" if others > machine.BUSY_THRESHOLD else ""
        )
        if machine.is_uneven(speeds):
            busy += f"  (uneven CPUs: {', '.join(f'{g:.0f}' for g in speeds)} GFLOP/s)"
        failure = f"  ERROR {result['error']}" if "error" in result else ""
        print(f"  {task}: {wall:.0f} s{busy}{failure}", flush=True)
        return result


def _last_line(log: pathlib.Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return f"{lines[-1][:200] if lines else 'no output'} (log: {log})"


def meta() -> dict[str, Any]:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout.strip()

    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with local changes"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "fxmlir": fxmlir.__version__,
        "commit": commit,
        "python": platform.python_version(),
        "target": fxmlir.target_info()["summary"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated cases and experiments")
    parser.add_argument("--repeat", type=int, help="timed calls per measurement (default: adapt)")
    parser.add_argument("--budget", type=float, default=0.75, help="seconds of timed calls")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per task")
    parser.add_argument(
        "--quiet-wait", type=float, default=120, help="seconds to wait for other work to stop"
    )
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--list", action="store_true", help="list cases and experiments")
    opts = parser.parse_args()
    cases = all_cases()
    known = ["bandwidth", *cases, *EXPERIMENTS]
    if opts.list:
        print("\n".join(known))
        return 0
    selected = opts.cases.split(",") if opts.cases else known
    unknown = set(selected) - set(known)
    if unknown:
        sys.exit(f"unknown cases {sorted(unknown)}; known: {', '.join(known)}")
    if opts.threads:
        torch.set_num_threads(opts.threads)

    results: dict[str, Any] = {"meta": meta(), "cases": []}
    print(report.machine_line(results["meta"]), flush=True)
    runner = Runner(opts)
    start = time.perf_counter()
    for name in (n for n in known if n in selected):
        if name == "bandwidth":
            results["bandwidth"] = runner.spawn("bandwidth")
        elif name in cases:
            results["cases"].append(cases[name].header() | runner.spawn(f"case:{name}"))
        elif name in (
            "layers",
            "overhead",
            "interleaved",
            "checks",
            "symbolic",
            "generate",
            "batches",
            "vision_batches",
            "segmentation",
        ):
            results[name] = runner.spawn(name)
        elif name == "memory":
            # No disk cache: every graph is a real compile.
            results["memory"] = runner.spawn("memory", {"FXMLIR_CACHE_DIR": ""})
        elif name == "constants":
            # No disk cache: each variant is compiled several times and all must be real compiles.
            results["constants"] = runner.spawn("constants", {"FXMLIR_CACHE_DIR": ""})
        elif name == "cache":
            results["cache"] = [cache.cold_and_warm(c, runner.spawn) for c in cache.CASES]
    results["meta"]["wall_s"] = time.perf_counter() - start
    results["meta"]["tasks"] = runner.tasks
    text = report.write(results, opts.out)
    print("\n" + text)
    print(f"results: {opts.out}/results.json, results.md, results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
