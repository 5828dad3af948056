"""Vendor plugins (``fxmlir.plugins``) through the example plugin package ``examples/xacc``
(installed by ``make setup``): found by its entry point, active behind its own backend name or
on fxmlir's through ``config.plugins``, its dialect, lowerings and stage running a real model
that matches eager; and every way a plugin can be broken giving an error that names it."""

import importlib.metadata
import pathlib
import subprocess

import fxmlir
import pytest
import torch
import transformers
from fxmlir import backend, plugins

XACC = pathlib.Path(__file__).resolve().parents[2] / "examples" / "xacc" / "fxmlir_xacc"


def _gpt2():
    """A one-layer GPT-2 (its GELU is tanh's: the op XACC takes) and a few tokens."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16)
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, torch.randint(0, 100, (2, 8))


def _logits(fn, ids):
    with torch.no_grad():
        return fn(ids).logits


def _lowered(dump_dir: pathlib.Path) -> str:
    return "".join(p.read_text() for p in dump_dir.glob("*.00-input.mlir"))


def test_the_example_plugin_is_installed():
    assert plugins.available()["xacc"] == "fxmlir_xacc:XaccPlugin"
    assert isinstance(plugins.load("xacc"), plugins.Plugin)


@pytest.mark.parametrize("how", ["backend name", "config.plugins"])
def test_a_real_model_runs_through_the_plugin(how, tmp_path, mlir_opt):
    model, ids = _gpt2()
    expected = _logits(model, ids)
    torch._dynamo.reset()
    settings = {"dump_dir": str(tmp_path), "fallback": "error"}
    if how == "backend name":
        compiled = torch.compile(model, backend="xacc")
    else:
        compiled = torch.compile(model, backend="fxmlir")
        settings["plugins"] = ["xacc"]
    with fxmlir.config.patch(**settings):
        actual = _logits(compiled, ids)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    lowered = _lowered(tmp_path)
    assert '"xacc.tanh"' in lowered
    # Stock mlir-opt parses every dump with the IRDL written beside it (xacc's dialect and
    # fxmlir's, whose `fxmlir.external` marks the nodes the plugin lowered).
    assert '"fxmlir.external"' in lowered and 'origin = "xacc"' in lowered
    for dump in tmp_path.glob("*.0[0-9]-*.mlir"):
        graph = dump.name.split(".")[0]
        subprocess.run(
            [str(mlir_opt), f"--irdl-file={tmp_path / f'{graph}.irdl.mlir'}", str(dump)],
            check=True,
            capture_output=True,
        )
    assert list(tmp_path.glob("*-xacc-to-upstream.mlir")), "the plugin's stage ran"


def test_the_plugins_own_op_and_nothing_leaks(tmp_path):
    """XACC's custom op lowers into its dialect; a compile without the plugin afterwards has
    no xacc op (the plugin's rows are active only with it) and runs the op eagerly."""

    def fn(x):
        return torch.ops.xacc.scaled_tanh(x, 0.25) - x

    x = torch.randn(4, 16)
    torch._dynamo.reset()
    with fxmlir.config.patch(dump_dir=str(tmp_path / "with"), fallback="error"):
        actual = torch.compile(fn, backend="xacc")(x)
    torch.testing.assert_close(actual, fn(x), rtol=1e-5, atol=1e-6)
    assert '"xacc.tanh"' in _lowered(tmp_path / "with")
    torch._dynamo.reset()
    with fxmlir.config.patch(dump_dir=str(tmp_path / "without")):
        report = fxmlir.explain(fn, x)
    assert [f.op for f in report.fallbacks] == ["xacc.scaled_tanh.default"]
    assert "xacc." not in _lowered(tmp_path / "without")


def test_the_executor_runs_the_vendors_build_behind_fxmlirs_call_contract(tmp_path):
    """XACC's executor gets the module after fxmlir's ``llvm`` stage (text and bytecode) and
    runs it with its own toolchain; an identical graph reuses what it built; fxmlir still
    checks the inputs, and a failing build or run is named."""
    from fxmlir_xacc import XaccPlugin

    x = torch.randn(4, 8)
    received = []

    def build(module):
        received.append(module)
        return toolchain.build(module)

    from fxmlir_xacc import toolchain

    class Recording(XaccPlugin):
        def executor(self):
            return plugins.Executor("llvm", build)

    compile_ = plugins.backend(Recording())
    for _ in range(2):
        torch._dynamo.reset()
        with fxmlir.config.patch(fallback="error"):
            torch.testing.assert_close(torch.compile(torch.tanh, backend=compile_)(x), x.tanh())
    assert len(received) == 1, "the second, identical graph reuses the first build"
    (module,) = received
    assert module.stage == "llvm" and "llvm.func" in module.mlir and module.bytecode
    assert [m["shape"] for m in module.inputs + module.outputs] == [[4, 8], [4, 8]]

    def broken_build(module):
        raise OSError("no accelerator attached")

    class NoDevice(XaccPlugin):
        def executor(self):
            return plugins.Executor("llvm", broken_build)

    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error"), pytest.raises(Exception) as e:
        torch.compile(torch.tanh, backend=plugins.backend(NoDevice()))(x)
    assert "the xacc executor raised OSError('no accelerator attached')" in str(e.value)

    def failing_run(module):
        def run(inputs, outputs):
            raise RuntimeError("device lost")

        return run

    class Lost(XaccPlugin):
        def executor(self):
            return plugins.Executor("fusion", failing_run)

    torch._dynamo.reset()
    with pytest.raises(fxmlir.CallError, match="the xacc executor raised RuntimeError"):
        torch.compile(torch.tanh, backend=plugins.backend(Lost()))(x)


def test_plugin_options_are_in_the_cache_key():
    from fxmlir_xacc import XaccPlugin

    x = torch.randn(3, 5)
    sources = []
    for lanes in (16, 8, 16):
        torch._dynamo.reset()
        before = max((r.seq for r in backend.history), default=-1)
        plugin = XaccPlugin(toolchain=False, lanes=lanes)
        with fxmlir.config.patch(cache_dir=None):
            torch.compile(torch.tanh, backend=plugins.backend(plugin))(x)
        sources += [r.source for r in backend.history if r.seq > before]
    assert sources[1:] == ["compiled", "memory"]


class _Broken(plugins.Plugin):
    name = "broken"


class _OldApi(_Broken):
    api_version = plugins.API_VERSION + 1


class _RaisingStages(_Broken):
    def stages(self):
        raise RuntimeError("no stages today")


class _WrongLowerings(_Broken):
    def lowerings(self):
        return ["aten.tanh.default"]


class _BadDialect(_Broken):
    def dialects(self):
        return ["irdl.dialect @broken {"]


class _RaisingPass(_Broken):
    def graph_passes(self):
        def fails(gm):
            raise ValueError("cannot rewrite")

        return [fails]


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ("no-such-plugin", "plugin `no-such-plugin`: not installed"),
        (_OldApi(), "plugin `broken`: written for plugin API 2, this fxmlir implements 1"),
        (_RaisingStages(), "plugin `broken`: hook `stages` raised RuntimeError('no stages today')"),
        (_WrongLowerings(), "plugin `broken`: hook `lowerings` gave 'aten.tanh.default'"),
        (_BadDialect(), "dialect from plugin `broken`: does not parse"),
        (_RaisingPass(), "plugin `broken`: graph pass 'fails' raised ValueError('cannot rewrite')"),
    ],
)
def test_a_broken_plugin_is_named_and_the_process_goes_on(plugin, message):
    x = torch.randn(3, 5)
    torch._dynamo.reset()
    with fxmlir.config.patch(plugins=[plugin]), pytest.raises(Exception) as e:
        torch.compile(torch.tanh, backend="fxmlir")(x)
    assert message in str(e.value)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(torch.tanh, backend="fxmlir")(x), torch.tanh(x))


def test_a_plugin_that_fails_to_import_is_named():
    entry_point = importlib.metadata.EntryPoint(
        name="ghost", value="no_such_module:Plugin", group=plugins.GROUP
    )
    with pytest.raises(plugins.PluginError, match="plugin `ghost`: cannot import"):
        plugins.load_entry_point(entry_point)


class _TanhBySigmoid(plugins.Plugin):
    """Decomposes tanh (fxmlir lowers it whole) into a sigmoid, and counts the graphs its
    pass sees."""

    name = "tanh-by-sigmoid"

    def __init__(self):
        self.graphs = 0

    def decompositions(self):
        return {torch.ops.aten.tanh.default: lambda x: 2 * torch.sigmoid(2 * x) - 1}

    def graph_passes(self):
        def count(gm):
            self.graphs += 1

        return [count]


def test_a_plugins_decompositions_and_passes_apply(tmp_path):
    import json

    plugin = _TanhBySigmoid()
    x = torch.randn(3, 5)
    torch._dynamo.reset()
    with fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error"):
        actual = torch.compile(torch.tanh, backend=plugins.backend(plugin))(x)
    torch.testing.assert_close(actual, torch.tanh(x), rtol=1e-5, atol=1e-6)
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    targets = [n["target"] for n in document["nodes"]]
    assert "aten.sigmoid.default" in targets and "aten.tanh.default" not in targets, targets
    assert plugin.graphs == 1
