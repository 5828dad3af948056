"""bf16 products on AVX512-BF16's dot product (``fxmlir.passes.bf16_pairs``): a bf16 linear
layer's weight is packed in pairs along the reduction once, outside the kernel, and the
kernel's product is ``fxmlir::mm_pairs``, scheduled as ``vdpbf16ps`` register tiles; a bf16
convolution's weight is packed in pairs of input channels and the kernel's convolution is
``fxmlir::conv_pairs``. Products and convolutions it cannot serve stay as they are."""

import pathlib

import fxmlir
import pytest
import torch
import weight_kernels
from fxmlir import _fxmlir
from weight_kernels import compiled_like_eager, kernel

# The kernels must run here, so the target is the host, which needs AVX512-BF16's dot product.
# The lowering and schedule of pairs on any host are checked by lit (schedule_pairs*.json).
pytestmark = pytest.mark.skipif(
    not _fxmlir.target_info("host")["bf16_dot"],
    reason="needs avx512bf16, which this host lacks (the IR is checked by lit on every host)",
)


@pytest.fixture(autouse=True)
def host_target():
    """The dot product is the host's own, whatever ``FXMLIR_TARGET`` says."""
    with fxmlir.config.patch(target="host"):
        yield


# bf16 results of f32 sums: one rounding to bf16 (8 bits) apart at most, over values of a
# few units.
ATOL, RTOL = 3e-2, 1.6e-2


def _kernel(dump_dir: pathlib.Path) -> tuple[list[str], list[list[int]], str]:
    """The compiled kernel's node targets, its input shapes and its optimised LLVM IR."""
    return kernel(dump_dir, ".ll")


def _run(model: torch.nn.Module, x: torch.Tensor, dump_dir: pathlib.Path, **config):
    return compiled_like_eager(model, x, dump_dir, (ATOL, RTOL), ".ll", **config)


def Mlp(d: int = 64, hidden: int = 96, out: int = 32, bias: bool = True) -> torch.nn.Module:
    return weight_kernels.Mlp(d, hidden, out, bias)


def test_linear_layers_become_dot_products(tmp_path):
    torch.manual_seed(0)
    model = Mlp(bias=False).to(torch.bfloat16).eval()
    model.up.bias.data.normal_()
    x = torch.randn(2, 24, 64, dtype=torch.bfloat16)
    targets, shapes, llvm = _run(model, x, tmp_path)
    assert targets.count("fxmlir.mm_pairs.default") == 2, targets
    assert "aten.mm.default" not in targets and "aten.addmm.default" not in targets, targets
    # The packed weights are inputs of the kernel (computed once, outside it).
    assert [32, 96, 2] in shapes and [48, 32, 2] in shapes, shapes
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in llvm


def test_symbolic_rows_compile_one_kernel_of_dot_products(tmp_path):
    """With ``dynamic=True`` the rows are symbolic: one kernel serves every row count, its
    products dot products whose register tile rows are peeled (full tiles, then single
    rows), for counts that are and are not multiples of the tile."""
    from records import latest, since

    torch.manual_seed(0)
    model = Mlp().to(torch.bfloat16).eval()
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        for rows in [3, 17, 8, 64, 5]:
            x = torch.randn(rows, 64, dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
    assert [bool(r.symbols) for r in since(start)] == [True]
    targets, shapes, llvm = _kernel(tmp_path)
    assert targets.count("fxmlir.mm_pairs.default") == 2, targets
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in llvm
    (script,) = [p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir")]
    assert script.count("bf16 pairs") == 2 and script.count("rows peeled") == 2, script


def test_changed_weights_are_packed_again(tmp_path):
    torch.manual_seed(0)
    model = Mlp().to(torch.bfloat16).eval()
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        compiled = torch.compile(model, backend="fxmlir")
        compiled(x)
        model.up.weight.mul_(-2.0)
        model.down.weight.add_(1.0)
        actual = compiled(x)
        expected = model(x)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    "case",
    [
        # An odd reduction has no last pair: the first layer stays plain, the second (96
        # features in) is packed.
        ("odd_reduction", Mlp(d=63), (8, 63), 1),
        # 40 columns are no whole number of 16-lane dot products, and too few to pad (by an
        # eighth at most): both layers stay plain.
        ("narrow", Mlp(hidden=40, out=40), (8, 64), 0),
    ],
    ids=lambda case: case[0],
)
def test_products_it_cannot_tile_stay_plain(tmp_path, case):
    _, model, shape, packed = case
    torch.manual_seed(0)
    model = model.to(torch.bfloat16).eval()
    targets, _, _ = _run(model, torch.randn(shape, dtype=torch.bfloat16), tmp_path)
    assert targets.count("fxmlir.mm_pairs.default") == packed, targets
    assert targets.count("aten.addmm.default") == 2 - packed, targets


@pytest.mark.parametrize(
    "hidden, packed",
    [
        # 200 columns: 8 zero columns make whole dot products; the result drops them.
        (200, [32, 208, 2]),
        # 1024 columns: packed rows 4 KiB apart would share cache sets; 32 zero columns more.
        (1024, [32, 1056, 2]),
    ],
    ids=["whole_vectors", "skewed_rows"],
)
def test_packed_widths_are_padded(tmp_path, hidden, packed):
    torch.manual_seed(0)
    model = Mlp(hidden=hidden).to(torch.bfloat16).eval()
    targets, shapes, _ = _run(model, torch.randn(8, 64, dtype=torch.bfloat16), tmp_path)
    assert targets.count("fxmlir.mm_pairs.default") == 2, targets
    assert packed in shapes and [hidden // 2, 32, 2] in shapes, shapes
    assert "aten.constant_pad_nd.default" not in targets, targets


@pytest.mark.parametrize("classes", [1000, 1024])
def test_matrix_vector_classifiers_keep_whole_pair_tiles(tmp_path, classes, threads):
    """A classifier at batch 1 streams its weight, cut in column chunks per thread. Pair tiles
    are 16 columns wide, so a chunk must be too: 1,000 classes (1,008 packed) have no such
    even cut and run on one thread, whose columns end in a 16-wide tile; 1,024 (1,056 packed)
    cut in two 528s. Before, 1,008 was cut in two 504s, and the 8-column rest skipped the
    schedule stage (the ``no_skipped_stage`` fixture catches it)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(512, classes).to(torch.bfloat16).eval()
    targets, _, llvm = _run(model, torch.randn(1, 512, dtype=torch.bfloat16), tmp_path)
    assert targets.count("fxmlir.mm_pairs.default") == 1, targets
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in llvm


@pytest.mark.parametrize(
    "a_shape, b_shape, dot",
    [
        # 32 rows: the kernel packs the right operand per call (its pairs: one zero column
        # for the odd reduction, zero columns up to 64), then multiplies on the dot product.
        ((32, 63), (63, 50), True),
        # Batched, as attention's products are: 8 rows per batch of a small right operand.
        ((6, 8, 40), (6, 40, 24), True),
        # 4 rows: packing would cost more than it saves; the operands are widened to f32.
        ((3, 4, 64), (3, 64, 32), False),
        # 16 rows of a 2 MiB right operand: packing it is slower than the widened product.
        ((16, 1024), (1024, 1024), False),
    ],
    ids=["mm", "bmm", "few_rows", "large_right_operand"],
)
def test_products_of_activations_are_packed_in_the_kernel(tmp_path, a_shape, b_shape, dot):
    """Only weights are packed in the graph, once; products of computed operands are packed
    in the kernel, per call, where enough rows repay the copy (``lower/linear.rs``)."""
    torch.manual_seed(0)
    a = torch.randn(a_shape, dtype=torch.bfloat16)
    b = torch.randn(b_shape, dtype=torch.bfloat16)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        actual = torch.compile(lambda a, b: a @ b, backend="fxmlir")(a, b)
    # k products of values of about one unit: one bf16 rounding of a sum of size sqrt(k).
    torch.testing.assert_close(actual, a @ b, atol=ATOL * a_shape[-1] ** 0.5, rtol=RTOL)
    targets, _, llvm = _kernel(tmp_path)
    assert "fxmlir.mm_pairs.default" not in targets, targets
    assert ("@llvm.x86.avx512bf16.dpbf16ps.512" in llvm) == dot


def test_bf16_attention_runs_on_dot_products(tmp_path):
    """Both products of attention written out (``scaled_dot_product_attention`` itself is one
    fused kernel of f32 FMAs): ``q @ kᵀ`` (37 keys: padded to 48 columns) and ``p @ v`` (an odd
    reduction over the 37 keys)."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 40, 32, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 37, 32, dtype=torch.bfloat16)
    v = torch.randn(2, 4, 37, 32, dtype=torch.bfloat16)
    mask = torch.randn(40, 37, dtype=torch.bfloat16)

    def attention(q, k, v, mask):
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + mask
        return torch.softmax(scores, dim=-1) @ v

    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        actual = torch.compile(attention, backend="fxmlir")(q, k, v, mask)
        expected = attention(q, k, v, mask)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    (schedule,) = [p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir")]
    # [batch x] rows x reduction pairs x columns, as the schedule names its products.
    assert "batch_matmul 8x40x16x48 bf16 pairs" in schedule
    assert "batch_matmul 8x40x19x32 bf16 pairs" in schedule
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in _kernel(tmp_path)[2]


def test_without_hoisting_weights_are_not_packed(tmp_path):
    """The packing would run in the kernel on every call."""
    model = Mlp().to(torch.bfloat16).eval()
    targets, _, _ = _run(model, torch.randn(8, 64, dtype=torch.bfloat16), tmp_path, hoist=False)
    assert "fxmlir.mm_pairs.default" not in targets, targets


def test_float32_products_are_left_alone(tmp_path):
    model = Mlp().eval()
    targets, _, _ = _run(model, torch.randn(8, 64), tmp_path)
    assert "fxmlir.mm_pairs.default" not in targets, targets


def test_the_eager_op_is_the_product_it_stands_for():
    a = torch.randn(5, 8, dtype=torch.bfloat16)
    b = torch.randn(8, 16, dtype=torch.bfloat16)
    packed = b.view(4, 2, 16).permute(0, 2, 1).contiguous()
    actual = torch.ops.fxmlir.mm_pairs(a, packed)
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, a.float() @ b.float(), atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="mm_pairs takes bfloat16 operands"):
        torch.ops.fxmlir.mm_pairs(a.float(), packed)
    with pytest.raises(RuntimeError, match=r"mm_pairs: shapes \[5, 8\] and \[2, 16, 2\]"):
        torch.ops.fxmlir.mm_pairs(a, packed[:2])


class Convs(torch.nn.Module):
    """Two convolutions of ``nd`` dimensions with a ReLU between."""

    def __init__(self, nd: int, channels: int, kernel: int, stride: int, dilation: int, bias: bool):
        super().__init__()
        conv = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)[nd - 1]
        padding = dilation * (kernel // 2)
        self.first = conv(channels, 32, kernel, stride, padding, dilation, bias=bias)
        self.second = conv(32, 16, 3, 1, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


@pytest.mark.parametrize(
    "nd, channels, kernel, stride, dilation, bias, shape",
    [
        # A ResNet stem: 3 channels (the packed weight gets a zero fourth), stride 2.
        (2, 3, 7, 2, 1, False, (1, 3, 30, 30)),
        # Two images, a bias, dilation; 9 x 9 outputs: columns padded to whole dot products.
        (2, 16, 3, 1, 2, True, (2, 16, 9, 9)),
        (1, 6, 5, 2, 1, True, (3, 6, 40)),
        (3, 4, 3, 1, 1, False, (1, 4, 6, 7, 8)),
    ],
    ids=["stem", "dilated_batch", "1d", "3d"],
)
def test_convolutions_become_dot_products(
    tmp_path, nd, channels, kernel, stride, dilation, bias, shape
):
    torch.manual_seed(0)
    model = Convs(nd, channels, kernel, stride, dilation, bias).to(torch.bfloat16).eval()
    targets, shapes, llvm = _run(model, torch.randn(shape, dtype=torch.bfloat16), tmp_path)
    assert targets.count("fxmlir.conv_pairs.default") == 2, targets
    assert "aten.convolution.default" not in targets, targets
    # The packed weights are kernel inputs: [out, in / 2, kernel..., 2].
    assert [32, (channels + 1) // 2, *[kernel] * nd, 2] in shapes, shapes
    assert [16, 16, *[3] * nd, 2] in shapes, shapes
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in llvm


def test_convolutions_it_cannot_serve_stay_plain(tmp_path):
    """Grouped and transposed convolutions keep the plain bf16 convolution."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1, groups=2),
        torch.nn.ConvTranspose2d(32, 16, 2, stride=2),
    )
    model = model.to(torch.bfloat16).eval()
    targets, _, _ = _run(model, torch.randn(1, 16, 8, 8, dtype=torch.bfloat16), tmp_path)
    assert targets.count("aten.convolution.default") == 2, targets
    assert "fxmlir.conv_pairs.default" not in targets, targets


def test_the_eager_convolution_is_the_one_it_stands_for():
    x = torch.randn(2, 3, 9, 9, dtype=torch.bfloat16)
    w = torch.randn(8, 3, 3, 3, dtype=torch.bfloat16)
    packed = torch.nn.functional.pad(w, [0, 0, 0, 0, 0, 1]).view(8, 2, 2, 3, 3)
    packed = packed.permute(0, 1, 3, 4, 2).contiguous()
    actual = torch.ops.fxmlir.conv_pairs(x, packed, [2, 2], [1, 1], [1, 1])
    assert actual.dtype == torch.float32
    expected = torch.nn.functional.conv2d(x.float(), w.float(), stride=2, padding=1)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="conv_pairs takes bfloat16 operands"):
        torch.ops.fxmlir.conv_pairs(x.float(), packed, [1, 1], [0, 0], [1, 1])
    with pytest.raises(RuntimeError, match=r"conv_pairs: input \[2, 3, 9, 9\] does not match"):
        torch.ops.fxmlir.conv_pairs(x, packed[:, :1], [1, 1], [0, 0], [1, 1])
