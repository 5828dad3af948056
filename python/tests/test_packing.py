"""Matrix products of at least 16 rows whose right operand exceeds 64 KiB pack it into
contiguous panels (see ``pipeline/schedule.rs``, ``emit_packing``), once per reduction block
when they are blocked (all shapes here but ``unblocked`` are, on any host: their right operand
exceeds half of the largest L2 assumed, 2 MiB), on one thread and split across two, and give
eager's results."""

import pathlib
import re

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from op_harness import compiled_and_eager

# f32: sums of 1024-2048 products of unit normals (about 45 in magnitude), accumulated in
# another order than eager's. bf16: results round to 8 bits (0.25 apart near 45), up to one
# unit apart from eager's rounding of its own f32 sum.
TOLERANCE = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def _linear_relu(x, w, b):
    return F.relu(F.linear(x, w, b))


CASES = {
    "mm": (lambda a, b: a @ b, [(96, 2048), (2048, 1024)], torch.float32),
    "unblocked": (lambda a, b: a @ b, [(256, 256), (256, 256)], torch.float32),
    "mm_prime_rows": (lambda a, b: a @ b, [(37, 1024), (1024, 1024)], torch.float32),
    "vit_rows": (lambda a, b: a @ b, [(197, 768), (768, 3072)], torch.float32),
    "bmm": (lambda a, b: a @ b, [(2, 32, 1024), (2, 1024, 768)], torch.float32),
    "bias_relu": (
        lambda a, b, c: F.relu(a @ b + c),
        [(64, 1024), (1024, 1024), (1024,)],
        torch.float32,
    ),
    "linear_relu": (_linear_relu, [(64, 1024), (1024, 1024), (1024,)], torch.float32),
    "mm_bf16": (lambda a, b: a @ b, [(32, 2048), (2048, 512)], torch.bfloat16),
}

#: The CPU the products compile for: this host without AVX512-BF16's dot product, with which
#: bf16 products would become pairs (packed by the lowering, not the schedule). Removing a
#: feature keeps the kernels runnable on every host.
PACKING = "host,-avx512bf16"


@pytest.mark.parametrize("name", sorted(CASES))
def test_packed_products_match_eager(name, threads, tmp_path):
    fn, shapes, dtype = CASES[name]
    actual, expected = compiled_and_eager(fn, shapes, dtype, tmp_path, target=PACKING)
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    scripts = "".join(
        p.read_text() for p in pathlib.Path(tmp_path).glob("*.02-schedule.transform.mlir")
    )
    assert ", right operand packed" in scripts, "the product was not packed"
    assert "transform.structured.hoist_pad" in scripts


def test_one_row_reads_the_right_operand_in_place(tmp_path):
    """A one-row product (a batch-1 linear layer) is blocked like the others but not packed:
    each panel would be read by one register tile, so the copy would only add traffic."""
    fn = CASES["mm"][0]
    actual, expected = compiled_and_eager(fn, [(1, 2048), (2048, 1024)], torch.float32, tmp_path)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-3)
    scripts = "".join(
        p.read_text() for p in pathlib.Path(tmp_path).glob("*.02-schedule.transform.mlir")
    )
    assert re.search(r'matmul 1x2048x1024 f32: [^"]*k block \d+,', scripts)
    assert "hoist_pad" not in scripts


def test_a_short_last_row_tile_reads_the_packed_panels(tmp_path):
    """ViT-Base's 197 tokens: whole register tiles (24 of 8 rows with AVX-512's 32 registers,
    49 of 4 with AVX2's 16) and a short rest, which is peeled from the rows loop after the
    block is packed (one packing per block, read by both), and gives eager's results. Cut off
    as a product of its own, the rest would not be packed."""
    fn, shapes, dtype = CASES["vit_rows"]
    actual, expected = compiled_and_eager(fn, shapes, dtype, tmp_path, target=PACKING)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-3)
    scripts = "".join(
        p.read_text() for p in pathlib.Path(tmp_path).glob("*.02-schedule.transform.mlir")
    )
    peeled = re.search(
        r"matmul 197x768x3072 f32: [^\"]*rows peeled after (\d+) \(rest (\d+)\)", scripts
    )
    assert peeled, scripts
    rows = 8 if fxmlir.target_info(PACKING)["vector_bytes"] == 64 else 4
    assert (int(peeled[1]), int(peeled[2])) == (197 // rows * rows, 197 % rows)
    # One packing per column part, each followed by the peel of its rows loop.
    packings = scripts.count("transform.structured.hoist_pad")
    assert packings == scripts.count("transform.loop.peel") >= 1
