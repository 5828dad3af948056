"""Functional collectives compiled in place, in this process, on a one-rank gloo group: the
kernel calls back into Python for each (``fxmlir.collectives``), on every call, in graph order;
a collective that raises raises from the call, naming its node; a collective on weights is
never hoisted out of the kernel; a wait on a collective that ran outside the kernel runs
eagerly. Two ranks are covered by ``test_distributed.py``."""

import fxmlir
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.fx
from fxmlir import collectives, partition
from op_harness import one_rank_group
from records import latest, since

ALL_REDUCE = "_c10d_functional.all_reduce.default"


@pytest.fixture(scope="module", autouse=True)
def one_rank():
    one_rank_group()


@pytest.fixture
def calls(monkeypatch):
    """The collectives the kernels' host calls run, in order (op, input shape)."""
    seen = []

    def recording(name, run):
        def wrapper(source, target, args):
            seen.append((name.split(".")[1], tuple(source.shape)))
            run(source, target, args)

        return wrapper

    for name, run in list(collectives.RUNNERS.items()):
        monkeypatch.setitem(collectives.RUNNERS, name, recording(name, run))
    return seen


def _model(x, w):
    world = dist.group.WORLD
    y = funcol.all_reduce(torch.relu(x @ w), "sum", world)
    gathered = funcol.all_gather_single(y * 2, 0, world)
    scattered = funcol.reduce_scatter_single(gathered + 1, "avg", 0, world)
    return funcol.broadcast(torch.tanh(scattered), 0, world).sum(0)


def test_collectives_run_in_the_kernel_in_order_on_every_call(calls):
    x, w = torch.randn(6, 5), torch.randn(5, 3)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False):
        compiled = torch.compile(_model, backend="fxmlir")
        for _ in range(2):
            torch.testing.assert_close(compiled(x, w), _model(x, w), rtol=1e-5, atol=1e-5)
    # One kernel for the whole function: the graph is not cut around the collectives.
    assert len(since(start)) == 1
    order = [("all_reduce", (6, 3)), ("all_gather_into_tensor", (6, 3))]
    order += [("reduce_scatter_tensor", (6, 3)), ("broadcast", (6, 3))]
    assert calls == order * 2


def test_a_collective_on_weights_is_not_hoisted(calls):
    layer = torch.nn.Linear(4, 4)

    def forward(x):
        w = funcol.all_reduce(layer.weight * 2, "sum", dist.group.WORLD)
        return x @ w.t()

    x = torch.randn(3, 4)
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=False):
        compiled = torch.compile(forward, backend="fxmlir")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), forward(x))
    assert calls == [("all_reduce", (4, 4))] * 3


def test_a_failing_collective_raises_from_the_call_naming_its_node(monkeypatch):
    def broken(source, target, args):
        raise ValueError("the network is down")

    monkeypatch.setitem(collectives.RUNNERS, ALL_REDUCE, broken)
    x, w = torch.randn(6, 5), torch.randn(5, 3)
    with fxmlir.config.patch(fallback="error", background=False):
        compiled = torch.compile(_model, backend="fxmlir")
        with pytest.raises(ValueError, match="the network is down") as raised:
            compiled(x, w)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "node `all_reduce` (_c10d_functional.all_reduce.default)" in notes
    assert "test_collectives.py" in notes
    # The process lives, and the next call raises the same way.
    with pytest.raises(ValueError, match="the network is down"):
        compiled(x, w)


def test_a_wait_on_a_collective_outside_the_graph_runs_eagerly():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4)
    wait = graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (x,))
    wait.meta["val"] = torch.empty(4)
    graph.output(wait)
    gm = torch.fx.GraphModule({}, graph)
    reason = partition.unsupported_nodes(gm)[wait.name]
    assert reason == "its lowerings (fxmlir) do not take this node"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_collectives_take_every_dtype_and_strided_inputs(dtype, calls):
    def fn(x):
        world = dist.group.WORLD
        gathered = funcol.all_gather_single(funcol.all_reduce(x.t(), "sum", world), 0, world)
        return funcol.all_to_all_single(gathered, None, None, world) * 3

    x = torch.arange(12).reshape(3, 4).to(dtype)
    with fxmlir.config.patch(fallback="error", background=False):
        compiled = torch.compile(fn, backend="fxmlir")
        out = compiled(x)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert [name for name, _ in calls] == [
        "all_reduce",
        "all_gather_into_tensor",
        "all_to_all_single",
    ]
