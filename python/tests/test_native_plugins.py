"""Native MLIR plugins in a torch.compile run (``fxmlir.config.pass_plugins``): the example
C++ pass plugin (examples/pass-plugin, built by ``make examples`` with CMake against the MLIR
fxmlir links) loads into the process beside torch and triton, and a stage of one's own runs
its pass; a shared object that is not such a plugin is refused with a message, and the
process goes on compiling."""

import pathlib

import fxmlir
import pytest
import torch
import triton

ROOT = pathlib.Path(__file__).resolve().parents[2]
PASS_PLUGIN = ROOT / "target" / "examples" / "pass-plugin" / "FxmlirExamplePasses.so"
MLIR_C = ROOT / "target" / "release" / "libMLIR-C.so"
COUNT = fxmlir.Stage("count", passes="builtin.module(func.func(fxmlir-example-count-ops))").after(
    "fusion"
)


def _model(x, w):
    return torch.relu(x @ w) * 2


def _inputs():
    torch.manual_seed(0)
    return torch.randn(8, 16), torch.randn(16, 4)


def test_the_example_pass_plugin_runs_in_a_compile_beside_triton(tmp_path):
    assert PASS_PLUGIN.is_file(), f"{PASS_PLUGIN} is missing: build it with `make examples`"
    assert triton.__version__, "triton, with its own LLVM, is loaded in this process"
    x, w = _inputs()
    torch._dynamo.reset()
    with fxmlir.config.patch(
        pass_plugins=[str(PASS_PLUGIN)], stages=[COUNT], dump_dir=str(tmp_path), fallback="error"
    ):
        actual = torch.compile(_model, backend="fxmlir")(x, w)
    torch.testing.assert_close(actual, _model(x, w), rtol=1e-5, atol=1e-5)
    (dump,) = tmp_path.glob("*.04-count.mlir")
    assert "example.op_count = " in dump.read_text()


def test_a_shared_object_that_is_no_plugin_is_refused_and_the_process_goes_on():
    x, w = _inputs()
    torch._dynamo.reset()
    with fxmlir.config.patch(pass_plugins=[str(MLIR_C)]), pytest.raises(Exception) as e:
        torch.compile(_model, backend="fxmlir")(x, w)
    assert "has no `mlirGetPassPluginInfo`: not a pass plugin" in str(e.value)
    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error"):
        actual = torch.compile(_model, backend="fxmlir")(x, w)
    torch.testing.assert_close(actual, _model(x, w), rtol=1e-5, atol=1e-5)
