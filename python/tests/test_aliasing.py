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


@pytest.mark.parametrize(
    "fn", [_whole_and_strided_view, _view_before_its_base, _two_views_of_an_intermediate]
)
def test_views_among_outputs_share_memory_as_in_eager(fn):
    x = torch.randn(4, 6)
    graph = make_fx(fn, tracing_mode="fake")(x)
    assert aliasing.views_among_outputs(graph), "the graph's outputs alias"
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


def test_views_not_covered_by_one_output_keep_their_values():
    def halves(x):
        y = x + 2
        return y[:2], y[2:]

    x = torch.randn(4, 3)
    graph = make_fx(halves, tracing_mode="fake")(x)
    # Neither half holds the other: both are computed into buffers of their own.
    assert aliasing.views_among_outputs(graph) == []
    for got, want in zip(fxmlir.compile_graph(graph, [x])([x]), halves(x)):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_outputs_that_do_not_alias_are_left_alone():
    graph = make_fx(lambda x: (x + 1, x * 2), tracing_mode="fake")(torch.randn(3))
    assert aliasing.views_among_outputs(graph) == []


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
