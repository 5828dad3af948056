"""One case, eager vs Inductor vs fxmlir, in a fresh process: check each backend against eager,
time its first call (compile) after a process warm-up, then the median of its timed calls; for
fxmlir also keep the per-graph, per-stage compile timings from ``fxmlir.backend.history``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fxmlir
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
    per-stage sums over graphs, the total, the part of it compiled in the background (beside
    Dynamo) and how long first calls waited for those kernels."""
    graphs = [
        {
            "name": r.name,
            "nodes": r.nodes,
            "source": getattr(r, "source", "memory" if r.cached else "compiled"),
            "total_ms": r.total_ms,
            "timings": dict(r.timings),
            "background": r.background,
            "waited_ms": r.waited_ms,
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
        "background_ms": sum(g["total_ms"] for g in graphs if g["background"]),
        "waited_ms": sum(g["waited_ms"] for g in graphs),
        "sources": sources,
    }


def first_call(
    backend: str, fn: Callable[..., Any], args: tuple, expected: Any
) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    """The compiled function and the first call, check (and for fxmlir the compile records)
    of one backend; an exception is recorded in ``error`` rather than raised, and gives no
    function."""
    result: dict[str, Any] = {}
    since = _last_seq()
    try:
        compiled, out, times = measure.first_call(backend, fn, args)
        result.update(times)
        result["check"] = measure.check(out, expected)
        if backend == "fxmlir":
            result["compile"] = fxmlir_compiles(since)
            # A kernel compiled on a thread of its own, beside Dynamo, is backend time
            # too: the first call hides some of it, the compile bar counts all of it.
            result["backend_compile_ms"] += result["compile"]["background_ms"]
    except Exception as e:  # a failing backend is reported, not fatal
        result["error"] = measure.error_text(e)
        return None, result
    return compiled, result


def paired_with_copy(fn: Callable[..., Any], args: tuple, rounds: int) -> dict[str, Any]:
    """fxmlir's calls of a bandwidth case alternated with the reference copy
    (``dst.copy_(src)`` on a tensor like the case's input, the same bytes read and written),
    so that both are timed on the same machine: on a shared host the bandwidth moves by a
    third from one minute to the next, and the bandwidth probe runs in another task. The
    medians of each, in ms, over ``rounds`` rounds of one call each (the kernel from the first
    compile in this process is reused)."""
    compiled = torch.compile(fn, backend="fxmlir")
    src = args[0]
    dst = torch.empty_like(src)
    calls = {"copy_ms": lambda: dst.copy_(src), "fxmlir_ms": lambda: compiled(*args)}
    times = measure.interleaved_ms(calls, (), 0.0, rounds)
    return {name: t["ms"] for name, t in times.items()} | {"rounds": rounds}


#: Rounds of the paired measurement (one copy and one fxmlir call each, about 10 ms).
PAIRED_ROUNDS = 100


def run_case(case: Case, budget_s: float, repeat: int | None) -> dict[str, Any]:
    """:func:`compare_backends` on the case's function; for a bandwidth case also fxmlir
    paired with the reference copy, for a real-size case the flops and the FMA peak."""
    fn, args = case.build()
    with torch.no_grad():
        measure.process_warmup(BACKENDS)
        row = compare_backends(fn, args, budget_s, repeat)
        if case.group == "bandwidth" and "error" not in row["fxmlir"]:
            row["paired"] = paired_with_copy(fn, args, repeat or PAIRED_ROUNDS)
        if case.group == "real":
            row["flops"] = counted_flops(fn, args)
            row["peak_gflops"] = fxmlir.fma_peak()
    return row


def compare_backends(
    fn: Callable[..., Any], args: tuple, budget_s: float, repeat: int | None
) -> dict[str, Any]:
    """Each backend's first call and check, then the times of eager and of every backend
    that compiled, taken in turns (:func:`measure.interleaved_ms`), by backend."""
    row: dict[str, Any] = {}
    with torch.no_grad():
        expected = fn(*args)
        calls: dict[str, Callable[..., Any]] = {"eager": fn}
        for backend in BACKENDS:
            compiled, row[backend] = first_call(backend, fn, args, expected)
            if compiled is not None:
                calls[backend] = compiled
        # Each first call started from a reset Dynamo, which dropped the code the backends
        # before it compiled: one more (untimed) call compiles each of those again.
        for name, compiled in calls.items():
            try:
                compiled(*args)
            except Exception as e:  # reported like a first-call failure, not fatal
                row.setdefault(name, {})["error"] = measure.error_text(e)
        timed = {name: c for name, c in calls.items() if "error" not in row.get(name, {})}
        for name, times in measure.interleaved_ms(timed, args, budget_s, repeat).items():
            row.setdefault(name, {}).update(times)
    return row


def counted_flops(fn: Callable[..., Any], args: tuple) -> int:
    """Floating-point operations of one eager call of ``fn``, as ``torch.utils.flop_counter``
    counts them (products, convolutions and attention: 2 per multiply-add). The fused fast
    path of ``nn.MultiheadAttention`` is off meanwhile: the counter does not know its op
    (``aten._native_multi_head_attention``), and ViT-Base's projections and attention, a third
    of its work, went uncounted (22.5 GFLOP counted for 35.1)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with counter:
            fn(*args)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return counter.get_total_flops()
