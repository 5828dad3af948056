"""Graph outputs that are views of another output come back as views of it, as in eager
PyTorch: same values, and a write through one shows in the other."""

import fxmlir
import pytest
import torch
from fxmlir import aliasing
from torch.fx.experimental.proxy_tensor import make_fx

# Elementwise work only: exact but for exp, whose vectorised form differs from eager's by an
# ulp.
ATOL = RTOL = 1e-6


def _whole_and_strided_view(x):
    y = x + 1
    return y, y[1:, ::2]


def _view_before_its_base(x):
    y = x * 3
    return y.t(), y


def _two_views_of_an_intermediate(x):
    y = torch.exp(x)
    return y.view(-1), y.t(), x - 1


def _halves(x):
    # Neither half holds the other: both are views of the intermediate, which the compiled
    # graph returns for them.
    y = x + 2
    return y[:2], y[2:]


def _overlapping_windows_and_a_copy(x):
    y = x * x
    return y[:3], y[1:], y.sum(0)


@pytest.mark.parametrize(
    "fn",
    [
        _whole_and_strided_view,
        _view_before_its_base,
        _two_views_of_an_intermediate,
        _halves,
        _overlapping_windows_and_a_copy,
    ],
)
def test_views_among_outputs_share_memory_as_in_eager(fn):
    x = torch.randn(4, 6)
    graph = make_fx(fn, tracing_mode="fake")(x)
    assert aliasing.aliases(graph), "the graph's outputs alias"
    actual = fxmlir.compile_graph(graph, [x])([x])
    expected = fn(x)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
        assert got.stride() == want.stride()

    # Which outputs share memory matches eager, and a write through one shows in the others.
    def shares(outputs):
        return [
            [a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in outputs]
            for a in outputs
        ]

    assert shares(actual) == shares(expected)
    actual[0].fill_(7.0)
    expected[0].fill_(7.0)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_outputs_not_covered_by_one_output_are_views_of_their_base():
    graph = make_fx(_halves, tracing_mode="fake")(torch.randn(4, 3))
    found = aliasing.aliases(graph)
    assert [v.index for v in found.views] == [0, 1]
    assert [str(b.target) for b in found.bases] == ["aten.add.Tensor"]
    # The compiled graph returns the base alone; the call rebuilds both halves from it.
    trimmed = aliasing.without(graph, found)
    (output,) = trimmed.graph.find_nodes(op="output")
    assert [str(n.target) for n in output.args[0]] == ["aten.add.Tensor"]


def test_outputs_that_do_not_alias_are_left_alone():
    graph = make_fx(lambda x: (x + 1, x * 2), tracing_mode="fake")(torch.randn(3))
    assert not aliasing.aliases(graph)


def test_torch_compile_returns_a_base_and_its_view_sharing_memory():
    def fn(x):
        y = torch.relu(x) + 1
        return y, y.view(2, -1)

    x = torch.randn(4, 4)
    with torch.no_grad():
        base, view = torch.compile(fn, backend="fxmlir")(x)
    torch.testing.assert_close(view, fn(x)[1], atol=ATOL, rtol=RTOL)
    base.zero_()
    assert view.abs().sum().item() == 0
