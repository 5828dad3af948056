"""Background compiles (``config.background``): the backend returns before the kernel is
compiled, the first call waits for it and records the wait, a compile that fails there falls
back to partitions, and strict mode still raises at compile time."""

import time

import fxmlir
import pytest
import torch
from fxmlir import backend, partition
from records import latest, since
from torch.fx.experimental.proxy_tensor import make_fx


def _topk_graph(x: torch.Tensor):
    """A graph of supported ops whose ``topk`` fails in the lowering (k = 0 of a 0-d tensor:
    fxmlir refuses it, eager returns the element), beside ``exp`` and ``add`` it compiles."""

    def fn(a):
        values, indices = torch.ops.aten.topk.default(a, 0)
        return torch.ops.aten.add.Tensor(torch.ops.aten.exp.default(a), 1.0), values, indices

    return fn, make_fx(fn, tracing_mode="fake")(x)


def test_first_call_waits_for_the_kernel_and_records_the_wait():
    def fn(a, b):
        return torch.tanh(a @ b) * 3.0

    a, b = torch.randn(37, 19), torch.randn(19, 23)
    gm = make_fx(fn, tracing_mode="fake")(a, b)
    start = latest()
    with fxmlir.config.patch(background=True, cache_dir=None):
        compiled = fxmlir.compile_graph(gm, [a, b])
    # The kernel is recorded when the first call has it, not when the backend returns.
    assert not since(start)
    (out,) = compiled([a, b])
    torch.testing.assert_close(out, fn(a, b), rtol=1e-5, atol=1e-5)
    (record,) = since(start)
    assert record.source == "compiled" and record.waited_ms >= 0.0
    assert dict(record.timings)["total"] > 0.0
    # Later calls run the kernel without compiling or recording again.
    torch.testing.assert_close(compiled([2 * a, b])[0], fn(2 * a, b), rtol=1e-5, atol=1e-5)
    assert len(since(start)) == 1


def test_without_background_the_kernel_exists_when_the_backend_returns():
    a = torch.randn(41)
    gm = make_fx(lambda a: torch.sin(a) + 2.0, tracing_mode="fake")(a)
    start = latest()
    with fxmlir.config.patch(background=False, cache_dir=None):
        compiled = fxmlir.compile_graph(gm, [a])
    (record,) = since(start)
    assert record.waited_ms == 0.0
    torch.testing.assert_close(compiled([a])[0], torch.sin(a) + 2.0)


def test_a_failed_background_compile_falls_back_to_partitions_at_the_first_call():
    x = torch.tensor(0.5)
    fn, gm = _topk_graph(x)
    fallbacks = len(partition.fallbacks)
    with fxmlir.config.patch(background=True):
        compiled = fxmlir.compile_graph(gm, [x])
        out = compiled([x])
    for got, want in zip(out, fn(x), strict=True):
        torch.testing.assert_close(got, want)
    (fallback,) = list(partition.fallbacks)[fallbacks:]
    assert fallback.op == "aten.topk.default"
    assert "topk with k = 0 of a 0-d tensor is not supported" in fallback.reason


def test_strict_mode_raises_at_compile_time():
    x = torch.tensor(0.5)
    _, gm = _topk_graph(x)
    with fxmlir.config.patch(background=True, fallback="error"):
        with pytest.raises(fxmlir.LoweringError, match="`topk`.*k = 0 of a 0-d tensor"):
            fxmlir.compile_graph(gm, [x])


def test_background_compiles_through_torch_compile_match_eager():
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))
    x = torch.randn(5, 24)
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(background=True):
        compiled = torch.compile(model, backend="fxmlir")
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled(x + 1), model(x + 1), rtol=1e-5, atol=1e-5)
    # One graph, compiled (or reused) once: the second call did not compile again.
    assert len(since(start)) == 1


def test_background_compiles_run_side_by_side():
    """Two graphs compiling at once (as the forward and backward graphs of a training step
    do), each on its own thread, give their own kernels."""
    a = torch.randn(29, 31)
    graphs = {
        "exp": make_fx(lambda a: torch.exp(a) - 1.0, tracing_mode="fake")(a),
        "mm": make_fx(lambda a: torch.relu(a @ a.t()), tracing_mode="fake")(a),
    }
    with fxmlir.config.patch(background=True, cache_dir=None):
        compiled = {name: fxmlir.compile_graph(gm, [a]) for name, gm in graphs.items()}
    torch.testing.assert_close(compiled["mm"]([a])[0], torch.relu(a @ a.t()), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled["exp"]([a])[0], torch.exp(a) - 1.0)


def test_a_background_compile_raises_its_error_on_every_wait():
    from fxmlir import _fxmlir

    job = _fxmlir.compile("{ not json", background=True)
    for _ in range(2):
        with pytest.raises(fxmlir.GraphError):
            job.wait()


def _dynamic_softmax():
    """A graph with symbolic sizes compiled per size: a diagonal takes no symbolic sizes (see
    ``test_symbolic.py`` for graphs compiled once for every size)."""

    def fn(a):
        return torch.softmax(a * 3.0, dim=-1).diagonal()

    return fn, make_fx(fn, tracing_mode="symbolic")(torch.randn(5, 6))


def _call(compiled: backend.GraphCompiler, fn, x: torch.Tensor) -> None:
    """One call of the compiled dynamic graph, checked against ``fn``."""
    torch.testing.assert_close(compiled([x])[0], fn(x), rtol=1e-5, atol=1e-5)


def _wait_for(compiled: backend.GraphCompiler) -> None:
    for _ in range(3000):
        if compiled.compiling is None or compiled.compiling[1].done():
            return
        time.sleep(0.01)
    raise AssertionError("the background compile did not finish in 30 s")


@pytest.mark.parametrize("background", [True, False], ids=["background", "foreground"])
def test_a_new_size_compiles_on_its_second_call_or_at_once(background):
    """With ``background``, a size's first call runs eagerly and its second compiles it;
    without, its first call compiles it."""
    fn, gm = _dynamic_softmax()
    # Sizes of their own: a kernel compiled by the other case would be reused from memory.
    x = torch.randn(5 if background else 7, 6)
    start = latest()
    with fxmlir.config.patch(background=background, cache_dir=None):
        compiled = fxmlir.compile_graph(gm, [x])
        _call(compiled, fn, x)
        assert len(since(start)) == (0 if background else 1)
        for _ in range(2):
            _call(compiled, fn, x)
    (record,) = since(start)
    assert not record.background and record.source == "compiled"


def test_sizes_that_keep_changing_compile_in_the_background_when_they_recur():
    fn, gm = _dynamic_softmax()
    sizes = [torch.randn(n, 6) for n in (3, 4, 5, 6)]
    start = latest()
    with fxmlir.config.patch(background=True, cache_dir=None):
        compiled = fxmlir.compile_graph(gm, [sizes[0]])
        for x in sizes:
            _call(compiled, fn, x)
        # More sizes than a stable graph has: a recurring one starts a background compile
        # and runs eagerly.
        _call(compiled, fn, sizes[0])
        assert compiled.compiling is not None and not since(start)
        # Called again while it compiles: not queued a second time.
        _call(compiled, fn, sizes[0])
        assert not compiled.queued
        _wait_for(compiled)
        # The next call takes the kernel.
        _call(compiled, fn, sizes[0])
    (record,) = since(start)
    assert record.background and record.source == "compiled"
    assert len(compiled.specialized) == 1


def test_sizes_whose_compile_fails_keep_running_eagerly(caplog):
    fn, gm = _dynamic_softmax()
    x = torch.randn(3, 6)
    with fxmlir.config.patch(background=True, pipeline="no-such-pipeline"):
        compiled = fxmlir.compile_graph(gm, [x])
        with caplog.at_level("INFO", logger="fxmlir"):
            for _ in range(4):
                _call(compiled, fn, x)
    assert len(compiled.failed) == 1 and not compiled.specialized
    assert "run eagerly: their compile failed" in caplog.text
    assert "no-such-pipeline" in caplog.text


def test_without_background_a_failing_compile_of_new_sizes_raises():
    fn, gm = _dynamic_softmax()
    x = torch.randn(3, 6)
    with fxmlir.config.patch(background=False, pipeline="no-such-pipeline"):
        compiled = fxmlir.compile_graph(gm, [x])
        with pytest.raises(fxmlir.FxmlirError, match="no-such-pipeline"):
            compiled([x])


def test_a_graph_keeps_a_bounded_number_of_per_size_kernels():
    fn, gm = _dynamic_softmax()
    with fxmlir.config.patch(background=False, sizes_per_graph=2):
        compiled = fxmlir.compile_graph(gm, [torch.randn(3, 6)])
        for n in [3, 4, 5, 4, 6, 7, 3]:
            _call(compiled, fn, torch.randn(n, 6))
            assert len(compiled.specialized) <= 2
    # The most recently used sizes are the ones kept (the rows; every call has 6 columns).
    kept = [sorted(value for _, value in key) for key in compiled.specialized]
    assert kept == [[6, 7], [3, 6]]
