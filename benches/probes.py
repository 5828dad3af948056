"""Machine and runtime probes: the memory bandwidth that a large torch copy reaches, the
per-call cost of fxmlir's call path on a graph whose kernel does almost nothing, and what a
compiled model costs when eager parallel ops run between its calls."""

from __future__ import annotations

import time
from typing import Any

import fxmlir
import measure
import torch
from cases import BANDWIDTH_ELEMENTS, FLOAT_BYTES, all_cases
from fxmlir import backend, interchange
from torch.fx.experimental.proxy_tensor import make_fx


def bandwidth(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """Read+write bytes per second of ``dst.copy_(src)`` on 128 MiB tensors (the measured
    bandwidth, torch's threads), the same on one thread, and of ``src.clone()``, which also
    pays for a fresh allocation (page faults) as every out-of-place op does."""
    src = torch.randn(BANDWIDTH_ELEMENTS)
    dst = torch.empty_like(src)
    moved = 2 * FLOAT_BYTES * BANDWIDTH_ELEMENTS

    def gbps(fn) -> float:
        return moved / measure.median_ms(fn, (), budget_s, repeat)["ms"] / 1e6

    threads = torch.get_num_threads()
    result = {"bytes": moved, "threads": threads, "copy_gbps": gbps(lambda: dst.copy_(src))}
    torch.set_num_threads(1)
    try:
        result["copy_1thread_gbps"] = gbps(lambda: dst.copy_(src))
    finally:
        torch.set_num_threads(threads)
    result["clone_gbps"] = gbps(src.clone)
    return result


def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def call_overhead() -> dict[str, Any]:
    """Per-call µs of ``x + 1`` on a one-element tensor: eager; fxmlir's kernel alone
    (``Kernel.run`` on prepared pointers: the floor of a call from Python); fxmlir's call path
    without Dynamo (``fxmlir.compile_graph`` on the ATen graph: checks inputs, allocates the
    output, runs the kernel); and the function compiled by ``torch.compile`` with fxmlir and
    with Inductor (adds Dynamo's guards and aot_autograd's wrapper)."""
    x = torch.ones(1)
    result: dict[str, Any] = {}
    with torch.no_grad():
        result["eager_us"] = measure.per_call_us(lambda: add_one(x))

        graph = make_fx(add_one, tracing_mode="fake")(x)
        kernel = measure.compile_document(interchange.export(graph, "overhead_probe").to_json())
        out = torch.empty(1)
        pointers = [x.data_ptr(), out.data_ptr()]
        kernel.run(pointers)
        assert out.item() == 2.0, out
        result["kernel_us"] = measure.per_call_us(lambda: kernel.run(pointers))

        call_path = fxmlir.compile_graph(graph, [x])
        assert call_path([x])[0].item() == 2.0
        result["call_path_us"] = measure.per_call_us(lambda: call_path([x]))

        for backend in ("fxmlir", "inductor"):
            compiled, out, _ = measure.first_call(backend, add_one, (x,))
            assert out.item() == 2.0, (backend, out)
            result[f"torch_compile_{backend}_us"] = measure.per_call_us(lambda c=compiled: c(x))
    result["call_path_overhead_us"] = result["call_path_us"] - result["kernel_us"]
    result["torch_compile_overhead_us"] = result["torch_compile_fxmlir_us"] - result["kernel_us"]
    return result


#: The eager op run between the compiled model's calls: a parallel ``torch.mm`` (256³).
INTERLEAVED_MM = 256


def interleaved(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """The MLP case compiled by each backend, timed alone, next to an eager parallel
    ``torch.mm`` timed alone, and the two called in turn (as a model with a graph break, or a
    training loop's eager work, calls them). "Excess" is the pair's time beyond the sum of the
    two alone: what the compiled code and torch's own parallel ops cost each other."""
    fn, args = all_cases()["mlp"].build()
    a, b = torch.randn(INTERLEAVED_MM, INTERLEAVED_MM), torch.randn(INTERLEAVED_MM, INTERLEAVED_MM)
    result: dict[str, Any] = {"case": "mlp", "mm": INTERLEAVED_MM}
    with torch.no_grad():
        expected = fn(*args)
        result["eager_mm_ms"] = measure.median_ms(torch.mm, (a, b), budget_s, repeat)["ms"]
        for backend in ("inductor", "fxmlir"):
            compiled, out, _ = measure.first_call(backend, fn, args)
            check = measure.check(out, expected)
            assert check["ok"], (backend, check)
            alone = measure.median_ms(compiled, args, budget_s, repeat)["ms"]

            def pair(c=compiled):
                c(*args)
                torch.mm(a, b)

            both = measure.median_ms(pair, (), budget_s, repeat)["ms"]
            result[backend] = {
                "alone_ms": alone,
                "with_mm_ms": both,
                "excess_ms": both - alone - result["eager_mm_ms"],
            }
    return result


#: The checks probe's embedding: a 50k x 256 table (a small language model's), 8k ids.
CHECKED_ROWS, CHECKED_WIDTH, CHECKED_IDS = 50_000, 256, 8192


def _embedding_sum(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(ids, table).sum(-1)


def _int_divisions(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a // b + a % b


def checks(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """What the run-time checks cost: an embedding lookup (the ids checked against the table's
    rows) and integer floor division and remainder (the divisors checked for zero), compiled
    with checks and without (``fxmlir.config.checks``), timed in turns with eager."""
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(CHECKED_ROWS, CHECKED_WIDTH, generator=generator)
    ids = torch.randint(0, CHECKED_ROWS, (CHECKED_IDS,), generator=generator)
    a = torch.randint(-1000, 1000, (1 << 20,), generator=generator)
    b = torch.randint(1, 50, (1 << 20,), generator=generator)
    result: dict[str, Any] = {}
    for name, fn, args in (
        ("embedding", _embedding_sum, (table, ids)),
        ("int_division", _int_divisions, (a, b)),
    ):
        graph = make_fx(fn, decomposition_table=backend.decompositions(), tracing_mode="fake")(
            *args
        )
        calls = {"eager": fn}
        for checked in (True, False):
            with fxmlir.config.patch(checks=checked, fallback="error", background=False):
                compiled = fxmlir.compile_graph(graph, list(args))
            calls["checked" if checked else "unchecked"] = lambda *xs, c=compiled: c(list(xs))
        times = measure.interleaved_ms(calls, args, budget_s, repeat)
        result[name] = {k: v["ms"] for k, v in times.items()}
        result[name]["cost"] = times["checked"]["ms"] / times["unchecked"]["ms"] - 1
    return result


#: The symbolic probe's block: x of ``(n, SYMBOLIC_TOKENS, SYMBOLIC_WIDTH)`` for the batch
#: sizes ``SYMBOLIC_BATCHES`` (in this order), timed at ``SYMBOLIC_TIMED``.
SYMBOLIC_TOKENS, SYMBOLIC_WIDTH = 64, 256
SYMBOLIC_BATCHES = (7, 2, 16, 11, 3, 29, 5, 24, 13, 32)
SYMBOLIC_TIMED = 16
#: The sizes at which the kernel for every size is compared with a kernel for that size alone
#: (:func:`measure.paired_ratio`, ``SYMBOLIC_ROUNDS`` rounds each).
SYMBOLIC_COMPARED = (2, 16, 32)
SYMBOLIC_ROUNDS = 41


def _normalized_block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.layer_norm(x, (SYMBOLIC_WIDTH,), w, b)
    return torch.softmax(y * 0.5, dim=-1) + torch.nn.functional.gelu(y)


def symbolic(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """A graph compiled for every size (``dynamic=True``): a layer norm, a softmax and a GELU
    called at ten batch sizes. Per backend: the first pass over the sizes (compiles included)
    and the graphs compiled; then at one size, in turns: eager, Inductor (``dynamic=True``),
    fxmlir's kernel for every size and fxmlir's kernel for that size alone (``dynamic=False``).
    ``costs``: at each of ``SYMBOLIC_COMPARED``, the kernel for every size's time over that of
    a kernel for that size alone, minus one (:func:`measure.paired_ratio`); ``cost``, the
    largest."""
    w, b = torch.randn(SYMBOLIC_WIDTH), torch.randn(SYMBOLIC_WIDTH)
    inputs = [torch.randn(n, SYMBOLIC_TOKENS, SYMBOLIC_WIDTH) for n in SYMBOLIC_BATCHES]
    result: dict[str, Any] = {"batches": list(SYMBOLIC_BATCHES), "timed_batch": SYMBOLIC_TIMED}
    calls: dict[str, Any] = {"eager": _normalized_block}
    with torch.no_grad(), fxmlir.config.patch(specializations=0):
        for name, backend_name, dynamic in (
            ("inductor", "inductor", True),
            ("fxmlir", "fxmlir", True),
            ("fxmlir_static", "fxmlir", False),
        ):
            torch._dynamo.reset()
            first = max((r.seq for r in backend.history), default=-1)
            compiled = torch.compile(_normalized_block, backend=backend_name, dynamic=dynamic)
            start = time.perf_counter()
            for x in inputs if dynamic else [inputs[SYMBOLIC_BATCHES.index(SYMBOLIC_TIMED)]]:
                out = compiled(x, w, b)
                expected = _normalized_block(x, w, b)
                assert measure.check(out, expected)["ok"], (name, x.shape)
            if dynamic:
                result[name] = {"first_pass_ms": (time.perf_counter() - start) * 1e3}
            if backend_name == "fxmlir":
                records = [r for r in backend.history if r.seq > first]
                result[name] = result.get(name, {}) | {
                    "kernels": len(records),
                    "symbolic": all(r.symbols for r in records),
                }
            calls[name] = compiled
        x = inputs[SYMBOLIC_BATCHES.index(SYMBOLIC_TIMED)]
        times = measure.interleaved_ms(calls, (x, w, b), budget_s, repeat)
        result["ms"] = {k: v["ms"] for k, v in times.items()}
        result["costs"] = {}
        for n in SYMBOLIC_COMPARED:
            x = inputs[SYMBOLIC_BATCHES.index(n)]
            static = calls["fxmlir_static"] if n == SYMBOLIC_TIMED else _static_block(x, w, b)
            paired = measure.paired_ratio(
                calls["fxmlir"], static, (x, w, b), repeat or SYMBOLIC_ROUNDS
            )
            result["costs"][str(n)] = {"cost": paired["ratio"] - 1, "iqr": paired["iqr"]}
    result["cost"] = max(c["cost"] for c in result["costs"].values())
    return result


def _static_block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
    """``_normalized_block`` compiled by fxmlir for the size of ``x`` alone, checked."""
    torch._dynamo.reset()
    compiled = torch.compile(_normalized_block, backend="fxmlir", dynamic=False)
    assert measure.check(compiled(x, w, b), _normalized_block(x, w, b))["ok"], x.shape
    return compiled
