"""f32 products by a weight read it in panels (``fxmlir.passes.panels``): where the schedule
would copy each reduction block of a linear layer's weight into panels on every call, the
weight is handed to the kernel in panels once, outside it, and the kernel's product is
``fxmlir::mm_panels``, whose register tiles read the panels where they lie. Products the copy
would not serve stay as they are."""

import json
import pathlib

import fxmlir
import pytest
import torch
import weight_kernels
from fxmlir import _fxmlir
from weight_kernels import compiled_like_eager, kernel

#: The targets the kernels are compiled for (they run here): AVX2 (panels of 16 columns) on
#: every host, AVX-512 (32 columns) where the host has it. Their L2 sizes are pinned: the rule
#: depends on them.
AVX2 = "x86-64-v3,l2=512K"
AVX512 = "x86-64-v4,l2=512K"

# f32 sums of 256 or 1024 products of values of a few units, in another order than eager's.
ATOL, RTOL = 1e-4, 1e-4


@pytest.fixture(params=[AVX2, AVX512], ids=["avx2", "avx512"])
def target(request):
    why_not = _fxmlir.target_info(request.param)["runs_here"]
    if why_not is not None:
        pytest.skip(f"{request.param} does not run here ({why_not}); lit checks its IR")
    with fxmlir.config.patch(target=request.param):
        yield request.param


def Mlp(d: int = 256, hidden: int = 1024, bias: bool = True) -> torch.nn.Module:
    return weight_kernels.Mlp(d, hidden, d, bias)


def _run(model: torch.nn.Module, x: torch.Tensor, dump_dir: pathlib.Path, **config):
    return compiled_like_eager(
        model, x, dump_dir, (ATOL, RTOL), ".02-schedule.transform.mlir", **config
    )


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_linear_layers_read_their_weights_in_panels(tmp_path, target, threads, bias):
    torch.manual_seed(0)
    model = Mlp(bias=bias).eval()
    x = torch.randn(2, 32, 256)
    targets, shapes, schedule = _run(model, x, tmp_path)
    assert targets.count("fxmlir.mm_panels.default") == 2, targets
    assert "aten.mm.default" not in targets and "aten.addmm.default" not in targets, targets
    # The panels are inputs of the kernel (computed once, outside it).
    width = 16 if target == AVX2 else 32
    assert [1024 // width, 256, width] in shapes and [256 // width, 1024, width] in shapes, shapes
    assert schedule.count(" f32 panels: ") == 2, schedule
    assert "right operand packed" not in schedule


def test_a_changed_weight_is_read_again(tmp_path, target):
    """The panels are the hoist's: a weight changed in place is handed over anew."""
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(64, 256)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        compiled = torch.compile(model, backend="fxmlir")
        compiled(x)
        model.up.weight.mul_(-0.5)
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
    assert kernel(tmp_path, ".fx.json")[0].count("fxmlir.mm_panels.default") == 2


@pytest.mark.parametrize(
    ("rows", "k", "n", "dtype", "config"),
    [
        (64, 64, 128, torch.float32, {}),  # a weight that stays in L2: never copied
        (64, 256, 1000, torch.float32, {}),  # no whole number of panels
        (4, 256, 1024, torch.float32, {}),  # too few rows to copy the weight for
        (64, 256, 1024, torch.float64, {}),  # f64
        (64, 256, 1024, torch.float32, {"panels": False}),
    ],
    ids=["small", "width", "rows", "f64", "off"],
)
def test_other_products_stay_as_they_are(tmp_path, rows, k, n, dtype, config):
    torch.manual_seed(0)
    model = torch.nn.Linear(k, n).to(dtype).eval()
    x = torch.randn(rows, k, dtype=dtype)
    with fxmlir.config.patch(target=AVX2):
        targets, _, schedule = _run(model, x, tmp_path, **config)
    assert "fxmlir.mm_panels.default" not in targets, targets
    assert "aten.addmm.default" in targets, targets
    assert " panels: " not in schedule


def test_training_graphs_keep_their_products(tmp_path):
    """Nothing is hoisted from a graph whose weights take gradients, so nothing is rewritten."""
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 1024)
    x = torch.randn(64, 256)
    with fxmlir.config.patch(dump_dir=str(tmp_path), target=AVX2):
        out = torch.compile(model, backend="fxmlir")(x)
    torch.testing.assert_close(out, model(x), atol=ATOL, rtol=RTOL)
    targets = [t for p in tmp_path.glob("*.fx.json") for t in _node_targets(p)]
    assert "fxmlir.mm_panels.default" not in targets, targets


def _node_targets(path: pathlib.Path) -> list[str]:
    return [n["target"] for n in json.loads(path.read_text())["nodes"]]


def test_the_rule_follows_the_target():
    # Panels of the register tiles' width: two vectors.
    assert _fxmlir.weight_panels(64, 256, 1024, AVX2) == 16
    assert _fxmlir.weight_panels(64, 256, 1024, AVX512) == 32
    # Thread chunks must be whole panels: two threads cut 48 columns (3 AVX2 panels) in two.
    assert _fxmlir.weight_panels(16, 4096, 48, AVX2, 1) == 16
    assert _fxmlir.weight_panels(16, 4096, 48, AVX2, 2) is None
    # A weight that fits half of L2 (256 x 512 x 4 bytes = 512 KiB) is copied whole for enough
    # rows (16 register tiles of 4 AVX2 rows) and read where it lies for fewer; a larger one is
    # copied block by block for 16 rows or more.
    assert _fxmlir.weight_panels(64, 256, 512, "x86-64-v3,l2=1M") == 16
    assert _fxmlir.weight_panels(60, 256, 512, "x86-64-v3,l2=1M") is None
    assert _fxmlir.weight_panels(60, 256, 512, "x86-64-v3,l2=512K") == 16
    assert _fxmlir.weight_panels(64, 256, 1000, AVX2) is None
    assert _fxmlir.weight_panels(4, 256, 1024, AVX2) is None
    assert _fxmlir.weight_panels(0, 256, 1024, AVX2) is None


def test_a_plugins_executor_gets_the_plain_products(tmp_path):
    """The panels are the layout of fxmlir's register tiles: a vendor's executor, which builds
    the module its own way, gets the linear layer as it is."""
    from fxmlir import plugins
    from fxmlir_xacc import XaccPlugin, toolchain

    class Executing(XaccPlugin):
        def executor(self):
            return plugins.Executor("llvm", toolchain.build)

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 1024).eval()
    x = torch.randn(64, 256)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), target=AVX2):
        actual = torch.compile(model, backend=plugins.backend(Executing()))(x)
        torch.testing.assert_close(actual, model(x), atol=ATOL, rtol=RTOL)
    targets = [t for p in tmp_path.glob("*.fx.json") for t in _node_targets(p)]
    assert "aten.addmm.default" in targets and "fxmlir.mm_panels.default" not in targets, targets
