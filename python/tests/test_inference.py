"""Which graphs skip aot_autograd (fxmlir.inference) and which go through it, and that both
match eager: an inference graph is traced once by fxmlir; a graph that needs gradients,
mutates an input, returns an alias of an input or has symbolic sizes keeps aot_autograd's
semantics."""

import json

import fxmlir
import torch
from torch._dynamo.utils import counters

# Sums of a few hundred products, in another order than eager's.
ATOL = RTOL = 1e-4


def _aot_graphs(fn, *args, **compile_kwargs):
    """``fn`` compiled by fxmlir and called on ``args``: its result and how many graphs went
    through aot_autograd."""
    torch._dynamo.reset()
    before = counters["aot_autograd"]["total"]
    result = torch.compile(fn, backend="fxmlir", **compile_kwargs)(*args)
    return result, counters["aot_autograd"]["total"] - before


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)
    ).eval()


def test_inference_graph_skips_aot_autograd():
    model, x = _mlp(), torch.randn(4, 32)
    with torch.no_grad():
        actual, aot = _aot_graphs(model, x)
        expected = model(x)
    assert aot == 0
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


def test_graph_without_grad_inputs_skips_aot_autograd_with_grad_mode_on():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    actual, aot = _aot_graphs(lambda a, b: torch.tanh(a @ b) + a, x, y)
    assert aot == 0
    assert not actual.requires_grad
    torch.testing.assert_close(actual, torch.tanh(x @ y) + x, atol=ATOL, rtol=RTOL)


def test_in_place_ops_on_intermediates_are_functionalised():
    def fn(x):
        y = x * 2
        y.relu_()
        y += x
        return y.sigmoid_()

    x = torch.randn(6, 5)
    before = x.clone()
    actual, aot = _aot_graphs(fn, x)
    assert aot == 0
    torch.testing.assert_close(actual, fn(x.clone()), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(x, before, atol=0, rtol=0)


def test_parameters_requiring_grad_go_through_aot_autograd():
    model, x = _mlp(), torch.randn(4, 32)
    actual, aot = _aot_graphs(model, x)
    assert aot == 1
    actual.sum().backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, want in zip(compiled_grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_input_mutation_goes_through_aot_autograd_and_is_applied():
    def fn(x):
        x.add_(1)
        return x * 2

    x = torch.randn(7)
    expected_x = x + 1
    with torch.no_grad():
        actual, aot = _aot_graphs(fn, x)
    assert aot == 1
    torch.testing.assert_close(x, expected_x, atol=0, rtol=0)
    torch.testing.assert_close(actual, expected_x * 2, atol=ATOL, rtol=RTOL)


def _view_of_input(x):
    return x.view(-1), x * 2


def _two_views_of_one_tensor(x):
    y = x + 1
    return y.view(-1), y.t()


def test_output_viewing_an_input_goes_through_aot_autograd_and_aliases_it():
    x = torch.randn(3, 4)
    with torch.no_grad():
        (view, doubled), aot = _aot_graphs(_view_of_input, x)
        expected = _view_of_input(x.clone())
    assert aot == 1
    torch.testing.assert_close(view, expected[0], atol=0, rtol=0)
    torch.testing.assert_close(doubled, expected[1], atol=ATOL, rtol=RTOL)
    view.mul_(0)  # a write through the output shows in the input, as in eager
    assert x.abs().sum().item() == 0


def test_outputs_viewing_one_intermediate_skip_aot_autograd_and_alias_each_other():
    x = torch.randn(3, 4)
    with torch.no_grad():
        (first, second), aot = _aot_graphs(_two_views_of_one_tensor, x)
    assert aot == 0
    torch.testing.assert_close(first, (x + 1).view(-1), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(second, (x + 1).t(), atol=ATOL, rtol=RTOL)
    first.mul_(0)  # a write through one output shows in the other, as in eager
    assert second.abs().sum().item() == 0


def test_batch_norm_in_training_mode_updates_running_statistics():
    torch.manual_seed(0)
    model = torch.nn.BatchNorm2d(3).train()
    reference = torch.nn.BatchNorm2d(3).train()
    x = torch.randn(4, 3, 5, 5)
    with torch.no_grad():
        actual, aot = _aot_graphs(model, x)
        expected = reference(x)
    assert aot == 1
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(model.running_mean, reference.running_mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.running_var, reference.running_var, atol=1e-6, rtol=0)


def test_symbolic_sizes_go_through_aot_autograd():
    fn = torch.compile(lambda x: torch.softmax(x * 3, dim=-1), backend="fxmlir", dynamic=True)
    torch._dynamo.reset()
    before = counters["aot_autograd"]["total"]
    for n in (5, 9):
        x = torch.randn(n, 6)
        torch.testing.assert_close(fn(x), torch.softmax(x * 3, dim=-1), atol=ATOL, rtol=RTOL)
    assert counters["aot_autograd"]["total"] - before == 1


def test_traced_graph_keeps_source_lines(tmp_path):
    def fn(x):
        return torch.cos(x) * 2  # the traced line

    line = fn.__code__.co_firstlineno + 1
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        _, aot = _aot_graphs(fn, torch.randn(4))
    assert aot == 0
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    sources = [node.get("source") for node in document["nodes"]]
    assert sources and all(s["file"].endswith("test_inference.py") for s in sources), sources
    assert all(s["line"] == line for s in sources), sources


def test_a_failing_trace_falls_back_to_aot_autograd(monkeypatch, caplog):
    from fxmlir import inference

    def failing_make_fx(*args, **kwargs):
        raise RuntimeError("an op the trace cannot take")

    monkeypatch.setattr(inference, "make_fx", failing_make_fx)
    x = torch.randn(5)
    with torch.no_grad(), caplog.at_level("DEBUG", logger="fxmlir"):
        actual, aot = _aot_graphs(lambda a: torch.sin(a) + 1, x)
    assert aot == 1
    torch.testing.assert_close(actual, torch.sin(x) + 1, atol=ATOL, rtol=RTOL)
    assert "fxmlir's trace failed (RuntimeError: an op the trace cannot take)" in caplog.text
