"""Convolution kernels cropped to the taps that read the input (``live_taps`` and ``cropped`` in
``src/lower/conv.rs``): a tap whose windows read only the zero padding adds nothing, so the
lowering slices the weight to the first and last tap of each dimension that reads the input and
shrinks the padding to match (below zero when leading taps read past the padding: the canvas
then crops the input). DeepLabV3's atrous convolutions at rates 24 and 36 on a 14 x 14 map read
the input with their centre tap only and become 1 x 1 convolutions. Each case is compiled
strictly (no eager fallback), checked against eager, and its lowering must show the weight
sliced to the taps this file works out on its own, or not sliced at all when every tap reads
the input."""

import pathlib

import pytest
import torch
import torch.nn.functional as F
from strict import compile_strict

CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}

# name: (input shape, weight shape, stride, padding, dilation, groups)
CASES = {
    # DeepLabV3's ASPP branches on a 14 x 14 map: only the centre tap reads the input.
    "aspp_rate_24": ((1, 16, 14, 15), (8, 16, 3, 3), 1, 24, 24, 1),
    "aspp_rate_36": ((1, 16, 14, 15), (8, 16, 3, 3), 1, 36, 36, 1),
    # Rate 12: every tap reads a border of the input; nothing is cropped.
    "aspp_rate_12": ((1, 16, 14, 15), (8, 16, 3, 3), 1, 12, 12, 1),
    # Cropped along the first dimension only.
    "one_dimension": ((1, 6, 6, 9), (4, 6, 3, 3), 1, (7, 1), (7, 1), 1),
    # A stride: the centre tap of a stride-2 convolution, a strided 1 x 1 convolution.
    "strided": ((1, 8, 5, 5), (4, 8, 3, 3), 2, 6, 6, 1),
    # One output whose window reads only the third of five taps: the padding becomes -2.
    "negative_padding": ((1, 4, 5, 5), (4, 4, 5, 5), 1, 4, 3, 1),
    # Depthwise and grouped.
    "depthwise": ((1, 8, 4, 4), (8, 1, 3, 3), 1, 5, 5, 8),
    "grouped": ((1, 8, 6, 6), (8, 4, 5, 3), 1, (8, 1), (4, 1), 2),
    "conv1d": ((1, 8, 10), (4, 8, 3), 1, 16, 16, 1),
    "conv3d": ((1, 4, 3, 6, 6), (4, 4, 3, 3, 3), 1, (4, 1, 1), (4, 1, 1), 1),
}


def _per_dim(value, nd):
    return list(value) if isinstance(value, tuple) else [value] * nd


def live_range(size, kernel, stride, padding, dilation):
    """The first and last tap that reads an input element, by walking every output."""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    live = [
        tap
        for tap in range(kernel)
        if any(0 <= o * stride + tap * dilation - padding < size for o in range(out))
    ]
    return live[0], live[-1]


def cropped_shape(x_shape, w_shape, stride, padding, dilation):
    nd = len(w_shape) - 2
    ranges = [
        live_range(x_shape[2 + i], w_shape[2 + i], s, p, d)
        for i, s, p, d in zip(
            range(nd), _per_dim(stride, nd), _per_dim(padding, nd), _per_dim(dilation, nd)
        )
    ]
    return [*w_shape[:2], *(last - first + 1 for first, last in ranges)]


def _type(shape):
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


@pytest.mark.parametrize("name", sorted(CASES))
def test_dead_taps_are_cropped(name, tmp_path):
    x_shape, w_shape, stride, padding, dilation, groups = CASES[name]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=gen)
    w = torch.randn(w_shape, generator=gen)
    b = torch.randn(w_shape[0], generator=gen)
    conv = CONV[len(x_shape)]

    def fn(x, w, b):
        y = conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return torch.relu(y)

    actual = compile_strict(fn, (x, w, b), tmp_path, "host")
    torch.testing.assert_close(actual, fn(x, w, b), atol=1e-4, rtol=1e-4)
    (lowered,) = [p.read_text() for p in pathlib.Path(tmp_path).glob("*.00-input.mlir")]
    slices = [
        line
        for line in lowered.splitlines()
        if "tensor.extract_slice" in line and f": {_type(w_shape)} to " in line
    ]
    crop = cropped_shape(x_shape, w_shape, stride, padding, dilation)
    if crop == list(w_shape):
        assert not slices, "\n".join(slices)
    else:
        assert len(slices) == 1, lowered[:3000]
        assert f"to {_type(crop)}" in slices[0], slices[0]


def test_the_oracle_finds_the_aspp_centre():
    """The cases' expected crops, worked out by walking every output, are what the module docs
    say: the centre tap alone at rates 24 and 36, every tap at 12."""
    shapes = {
        name: cropped_shape(x_shape, w_shape, stride, padding, dilation)
        for name, (x_shape, w_shape, stride, padding, dilation, _) in CASES.items()
    }
    assert shapes["aspp_rate_24"] == shapes["aspp_rate_36"] == [8, 16, 1, 1]
    assert shapes["aspp_rate_12"] == [8, 16, 3, 3]
    assert shapes["negative_padding"] == [4, 4, 1, 1]
