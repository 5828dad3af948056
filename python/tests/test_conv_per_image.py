"""Convolutions of several images as one product per image (``per_image_product`` in
``src/lower/conv.rs``): without groups, at a fixed batch, with at least 512 output columns an
image, the convolution is a ``linalg.batch_matmul`` whose left operand (the weight) has no
batch dimension, over each image's patch matrix, summed straight into the output's layout
``[n, cout, o...]``. Shapes here cross that: pointwise (the input read where it lies) and
gathered patches, strides, dilations, paddings, 1-D, 2-D and 3-D, widths no vector divides,
with and without bias, a batch norm and activation after, in f32 and f64, on the host's
vectors and AVX2's, against eager. Each compile is strict, and its dump must show the shared
weight's products and no other product."""

import re

import pytest
import torch
import torch.nn.functional as F
from convs import conv_inputs, lowered_module
from strict import compile_strict

# Sums of up to a few hundred products in another order than eager's.
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10)}

#: The vectors compiled for: the host's (AVX-512 where it has it) and AVX2's.
TARGETS = ["host", "x86-64-v3"]

CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}

# name: (input shape, weight shape, stride, padding, dilation)
PER_IMAGE = {
    "pointwise": ((3, 64, 32, 32), (48, 64, 1, 1), 1, 0, 1),
    # A 1 x 1 kernel at stride 2 (a residual block's projection) gathers its patches.
    "pointwise_strided": ((2, 32, 48, 48), (16, 32, 1, 1), 2, 0, 1),
    # Too few channels for shifted products.
    "three_by_three": ((2, 16, 24, 24), (8, 16, 3, 3), 1, 1, 1),
    "strided": ((2, 24, 48, 48), (32, 24, 3, 3), 2, 1, 1),
    "dilated": ((2, 8, 30, 30), (8, 8, 3, 3), 1, 2, 2),
    # 23 x 29 columns an image, which no vector divides.
    "odd_columns": ((2, 8, 23, 29), (12, 8, 3, 3), 1, 1, 1),
    "conv1d": ((4, 16, 600), (24, 16, 5), 1, 2, 1),
    "conv3d": ((2, 8, 4, 12, 12), (8, 8, 3, 3, 3), 1, 1, 1),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", sorted(PER_IMAGE))
def test_per_image_products_match_eager(name, bias, dtype, target, tmp_path):
    x_shape, w_shape, stride, padding, dilation = PER_IMAGE[name]
    x, w, b = conv_inputs(x_shape, w_shape, dtype)
    conv = CONV[len(x_shape)]
    channels = w_shape[0]
    mean = torch.linspace(-1, 1, channels, dtype=dtype)
    var = torch.linspace(0.5, 2, channels, dtype=dtype)

    def fn(x, w, b):
        y = conv(x, w, b if bias else None, stride=stride, padding=padding, dilation=dilation)
        # A batch norm and an activation read the products' sums in the output's layout.
        return torch.relu(F.batch_norm(y, mean, var, training=False))

    actual = compile_strict(fn, (x, w, b), tmp_path, target)
    lowered = lowered_module(tmp_path)
    shared = re.findall(r"= linalg\.batch_matmul indexing_maps = \[#map\d*, #map\d*, #", lowered)
    assert len(shared) == 1, lowered[:4000]
    assert "linalg.matmul" not in lowered, lowered[:4000]
    assert "affine_map<(d0, d1, d2, d3) -> (d1, d3)>" in lowered
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual, fn(x, w, b), atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    ("x_shape", "groups"),
    [((2, 32, 20, 20), 1), ((2, 32, 32, 32), 2), ((1, 32, 32, 32), 1)],
    ids=["narrow_images", "grouped", "one_image"],
)
def test_other_batches_keep_one_product(x_shape, groups, tmp_path):
    """Fewer than 512 columns an image (a product over every image's columns, read
    channel-major), groups (one product per group) and one image keep one product over
    every column."""
    x, w, b = conv_inputs(x_shape, (16, 32 // groups, 1, 1), torch.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, stride=1, groups=groups)

    actual = compile_strict(fn, (x, w, b), tmp_path, "host")
    lowered = lowered_module(tmp_path)
    assert "(d1, d3)>" not in lowered, lowered[:4000]
    assert len(re.findall(r"= linalg\.(?:batch_)?matmul", lowered)) == 1, lowered[:4000]
    torch.testing.assert_close(actual, fn(x, w, b), atol=1e-4, rtol=1e-4)
