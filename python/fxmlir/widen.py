"""Weights of half-precision products widened to float32 once, outside the kernel.

A bf16 or f16 product accumulates in f32 and rounds once (as PyTorch's CPU kernels do). Where
the CPU has no dot product for the half type (f16 everywhere, bf16 without AVX512-BF16), the
register tiles would widen every operand element they load, a conversion beside each
multiply-add: on the AVX2 host a 128 x 512 x 4000 product ran at 28 GFLOP/s in bf16 and 8 in
f16, against about 130 in f32. So the kernel multiplies f32 copies of such operands (``widened`` in
``src/lower/linear.rs``, which also says from how many rows on), made by a pass over each.

For a right operand computed from weights alone (a linear layer's ``t(weight)``) that pass
would repeat on every call. So before hoisting, each such ``mm`` / unit-scale ``addmm``
becomes

    wide = _to_copy(b, float32)                                    # weight-only: hoisted
    out = _to_copy(mm(_to_copy(a, float32), wide) [+ bias], half)

the product the kernel would compute anyway, with the same values: widening is exact, the
bias is added before the one rounding. :mod:`fxmlir.hoist` then computes ``wide`` once: the
kernel keeps an f32 copy of such weights, twice their size. Products on bf16 pairs
(:mod:`fxmlir.pairs`) are rewritten before this and left alone.
"""

from __future__ import annotations

import torch
import torch.fx

from . import _fxmlir, hoist
from .pairs import chain, fake_val, replace, weight_products

aten = torch.ops.aten


def widen_weights(gm: torch.fx.GraphModule, static: frozenset[int]) -> int:
    """Widens the weight-only right operands of ``gm``'s half-precision products whose kernel
    would widen them on every call (see the module docs); returns how many."""
    graph = gm.graph
    widened = 0
    for node, a, b, bias in weight_products(gm, hoist.Split(gm, static).static_nodes):
        va, vb = fake_val(a), fake_val(b)
        if va is None or vb is None or va.dtype != vb.dtype or va.dim() != 2:
            continue
        rows = va.shape[0]
        dtype = str(va.dtype).removeprefix("torch.")
        if not isinstance(rows, int) or not _fxmlir.widened_product(dtype, rows):
            continue
        with graph.inserting_before(node):
            wide = [
                chain(graph, node, [(aten._to_copy.default, (x,), {"dtype": torch.float32})])
                for x in (a, b)
            ]
            product = chain(graph, node, [(aten.mm.default, tuple(wide), {})])
        replace(graph, node, product, bias)
        widened += 1
    if widened:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return widened
