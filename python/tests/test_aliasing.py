"""Graph outputs that are views of another output come back as views of it, as in eager
PyTorch: same values, and a write through one shows in the other."""

import json

import fxmlir
import pytest
import torch
from fxmlir.passes import aliasing
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


def test_an_output_that_views_an_input_is_that_view_of_the_argument():
    # A training forward saves a linear layer's transposed weight for the backward.
    def fn(w, x):
        return x @ w.t(), w.t()

    w, x = torch.randn(8, 4), torch.randn(2, 4)
    graph = make_fx(fn, tracing_mode="fake")(w, x)
    found = aliasing.aliases(graph)
    assert [(v.index, v.of, v.of_input, v.stride) for v in found.views] == [(1, 0, True, (1, 4))]
    compiled = aliasing.rebuilding(
        fxmlir.compile_graph(aliasing.without(graph, found), [w, x]), found
    )
    product, saved = compiled([w, x])
    torch.testing.assert_close(product, x @ w.t(), atol=ATOL, rtol=RTOL)
    assert saved.data_ptr() == w.data_ptr() and saved.stride() == (1, 4)
    assert torch.equal(saved, w.t())


def test_a_compiled_training_step_saves_weights_as_views(tmp_path):
    """BERT's training forward saves each linear layer's transposed weight for the backward:
    no kernel copies it out (it comes back as a view of the weight), nothing runs in eager
    PyTorch, and the gradients match."""
    transformers = pytest.importorskip("transformers", reason="make setup installs transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertModel(config).train()
    ids = torch.randint(0, 100, (2, 8))

    def step(fn):
        model.zero_grad()
        fn(ids).last_hidden_state.square().mean().backward()
        return [
            torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()
        ]

    expected = step(model)
    before = max((f.seq for f in fxmlir.partition.fallbacks), default=-1)
    with fxmlir.config.patch(dump_dir=str(tmp_path)):
        actual = step(torch.compile(model, backend="fxmlir"))
    # Attention's backward included: the backward graph compiles whole.
    assert [f.op for f in fxmlir.partition.fallbacks if f.seq > before] == []
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
    transposed = [
        node["name"]
        for path in tmp_path.glob("*.fx.json")
        for document in [json.loads(path.read_text())]
        for node in document["nodes"]
        if node["target"] == "aten.t.default"
        and node["args"][0]["ref"]["node"] in {i["name"] for i in document["inputs"]}
        and any(ref["node"] == node["name"] for ref in document["outputs"])
    ]
    assert transposed == []
