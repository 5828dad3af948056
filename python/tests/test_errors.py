"""Bad input gets a clear exception naming the op, node and source line; the process survives."""

import json
import os
import subprocess
import sys
import textwrap

import fxmlir
import pytest
import torch
from fxmlir import _fxmlir, runtime
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


def test_arguments_the_fast_check_rejects_are_checked_again():
    """After a call, arguments pass Dynamo's C++ tensor check if they look exactly like that
    call's; one it rejects (here: a size-1 dimension's stride, requires_grad, a wrong shape) is
    checked in Python, which accepts it or raises, and later calls go on either way."""
    gm = make_fx(lambda a, b: torch.ops.aten.add.Tensor(a, b), tracing_mode="fake")(
        torch.randn(1, 3), torch.randn(1, 3)
    )
    fn = fxmlir.compile_graph(gm, None)
    a, b = torch.randn(1, 3), torch.randn(1, 3)
    torch.testing.assert_close(fn([a, b])[0], a + b)
    odd_stride = torch.randn(3, 1).t()  # [1, 3] with strides (1, 1): the stride of 1 row differs
    grad = torch.randn(1, 3, requires_grad=True)
    for other in (odd_stride, grad, b):
        with torch.no_grad():
            torch.testing.assert_close(fn([a, other])[0], a + other)
    with pytest.raises(fxmlir.CallError, match=r"got float32\[2, 3\]"):
        fn([a, torch.randn(2, 3)])
    torch.testing.assert_close(fn([b, a])[0], b + a)


def test_arguments_changing_layout_in_turn_stop_rebuilding_the_fast_check(monkeypatch):
    """Arguments that alternate between two layouts are rejected by the check built from the
    call before; it is rebuilt at most ``runtime.MAX_GUARDS`` times, and every call is right."""
    gm = make_fx(lambda a, b: torch.ops.aten.add.Tensor(a, b), tracing_mode="fake")(
        torch.randn(1, 3), torch.randn(1, 3)
    )
    fn = fxmlir.compile_graph(gm, None)
    built = []
    guard = runtime._guard
    monkeypatch.setattr(runtime, "_guard", lambda values: built.append(1) or guard(values))
    a, b = torch.randn(1, 3), torch.randn(1, 3)
    odd_stride = torch.randn(3, 1).t()
    for i in range(3 * runtime.MAX_GUARDS):
        other = odd_stride if i % 2 else b
        torch.testing.assert_close(fn([a, other])[0], a + other)
    assert len(built) == runtime.MAX_GUARDS


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


_COMPILE_IN_A_FRESH_PROCESS = textwrap.dedent(
    """
    import torch, fxmlir
    try:
        out = torch.compile(lambda x: torch.tanh(x) * 2, backend="fxmlir")(torch.ones(3))
        print("result:", out.tolist())
    except Exception as e:
        print("raised:", e)
    print("alive")
    """
)


@pytest.mark.parametrize(
    "flags, accepted",
    [("-no-such-flag", False), ("-unrol-threshold=100", False), ("-unroll-threshold=100", True)],
)
def test_llvm_flags_are_checked(flags, accepted):
    # LLVM parses its options once per process: each case needs a process of its own.
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE_IN_A_FRESH_PROCESS],
        env={**os.environ, "FXMLIR_LLVM_ARGS": flags},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().endswith("alive"), run.stdout
    if accepted:
        assert "result: [1.52318" in run.stdout, run.stdout
    else:
        assert f"FXMLIR_LLVM_ARGS=`{flags}` holds a flag LLVM does not accept" in run.stdout
        assert f"Unknown command line argument '{flags}'" in run.stderr, run.stderr
