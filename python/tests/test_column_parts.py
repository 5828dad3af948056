"""Products whose columns are no whole number of register tiles: the schedule cuts them into
column parts (whole tiles, then the rest, the rest again after one vector when it is more than
one vector but not two), each part with a fill of its own, so that every register tile starts
from zeros and no fill of the whole product is left to be written and read back. Against
eager, on pinned AVX-512 and AVX2 targets, on one and two threads, in f32 and f64, batched and
not, with a short last row tile, and inside a convolution's taps."""

import pytest
import torch
import torch.nn as nn
from strict import compile_strict

TARGETS = ["x86-64-v4,threads=2", "x86-64-v3,threads=1"]

# (batch, rows, depth, columns): one vector and less (40 on AVX-512, 32 + 8), a rest after
# one vector (50: 32 + 16 + 2), a short last row tile (37 rows), a rest of one column, a
# product wide enough to be cut across two threads by columns (500 each: 480 + 16 + 4) and
# shallow enough to stay unblocked (its right operand within half of L2 in f64).
SHAPES = [
    (None, 16, 64, 40),
    (None, 24, 19, 50),
    (None, 37, 8, 1000),
    (None, 8, 16, 33),
    (None, 64, 128, 1000),
    (3, 37, 19, 23),
    (2, 16, 32, 100),
]


def _fills(tmp_path, result):
    """The `linalg.fill`s of a `result` tensor (such as ``tensor<37x``) left after the
    schedule."""
    lines = "".join(p.read_text() for p in tmp_path.glob("*.02-schedule.mlir")).splitlines()
    return [line for line in lines if "linalg.fill" in line and f"-> {result}" in line]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(d) for d in s if d))
@pytest.mark.parametrize("target", TARGETS)
def test_column_parts_match_eager_without_a_whole_fill(shape, dtype, target, tmp_path):
    batch, m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    lead = (batch,) if batch else ()
    a = torch.randn(*lead, m, k, generator=gen, dtype=dtype)
    b = torch.randn(*lead, k, n, generator=gen, dtype=dtype)
    actual = compile_strict(torch.bmm if batch else torch.mm, (a, b), tmp_path, target)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(actual, a @ b, atol=tol, rtol=tol)
    assert _fills(tmp_path, "tensor<" + "".join(f"{d}x" for d in (*lead, m))) == []


class TapsAndBias(nn.Module):
    """A 3 x 3 convolution of enough channels to be computed tap by tap over the canvas, whose
    first tap's product starts from zeros; the bias and ReLU after it."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("size", [14, 27])
@pytest.mark.parametrize("target", TARGETS)
def test_a_convolutions_first_tap_starts_from_zeros(size, target, tmp_path):
    torch.manual_seed(0)
    model = TapsAndBias(64, 48).eval()
    x = torch.randn(1, 64, size, size)
    actual = compile_strict(model, (x,), tmp_path, target)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    scheduled = "".join(p.read_text() for p in tmp_path.glob("*.02-schedule.mlir"))
    # The taps' products were scheduled, and none kept a fill of its 48 output channels (the
    # canvas's fill, its zero padding, stays).
    assert "vector.contract" in scheduled
    assert _fills(tmp_path, "tensor<48x") == []


@pytest.mark.parametrize("shape", [(64, 27, 12352), (32, 144, 6000)], ids=["27x12352", "144x6000"])
@pytest.mark.parametrize("target", ["x86-64-v4,threads=2,l2=1M", "x86-64-v3,threads=1"])
def test_one_reduction_block_starts_from_zeros(shape, target, tmp_path):
    """A product whose right operand exceeds half of L2 (a thread's on two threads) but whose
    reduction is one block (a stem convolution's patch matrix): cut into column blocks, its
    fill goes into the blocks and the register tiles."""
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen)
    b = torch.randn(k, n, generator=gen)
    actual = compile_strict(torch.mm, (a, b), tmp_path, target)
    torch.testing.assert_close(actual, a @ b, atol=1e-4, rtol=1e-4)
    assert _fills(tmp_path, f"tensor<{m}x") == []
