"""Eager fallback by partition: results equal eager, the explain report names the ops that
fell back with their source lines, strict mode raises, a partition that fails to compile
falls back at the failing node only (named by the error's fields), and ops on tensors fxmlir
compiles nothing on (complex, fp8) run eagerly."""

import json

import fxmlir
import torch
from fxmlir import partition
from torch.fx.experimental.proxy_tensor import make_fx


def mixed(x, w):
    y = torch.sin(x @ w) + 1.0
    z = torch.special.bessel_j0(y)  # no lowering: eager
    c = torch.special.bessel_j1(z * 2.0)  # no lowering: eager
    return torch.relu(c).mean(dim=1), y.sum()


def test_fallback_graph_equals_eager_and_explain_names_the_ops():
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    report = fxmlir.explain(mixed, x, w)
    for got, want in zip(report.output, mixed(x, w)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert report.fallback_counts == {
        "aten.special_bessel_j0.default": 1,
        "aten.special_bessel_j1.default": 1,
    }
    lines = {f.op: f.source for f in report.fallbacks}
    first = mixed.__code__.co_firstlineno
    assert lines["aten.special_bessel_j0.default"].endswith(f"test_fallback.py:{first + 2}")
    assert lines["aten.special_bessel_j1.default"].endswith(f"test_fallback.py:{first + 3}")
    assert report.graphs, "the supported parts must be compiled"
    text = str(report)
    assert "aten.special_bessel_j1.default x1" in text and "no lowering is registered" in text


def test_strict_mode_raises_naming_every_fallback_op(monkeypatch):
    monkeypatch.setenv("FXMLIR_FALLBACK", "error")
    with fxmlir.config.patch(fallback="error"):
        try:
            torch.compile(mixed, backend="fxmlir")(torch.randn(4, 8), torch.randn(8, 6))
        except Exception as e:  # Dynamo wraps backend errors
            text = str(e)
        else:
            raise AssertionError("strict mode must raise")
    assert "strict mode" in text
    assert "aten.special_bessel_j0.default" in text and "aten.special_bessel_j1.default" in text
    assert "test_fallback.py" in text


def test_fully_supported_graph_has_no_fallback():
    report = fxmlir.explain(lambda a: torch.tanh(a) * 3, torch.randn(5))
    assert report.fallbacks == [] and len(report.graphs) == 1


def test_compile_failure_falls_back_at_the_failing_node():
    def fn(a):
        b = torch.ops.aten.exp.default(a)
        c = torch.ops.aten.neg.default(b)
        return torch.ops.aten.tanh.default(c)

    a = torch.randn(6)
    gm = make_fx(fn, tracing_mode="fake")(a)
    failing = next(n.name for n in gm.graph.nodes if n.name.startswith("neg"))
    compiled_parts = []

    def compile_part(sub):
        names = [n.name for n in sub.graph.nodes if n.op == "call_function"]
        if failing in names:
            # Errors name their node in fields, as fxmlir's own carry them.
            error = fxmlir.LoweringError(f"cannot lower node `{failing}` (aten.neg.default): test")
            error.node = failing
            raise error
        compiled_parts.append(names)
        return lambda args: [sub(*args)]

    split = partition.partition_and_compile(gm, compile_part, strict=False)
    torch.testing.assert_close(split(a), fn(a))
    assert sorted(compiled_parts) == [["exp"], ["tanh"]]
    assert any(f.node == failing and "lowering failed" in f.reason for f in partition.fallbacks)


def test_embedding_bag_in_training_falls_back_with_its_reason():
    # Inference compiles the bags' rows; a training step's backward reads the op's bookkeeping
    # outputs (offset2bag, bag sizes), which the lowering refuses, so the op runs eagerly
    # there and the gradients are eager's.
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(20, 8, mode="mean")
    indices, offsets = torch.tensor([1, 4, 4, 9, 19, 0]), torch.tensor([0, 2, 2, 5])
    with torch.no_grad():
        report = fxmlir.explain(bag, indices, offsets)
        torch.testing.assert_close(report.output, bag(indices, offsets))
    assert report.fallbacks == []
    before = max((f.seq for f in partition.fallbacks), default=-1)
    torch.compile(bag, backend="fxmlir")(indices, offsets).square().sum().backward()
    compiled = bag.weight.grad.clone()
    bag.zero_grad()
    bag(indices, offsets).square().sum().backward()
    torch.testing.assert_close(compiled, bag.weight.grad)
    reasons = {f.op: f.reason for f in partition.fallbacks if f.seq > before}
    assert "read by the backward" in reasons.pop("aten._embedding_bag.default"), reasons
    # The backward's own op has no lowering.
    assert list(reasons) == ["aten._embedding_bag_backward.default"], reasons


def complex_product(x, w):
    y = torch.relu(x @ w)
    c = torch.view_as_complex(y.reshape(4, 4, 2))
    return (c * c).abs().sum(-1) + y.sum()


def test_ops_on_complex_tensors_run_eagerly_and_strict_mode_names_them():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    torch._dynamo.reset()
    before = max((f.seq for f in partition.fallbacks), default=-1)
    actual = torch.compile(complex_product, backend="fxmlir")(x, w)
    torch.testing.assert_close(actual, complex_product(x, w), rtol=1e-5, atol=1e-5)
    eager = {f.op: f.reason for f in partition.fallbacks if f.seq > before}
    assert eager == {
        "aten.view_as_complex.default": "torch.complex64 tensors are not compiled",
        "aten.mul.Tensor": "torch.complex64 tensors are not compiled",
        "aten.abs.default": "torch.complex64 tensors are not compiled",
    }
    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error"):
        try:
            torch.compile(complex_product, backend="fxmlir")(x, w)
        except Exception as e:  # Dynamo wraps backend errors
            text = str(e)
        else:
            raise AssertionError("strict mode must raise")
    assert "aten.view_as_complex.default (node `view_as_complex`" in text
    assert "torch.complex64 tensors are not compiled" in text


def test_casts_through_fp8_run_eagerly():
    x = torch.randn(4, 8)

    def through_fp8(a):
        return a.to(torch.float8_e4m3fn).to(torch.float32) * 2

    torch._dynamo.reset()
    before = max((f.seq for f in partition.fallbacks), default=-1)
    torch.testing.assert_close(torch.compile(through_fp8, backend="fxmlir")(x), through_fp8(x))
    reasons = {f.reason for f in partition.fallbacks if f.seq > before}
    assert reasons == {"torch.float8_e4m3fn tensors are not compiled"}, reasons


def test_errors_about_a_node_carry_it_in_fields():
    document = {
        "format": "fxmlir.graph",
        "version": fxmlir._fxmlir.INTERCHANGE_VERSION,
        "name": "fields",
        "inputs": [{"name": "x", "meta": {"shape": [2], "strides": [1], "dtype": "float32"}}],
        "nodes": [
            {
                "name": "odd",
                "target": "aten.no_such_op.default",
                "args": [{"ref": {"node": "x"}}],
                "outputs": [{"shape": [2], "strides": [1], "dtype": "float32"}],
                "source": {"file": "model.py", "line": 7},
            }
        ],
        "outputs": [{"node": "odd"}],
    }
    try:
        fxmlir._fxmlir.compile(json.dumps(document))
    except fxmlir.UnsupportedOpError as e:
        assert (e.node, e.op, e.source) == ("odd", "aten.no_such_op.default", "model.py:7")
    else:
        raise AssertionError("an op with no lowering must raise")
