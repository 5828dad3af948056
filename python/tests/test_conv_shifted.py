"""Stride-1 convolutions as shifted products (``shifted_products`` in ``src/lower/conv.rs``): a
``linalg.matmul`` per kernel tap, each multiplying the tap's weight by a slice of the flattened
padded input at the tap's shift, with no patch matrix gathered: the first tap's product, then
an ``scf.for`` over the other taps adding theirs. The output rows are computed as wide as the
canvas (rounded up to whole vectors on every thread) and cut after; several images lie one
after the other in the canvas, channel-major. Shapes here cross that: 1-D, 2-D and 3-D
kernels, asymmetric kernels, dilations, paddings, widths no vector divides, batches, with and
without bias, in f32 and f64, on the host's vectors and AVX2's, against eager. Each compile is
strict, and its dump must show the first tap's product and the loop over the others, and no
gather; the shapes the path leaves to im2col must show one product."""

import re

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from convs import conv_inputs, lowered_module
from strict import compile_strict

# f32: sums of channels x taps products (a few hundred) in another order than eager's.
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10)}

#: The vectors compiled for: the host's (AVX-512 where it has it) and AVX2's.
TARGETS = ["host", "x86-64-v3"]

CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}

# name: (input shape, weight shape, padding, dilation)
SHIFTED = {
    # DenseNet's 3 x 3 layer: 58 canvas columns per 56 output columns.
    "densenet_layer": ((1, 128, 56, 56), (32, 128, 3, 3), 1, 1),
    # 14 x 14 (16 / 14 wide). One image's layers below have fewer output channels than input
    # ones: with as many or more and a patch matrix within L2, im2col is faster.
    "square": ((1, 64, 14, 14), (48, 64, 3, 3), 1, 1),
    # An asymmetric kernel, padding and dilation; 27 columns, which no vector divides.
    "asymmetric": ((1, 48, 20, 27), (40, 48, 3, 5), (1, 2), (2, 1)),
    # A wide kernel: 49 taps.
    "seven_by_seven": ((1, 32, 30, 40), (32, 32, 7, 7), 3, 1),
    "no_padding": ((1, 40, 17, 50), (32, 40, 2, 3), 0, 1),
    "conv1d": ((1, 64, 300), (48, 64, 5), 2, 2),
    "conv3d": ((1, 32, 3, 12, 14), (24, 32, 2, 1, 2), (0, 0, 1), 1),
    # Several images, channel-major in one canvas: 3 x 26 x 32 columns for 3 x 24 x 30.
    "batch": ((3, 64, 24, 30), (32, 64, 3, 3), 1, 1),
    "batch_conv1d": ((4, 64, 300), (64, 64, 5), 2, 2),
    "batch_conv3d": ((2, 32, 16, 12, 30), (32, 32, 2, 1, 2), (0, 0, 1), 1),
}

# Shapes that keep the im2col product: too few channels, small images of a batch (whole
# canvases of 22 x 22 for outputs of 20 x 20: 1.21 times the columns), a stride, rows widened
# too much (7 x 7 outputs of a 3 x 3 kernel: 9 / 7), columns padded too much (13 x 13 outputs
# computed 15 wide, 195 columns padded to 208 or 224 for 169), one image into at least as many
# output channels whose patch matrix fits L2 (32 -> 128 at 27 x 27: 0.84 MB), groups.
IM2COL = {
    "few_channels": ((1, 16, 20, 20), (8, 16, 3, 3), 1, 1, 1, 1),
    "batch_of_small_images": ((2, 32, 20, 20), (8, 32, 3, 3), 1, 1, 1, 1),
    "strided": ((1, 32, 20, 20), (8, 32, 3, 3), 1, 1, 2, 1),
    "narrow_rows": ((1, 64, 7, 7), (32, 64, 3, 3), 1, 1, 1, 1),
    "padded_columns": ((1, 64, 13, 13), (48, 64, 3, 3), 1, 1, 1, 1),
    "patches_in_cache": ((1, 32, 27, 27), (128, 32, 3, 3), 1, 1, 1, 1),
    "grouped": ((1, 64, 20, 20), (32, 32, 3, 3), 1, 1, 1, 2),
}


def _assert_tap_loop(lowered: str, taps: int) -> None:
    """The first tap's product, then one more in a loop from tap 1 to ``taps``: for all the
    columns, or for blocks of them that fit the target's L2 (``Taps::blocked``: whole blocks
    in a loop, then the last, shorter one)."""
    assert len(re.findall(r"= linalg\.matmul", lowered)) in (2, 4), lowered[:3000]
    loop = rf"scf\.for %\S+ = %c1(_\d+)? to %c{taps}(_\d+)? step"
    assert re.search(loop, lowered), lowered[:3000]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", sorted(SHIFTED))
def test_shifted_products_match_eager(name, bias, dtype, target, tmp_path):
    x_shape, w_shape, padding, dilation = SHIFTED[name]
    x, w, b = conv_inputs(x_shape, w_shape, dtype)
    conv = CONV[len(x_shape)]

    def fn(x, w, b):
        # The activation after the convolution reads only the output's columns, not the
        # computed-and-dropped ones past each row.
        return torch.relu(conv(x, w, b if bias else None, padding=padding, dilation=dilation))

    actual = compile_strict(fn, (x, w, b), tmp_path, target)
    lowered = lowered_module(tmp_path)
    _assert_tap_loop(lowered, w[0, 0].numel())
    assert "linalg.generic" in lowered
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual, fn(x, w, b), atol=atol, rtol=rtol)


@pytest.mark.parametrize("batch", [1, 3])
def test_nonfinite_inputs_stay_in_their_windows(tmp_path, batch):
    """A NaN or an infinity reaches exactly the outputs whose windows hold it: the columns
    computed past each row (which read the next row's start) and, in a batch, the rows past
    each image (which read the next image's start) are dropped, never mixed in."""
    x, w, b = conv_inputs((batch, 64, 24, 30), (32, 64, 3, 3), torch.float32)
    x[0, 3, 4, 29] = float("nan")
    x[0, 5, 7, 0] = float("inf")
    x[0, 6, 23, 9] = -float("inf")
    x[-1, 2, 0, 0] = float("nan")

    def fn(x, w, b):
        return F.conv2d(x, w, b, padding=1)

    actual = compile_strict(fn, (x, w, b), tmp_path, "host")
    _assert_tap_loop(lowered_module(tmp_path), 9)
    expected = fn(x, w, b)
    assert torch.equal(actual.isnan(), expected.isnan())
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("name", sorted(IM2COL))
def test_other_convolutions_keep_one_product(name, tmp_path):
    x_shape, w_shape, padding, dilation, stride, groups = IM2COL[name]
    x, w, b = conv_inputs(x_shape, w_shape, torch.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)

    actual = compile_strict(fn, (x, w, b), tmp_path, "host")
    lowered = lowered_module(tmp_path)
    products = re.findall(r"= linalg\.(?:batch_)?matmul", lowered)
    assert len(products) == 1, lowered[:3000]
    torch.testing.assert_close(actual, fn(x, w, b), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("c", "cout", "together"),
    [(32, 8, False), (64, 32, True)],
    ids=["small", "cut-together"],
)
def test_taps_are_cut_across_threads_together(tmp_path, threads, c, cout, together):
    """On two threads, taps with enough work together (32 x 64 x 384 a tap, 7.1 M
    multiply-adds for the nine) run in one ``scf.forall`` of a chunk of columns per thread,
    each thread's chunk the first tap's product and the loop over the others; too little
    (8 x 32 x 384 a tap, 0.9 M) stays on one thread."""
    x, w, b = conv_inputs((1, c, 12, 30), (cout, c, 3, 3), torch.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, padding=1)

    actual = compile_strict(fn, (x, w, b), tmp_path, "host")
    lowered = lowered_module(tmp_path)
    _assert_tap_loop(lowered, 9)
    assert lowered.count("scf.forall (") == (1 if together and threads == 2 else 0)
    torch.testing.assert_close(actual, fn(x, w, b), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("l2", "blocks"), [("8M", 1), ("256K", 2)])
def test_columns_are_summed_in_blocks_that_fit_l2(tmp_path, l2, blocks):
    """A batch of 4 images of 30 x 30 over 64 channels (4096 columns, 2048 a thread): with a
    256 KiB L2, each thread sums its columns block by block (sum and canvas columns within half
    of L2: 341 columns, evened out to 6 blocks of 304 and the last 224), every block the first
    tap's product and the loop over the others; with 8 MiB, all at once."""
    x, w, b = conv_inputs((4, 64, 30, 30), (32, 64, 3, 3), torch.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, padding=1)

    target = f"x86-64-v3,threads=2,l2={l2}"
    actual = compile_strict(fn, (x, w, b), tmp_path, target)
    lowered = lowered_module(tmp_path)
    assert len(re.findall(r"= linalg\.matmul", lowered)) == 2 * blocks, lowered[:3000]
    assert len(re.findall(r"scf\.for %\S+ = %c0(_\d+)? to %c1824(_\d+)? step %c304", lowered)) == (
        blocks - 1
    )
    assert lowered.count("scf.forall (") == 1, lowered[:3000]
    torch.testing.assert_close(actual, fn(x, w, b), atol=1e-4, rtol=1e-4)


def test_module_weights_are_transposed_once(tmp_path):
    """A module's weights reach the kernel tap-major (``fxmlir.passes.taps``), transposed once
    outside it: the kernel's inputs hold the ``[3, 3, cout, c]`` copies, and no transposition
    is left in it. An in-place update of a weight transposes it again."""
    import json

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 48, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(48, 32, 3, padding=1, bias=False),
    ).eval()
    x = torch.randn(1, 64, 20, 20)
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        compiled = torch.compile(model, backend="fxmlir")
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
        model[2].weight.mul_(-0.5)
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    shapes = [i["meta"]["shape"] for i in document["inputs"]]
    assert [3, 3, 48, 64] in shapes and [3, 3, 32, 48] in shapes, shapes
    (scheduled,) = [p.read_text() for p in tmp_path.glob("*.02-schedule.mlir")]
    assert not re.search(r"linalg\.generic.*outs\(%\S+ : tensor<3x3x", scheduled)
    assert len(re.findall(r"x86vector|vector\.fma|vector\.contract", scheduled)) > 0


def test_a_dynamic_batch_convolves_each_sample_by_taps(tmp_path):
    """A batch marked dynamic: one kernel loops over the samples (``src/lower/samples.rs``:
    an ``scf.forall``, whole samples to each thread), each sample's convolution the tap loop
    for one thread (no ``scf.forall`` of its own), its weight tap-major from outside the
    kernel (the hoist's copy is an input, no transposition is left in the kernel)."""
    import json

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 48, 3, padding=1), torch.nn.ReLU()).eval()
    settings = {"fallback": "error", "dump_dir": str(tmp_path), "specializations": 0}
    with torch.no_grad(), fxmlir.config.patch(**settings):
        compiled = torch.compile(model, backend="fxmlir")
        for n in (2, 3, 5):
            x = torch.randn(n, 64, 12, 30)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    assert document["symbols"], document["name"]
    assert [3, 3, 48, 64] in [i["meta"]["shape"] for i in document["inputs"]]
    lowered = lowered_module(tmp_path)
    assert lowered.count("scf.forall (") == 1, lowered[:3000]
    _assert_tap_loop(lowered, 9)
    (scheduled,) = [p.read_text() for p in tmp_path.glob("*.02-schedule.mlir")]
    assert not re.search(r"linalg\.generic.*outs\(%\S+ : tensor<3x3x", scheduled)
