"""Timing and checking primitives shared by every benchmark: medians over an adaptive number of
calls, per-call times of very short calls, first-call (compile) times and result checks."""

from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

#: Calls made before any timed call.
WARMUP_CALLS = 3
MIN_REPEAT = 5
MAX_REPEAT = 10_000


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The garbage collector neither runs inside a timed loop nor carries garbage into it."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def median_ms(
    fn: Callable[..., Any], args: tuple, budget_s: float, repeat: int | None = None
) -> dict[str, float]:
    """The median wall time of ``fn(*args)`` in ms after warm-up calls: :func:`interleaved_ms`
    of the one function. The number of timed calls is ``repeat`` if given, else what fits in
    ``budget_s`` seconds (at least ``MIN_REPEAT``)."""
    return interleaved_ms({"fn": fn}, args, budget_s, repeat)["fn"]


def _summary(times_ms: list[float]) -> dict[str, float]:
    return {
        "ms": statistics.median(times_ms),
        "min_ms": min(times_ms),
        "repeat": len(times_ms),
        # Spread of the middle half, relative to the median: a noisy measurement shows here.
        "iqr_rel": _iqr(times_ms) / statistics.median(times_ms),
    }


#: Wall time of one batch of a backend's calls in :func:`interleaved_ms`.
BATCH_S = 0.002


def interleaved_ms(
    calls: dict[str, Callable[..., Any]], args: tuple, budget_s: float, repeat: int | None = None
) -> dict[str, dict[str, float]]:
    """:func:`median_ms` of several functions of the same arguments (eager and the compiled
    backends of one case), timed in turns: each round runs a batch of calls of each function
    (about ``BATCH_S`` seconds of it) before the next, until the rounds have used ``budget_s``
    seconds per function (``repeat`` calls each if given, one per round). So every function is
    timed across the same stretch of time: on a shared host the speed moves by a third from
    one minute to the next, and timed one after the other, two backends could each catch a
    different phase and their ratio with it."""
    batches: dict[str, int] = {}
    with no_gc():
        for name, fn in calls.items():
            start = time.perf_counter()
            for _ in range(WARMUP_CALLS):
                fn(*args)
            estimate = (time.perf_counter() - start) / WARMUP_CALLS
            batches[name] = 1 if repeat else max(1, int(BATCH_S / max(estimate, 1e-9)))
        times: dict[str, list[float]] = {name: [] for name in calls}
        spent = 0.0
        rounds = 0
        while rounds < (repeat or MIN_REPEAT) or (
            repeat is None
            and spent < budget_s * len(calls)
            and all(len(t) < MAX_REPEAT for t in times.values())
        ):
            for name, fn in calls.items():
                for _ in range(batches[name]):
                    start = time.perf_counter()
                    fn(*args)
                    elapsed = time.perf_counter() - start
                    times[name].append(elapsed * 1e3)
                    spent += elapsed
            rounds += 1
    return {name: _summary(t) for name, t in times.items()}


def paired_ratio(
    a: Callable[..., Any], b: Callable[..., Any], args: tuple, rounds: int
) -> dict[str, float]:
    """The time of ``a(*args)`` over that of ``b(*args)``, as the median over ``rounds``
    rounds of the ratio within each round: a batch of calls of one (about ``BATCH_S``
    seconds), then a batch of the other, the order swapped every round. Two medians taken
    over the same stretch of time (:func:`interleaved_ms`) still each pick up the host's
    drift; a ratio within a round cancels most of it, and the swapped order cancels what the
    first batch of a round leaves the second (warm caches, a clock ramping up). Also the spread
    of the middle half of the ratios."""
    with no_gc():
        batch = {}
        for name, fn in (("a", a), ("b", b)):
            start = time.perf_counter()
            for _ in range(WARMUP_CALLS):
                fn(*args)
            estimate = (time.perf_counter() - start) / WARMUP_CALLS
            batch[name] = max(1, int(BATCH_S / max(estimate, 1e-9)))
        calls = max(batch.values())

        def timed(fn: Callable[..., Any]) -> float:
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            return time.perf_counter() - start

        ratios = []
        for r in range(rounds):
            if r % 2:
                tb, ta = timed(b), timed(a)
            else:
                ta, tb = timed(a), timed(b)
            ratios.append(ta / tb)
    return {"ratio": statistics.median(ratios), "iqr": _iqr(ratios), "rounds": rounds}


def _iqr(values: list[float]) -> float:
    if len(values) < 4:
        return 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def per_call_us(fn: Callable[[], Any], batch: int = 1000, samples: int = 15) -> float:
    """Per-call time in µs of a call too short to time alone: the median over ``samples``
    batches of ``batch`` calls each."""
    with no_gc():
        for _ in range(batch):
            fn()
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - start) / batch)
    return statistics.median(times) * 1e6


#: The span Dynamo times around a backend's compile (``torch._dynamo.utils``).
BACKEND_SPAN = "OutputGraph.call_user_compiler"


def first_call(
    backend: str, fn: Callable[..., Any], args: tuple
) -> tuple[Callable, Any, dict[str, float]]:
    """``torch.compile(fn, backend=backend)`` from a reset Dynamo, and its first call: the
    compiled function, its result and the first call's times in ms: ``first_call_ms``, the
    wall time (Dynamo tracing, the backend and one run), and ``backend_compile_ms``, the part
    Dynamo spent in the backend (the ATen graph's capture, by aot_autograd or fxmlir's own
    trace, and the compile; summed over graphs if Dynamo split the function)."""
    torch._dynamo.reset()
    # The fake-tensor dispatch cache outlives a reset: the second backend would trace faster.
    FakeTensorMode.cache_clear()
    spans = torch._dynamo.utils.compilation_time_metrics
    spans.pop(BACKEND_SPAN, None)
    compiled = torch.compile(fn, backend=backend)
    start = time.perf_counter()
    out = compiled(*args)
    wall = (time.perf_counter() - start) * 1e3
    backend_s = sum(spans.get(BACKEND_SPAN, []))
    return compiled, out, {"first_call_ms": wall, "backend_compile_ms": backend_s * 1e3}


#: Tolerances (relative, and absolute per unit of the largest magnitude) of half-precision
#: outputs: a compiled graph keeps its intermediates in f32 where eager rounds each op's
#: result, so a bf16 model's outputs differ by a few units of bf16's 8-bit precision.
HALF_TOLERANCE = {torch.bfloat16: 5e-2, torch.float16: 1e-2}


def check(actual: Any, expected: Any, rtol: float = 1e-3, atol: float = 1e-3) -> dict[str, Any]:
    """Whether every tensor of ``actual`` matches ``expected`` (eager), with the absolute
    tolerance scaled by the largest expected magnitude (both at least ``HALF_TOLERANCE`` for
    half types), and the largest absolute error."""
    got, want = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(got) != len(want):
        return {"ok": False, "detail": f"{len(got)} outputs, eager has {len(want)}"}
    ok, worst = True, 0.0
    for a, e in zip(got, want):
        if not isinstance(e, torch.Tensor):
            ok = ok and a == e
            continue
        if a.shape != e.shape or a.dtype != e.dtype:
            detail = f"got {a.dtype}{list(a.shape)}, eager {e.dtype}{list(e.shape)}"
            return {"ok": False, "detail": detail}
        if e.numel() == 0:
            continue
        scale = max(1.0, e.abs().max().item())
        worst = max(worst, (a - e).abs().max().item())
        half = HALF_TOLERANCE.get(e.dtype, 0.0)
        ok = ok and torch.allclose(
            a, e, rtol=max(rtol, half), atol=max(atol, half) * scale, equal_nan=True
        )
    return {"ok": bool(ok), "max_abs_err": worst}


def compile_document(text: str) -> Any:
    """``fxmlir._fxmlir.compile`` as fxmlir's runtime calls it (``config.target``, torch's
    thread count), with no dumps and no disk cache."""
    import fxmlir
    from fxmlir import _fxmlir

    return _fxmlir.compile(
        text, "default", None, None, fxmlir.config.target, torch.get_num_threads()
    ).wait()


def error_text(e: BaseException) -> str:
    """One line naming an exception, short enough for a table cell. Dynamo wraps a backend's
    exception in ``BackendCompilerFailed``, whose first line says nothing: name the inner one.
    The full traceback goes to stderr (the task's log)."""
    traceback.print_exception(e, file=sys.stderr)
    inner = getattr(e, "inner_exception", None)
    if inner is not None:
        e = inner
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def process_warmup(backends: tuple[str, ...] = ("inductor", "fxmlir")) -> None:
    """Compiles an unrelated tiny graph with each backend, so that one-time process costs
    (imports, compiler probes, LLVM initialisation) stay out of the first-call figures, while
    nothing the measured graph could reuse is cached."""

    def warmup(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 3.0 - 1.0

    x = torch.randn(7, 3)
    for backend in backends:
        # A failure shows in the measured case instead.
        with torch.no_grad(), contextlib.suppress(Exception):
            first_call(backend, warmup, (x,))
    torch._dynamo.reset()
