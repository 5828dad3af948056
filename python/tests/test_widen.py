"""Half-precision products multiply f32 copies of their operands where the CPU has no dot
product for the half type (``widened`` in ``src/lower/linear.rs``): f16 everywhere, bf16
without AVX512-BF16. A linear layer's weight, a mixture-of-experts layer's expert matrices
and a convolution's weight and bias are widened once, outside the kernel (``fxmlir.passes.widen``);
computed operands (attention's) are widened in the kernel. The results are eager's: widening
is exact and both accumulate in f32 and round once."""

import json
import pathlib
import re

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from fxmlir import _fxmlir
from op_harness import compiled_and_eager

HALF = (torch.bfloat16, torch.float16)

# Outputs round to the half type's precision (bf16 8 bits, f16 11) after an f32 sum; eager's
# own sum, in another order, may round to the neighbouring value. Absolute tolerances are per
# unit of the largest eager output.
TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}

PRODUCT = re.compile(r"linalg\.(?:batch_)?matmul ins\([^)]*: (tensor<[^)]*)\)")


#: The CPU these tests compile for: this host without AVX512-BF16's dot product, so that bf16
#: products are widened on every host (with the dot product they become pairs: test_bf16_pairs.py).
#: Removing a feature keeps the kernels runnable here.
WIDENING = "host,-avx512bf16"


@pytest.fixture(autouse=True)
def widening_target():
    with fxmlir.config.patch(target=WIDENING):
        yield


def _product_operands(dump_dir: pathlib.Path) -> list[str]:
    """The operand types of every matrix product in the kernels' input MLIR."""
    text = "".join(p.read_text() for p in dump_dir.glob("*.00-input.mlir"))
    return PRODUCT.findall(text)


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert actual.dtype == expected.dtype == dtype
    scale = expected.float().abs().max().item()
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=tol, atol=tol * scale)


def _attention(q, k, v):
    """Causal attention written out: ``scaled_dot_product_attention`` is one fused kernel, which
    widens its operands when it packs them (``test_attention.py``)."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v


COMPUTED = {
    "mm": (lambda a, b: a @ b, [(48, 96), (96, 80)]),
    "bmm": (lambda a, b: a @ b, [(3, 40, 64), (3, 64, 72)]),
    "attention": (_attention, [(2, 4, 48, 32)] * 3),
}


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_computed_operands_are_widened_in_the_kernel(name, dtype, threads, tmp_path):
    fn, shapes = COMPUTED[name]
    actual, expected = compiled_and_eager(fn, shapes, dtype, tmp_path)
    _close(actual, expected, dtype)
    operands = _product_operands(tmp_path)
    assert operands, "no matrix product in the kernel"
    for types in operands:
        assert re.fullmatch(r"tensor<[0-9x]+xf32>, tensor<[0-9x]+xf32>", types), types


class Linear(torch.nn.Module):
    def __init__(self, dtype: torch.dtype):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(256, 160).to(dtype)

    def forward(self, x):
        return F.gelu(self.layer(x))


def _compile_module(model: torch.nn.Module, x: torch.Tensor, dtype, dump_dir: pathlib.Path):
    """``model`` compiled by fxmlir (dumping into ``dump_dir``) and run eagerly on ``x``; checks
    the results agree and returns the interchange document's nodes and the (shape, dtype) of
    its hoisted inputs."""
    torch._dynamo.reset()
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(dump_dir), fallback="error"):
        actual = torch.compile(model, backend="fxmlir")(x)
        expected = model(x)
    _close(actual, expected, dtype)
    (document,) = [json.loads(p.read_text()) for p in dump_dir.glob("*.fx.json")]
    hoisted = [i["meta"] for i in document["inputs"] if i["name"].startswith("hoisted_")]
    return document["nodes"], sorted((m["shape"], m["dtype"]) for m in hoisted)


def _compile_linear(dtype: torch.dtype, rows: int, dump_dir: pathlib.Path):
    x = torch.randn(rows, 256, dtype=dtype)
    _, hoisted = _compile_module(Linear(dtype).eval(), x, dtype, dump_dir)
    return hoisted


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
def test_a_linear_layers_weight_is_widened_once(dtype, threads, tmp_path):
    """The kernel receives the transposed weight already in f32 (computed by the hoisted
    prologue), and the bias is added to the f32 product before the one rounding."""
    hoisted = _compile_linear(dtype, 24, tmp_path)
    assert hoisted == [([256, 160], "float32")], hoisted
    for types in _product_operands(tmp_path):
        assert re.fullmatch(r"tensor<24x256xf32>, tensor<256x160xf32>", types), types


def test_a_widened_weight_of_whole_kibibyte_rows_is_read_through_longer_rows(tmp_path):
    """1024 f16 outputs: the widened ``t(weight)`` has f32 rows of 4 KiB (the f16 weight's
    are 2 KiB), so the kernel reads it through rows 32 columns longer: the skew
    (``fxmlir.passes.skew``) sees the copy widening made."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 1024).to(torch.float16).eval()
    x = torch.randn(8, 64, dtype=torch.float16)
    nodes, hoisted = _compile_module(model, x, torch.float16, tmp_path)
    assert hoisted == [([64, 1056], "float32")], hoisted
    assert "aten.slice.Tensor" in [n["target"] for n in nodes]


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
def test_off_keeps_no_f32_copy_of_the_weight(dtype, tmp_path):
    """``widen=False``: the hoisted weight keeps its half type; the kernel widens it per call."""
    with fxmlir.config.patch(widen=False):
        hoisted = _compile_linear(dtype, 24, tmp_path)
    short = str(dtype).removeprefix("torch.")
    assert hoisted == [([256, 160], short)], hoisted
    for types in _product_operands(tmp_path):
        assert re.fullmatch(r"tensor<24x256xf32>, tensor<256x160xf32>", types), types


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
def test_a_one_row_product_keeps_its_half_operands(dtype, tmp_path):
    """One row is bound by reading the weight, which widening would double."""
    short = str(dtype).removeprefix("torch.")
    mlir = {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
    hoisted = _compile_linear(dtype, 1, tmp_path)
    assert hoisted == [([256, 160], short)], hoisted
    for types in _product_operands(tmp_path):
        assert re.fullmatch(rf"tensor<1x256x{mlir}>, tensor<256x160x{mlir}>", types), types


class Experts(torch.nn.Module):
    """A mixture-of-experts layer's grouped product: 48 rows in 4 groups by 4 experts."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 64, 40, dtype=dtype))
        self.register_buffer("offs", torch.tensor([8, 20, 36, 48], dtype=torch.int32))

    def forward(self, x):
        return torch._grouped_mm(x, self.w, self.offs)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
def test_expert_matrices_are_widened_once(dtype, tmp_path):
    x = torch.randn(48, 64, dtype=dtype)
    nodes, hoisted = _compile_module(Experts(dtype).eval(), x, dtype, tmp_path)
    grouped = [n for n in nodes if n["target"] == "aten._grouped_mm.default"]
    assert [n["outputs"][0]["dtype"] for n in grouped] == ["float32"], grouped
    assert hoisted == [([4, 64, 40], "float32")], hoisted


class Convolutions(torch.nn.Module):
    """A convolution with a bias, then a depthwise one without, sharing nothing."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1).to(dtype)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, groups=16, bias=False).to(dtype)

    def forward(self, x):
        return self.depthwise(torch.relu(self.conv(x)))


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "f16"])
def test_convolution_weights_are_widened_once(dtype, tmp_path):
    """Each weight and bias reaches the kernel in f32, computed once by the hoisted prologue,
    and the convolutions run on f32 operands."""
    x = torch.randn(2, 8, 12, 12, dtype=dtype)
    nodes, hoisted = _compile_module(Convolutions(dtype).eval(), x, dtype, tmp_path)
    wide = [([16], "float32"), ([16, 1, 3, 3], "float32"), ([16, 8, 3, 3], "float32")]
    assert hoisted == wide, hoisted
    convolutions = [n for n in nodes if n["target"] == "aten.convolution.default"]
    assert [n["outputs"][0]["dtype"] for n in convolutions] == ["float32", "float32"]


@pytest.mark.parametrize("target", ["znver4", "skylake-avx512", "x86-64-v3", WIDENING])
def test_the_rule_follows_the_target(target):
    bf16_dot = _fxmlir.target_info(target)["bf16_dot"]
    assert bf16_dot == (target == "znver4")
    assert _fxmlir.widened_product("float16", 2, target)
    assert not _fxmlir.widened_product("float16", 1, target)
    assert _fxmlir.widened_product("bfloat16", 64, target) == (not bf16_dot)
    assert not _fxmlir.widened_product("float32", 64, target)
    assert not _fxmlir.widened_product("int8", 64, target)
    assert not _fxmlir.widened_product("complex64", 64, target)
