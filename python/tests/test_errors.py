"""Bad input gets a clear exception naming the op, node and source line; the process survives."""

import json
import subprocess

import fxmlir
import pytest
import torch
from fxmlir import _fxmlir
from torch.fx.experimental.proxy_tensor import make_fx


def unsupported(x):
    y = x + 1
    return torch.special.bessel_j0(y)  # the unsupported line


def test_unsupported_op_names_op_node_and_line_in_strict_mode():
    line = unsupported.__code__.co_firstlineno + 2
    with fxmlir.config.patch(fallback="error"), pytest.raises(Exception) as info:
        torch.compile(unsupported, backend="fxmlir")(torch.randn(4))
    text = str(info.value)
    assert "aten.special_bessel_j0.default" in text
    assert "special_bessel_j0" in text  # the node name
    assert f"test_errors.py:{line}" in text
    # The process is fine and compiles the next graph.
    f = torch.compile(lambda x: x * 2, backend="fxmlir")
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))


def test_unsupported_error_type_from_direct_compile():
    gm = make_fx(lambda x: torch.ops.aten.special_bessel_j0.default(x), tracing_mode="fake")(
        torch.randn(3)
    )
    with fxmlir.config.patch(fallback="error"):
        with pytest.raises(fxmlir.UnsupportedOpError, match="no lowering is registered"):
            fxmlir.compile_graph(gm, [torch.randn(3)])


def test_bad_fallback_setting_is_rejected():
    gm = make_fx(lambda x: torch.ops.aten.neg.default(x), tracing_mode="fake")(torch.randn(3))
    with fxmlir.config.patch(fallback="sometimes"), pytest.raises(ValueError, match="eager"):
        fxmlir.compile_graph(gm, None)


def compiled_add():
    gm = make_fx(lambda a, b: torch.ops.aten.add.Tensor(a, b), tracing_mode="fake")(
        torch.randn(2, 3), torch.randn(2, 3)
    )
    return fxmlir.compile_graph(gm, None)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.randn(3, 3), r"compiled for float32\[2, 3\].*got float32\[3, 3\]"),
        (torch.randn(2, 3, dtype=torch.float64), r"got float64\[2, 3\]"),
        (torch.randn(3, 2).t(), r"strides \(3, 1\).*got float32\[2, 3\] strides \(1, 2\)"),
        (3.0, "expected a tensor, got float"),
    ],
)
def test_wrong_input_at_call_time_raises(bad, message):
    fn = compiled_add()
    ok = torch.randn(2, 3)
    torch.testing.assert_close(fn([ok, ok])[0], ok + ok)
    with pytest.raises(fxmlir.CallError, match=message):
        fn([ok, bad])


def test_malformed_documents_raise_graph_error():
    with pytest.raises(fxmlir.GraphError, match="malformed graph"):
        _fxmlir.compile("{ not json")
    doc = {
        "format": "fxmlir.graph",
        "version": 1,
        "name": "g",
        "inputs": [],
        "nodes": [],
        "outputs": [{"node": "missing"}],
    }
    with pytest.raises(fxmlir.GraphError, match="`missing`"):
        _fxmlir.compile(json.dumps(doc))


def test_unknown_pipeline_raises():
    gm = make_fx(lambda a: torch.ops.aten.neg.default(a), tracing_mode="fake")(torch.randn(2))
    with fxmlir.config.patch(pipeline="nope"):
        with pytest.raises(fxmlir.CompileError, match="no such named pipeline"):
            fxmlir.compile_graph(gm, None)


def test_cli_rejects_corrupted_graph_file(tmp_path, fxmlir_cli):
    bad = tmp_path / "bad.fx.json"
    bad.write_text('{"format": "fxmlir.graph", "version": 1, "name": "g", "inputs": [')
    for command in ("import", "compile", "run"):
        out = subprocess.run([fxmlir_cli, command, bad], capture_output=True, text=True)
        assert out.returncode == 1, out
        assert "fxmlir: error:" in out.stderr
        assert "malformed graph" in out.stderr
        assert "panicked" not in out.stderr
    missing = subprocess.run(
        [fxmlir_cli, "run", tmp_path / "nope.json"], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "cannot read" in missing.stderr
