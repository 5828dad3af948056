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
bias is added before the one rounding. A grouped product (``_grouped_mm``, transformers'
``grouped_mm_fallback``: a mixture-of-experts layer) whose expert matrices are weight-only
becomes the same product of widened operands, rounded once, where its groups average enough
rows: the kernel would otherwise widen each expert matrix in the register tiles of every
tile of rows that reads it. :mod:`fxmlir.hoist` then computes ``wide`` once: the
kernel keeps an f32 copy of such weights, twice their size. Products on bf16 pairs
(:mod:`fxmlir.pairs`) are rewritten before this and left alone.
"""

from __future__ import annotations

import torch
import torch.fx

from . import _fxmlir, hoist
from .pairs import chain, fake_val, replace, weight_products

aten = torch.ops.aten


#: Grouped products (mixture-of-experts layers) by their targets' names: the second is
#: registered by transformers, which need not be imported.
GROUPED = ("aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")


def _widens(a: torch.fx.Node, b: torch.fx.Node, rows_per_product: int) -> bool:
    va, vb = fake_val(a), fake_val(b)
    if va is None or vb is None or va.dtype != vb.dtype:
        return False
    dtype = str(va.dtype).removeprefix("torch.")
    return _fxmlir.widened_product(dtype, rows_per_product)


def _grouped(node: torch.fx.Node, weights: set[torch.fx.Node]):
    """``(a, b, rows per group)`` of a grouped product of ``a`` (rows x k) by the weight-only
    ``b`` (groups x k x n), without bias or output dtype; None for anything else."""
    if node.op != "call_function" or str(node.target) not in GROUPED:
        return None
    a, b, _, *rest = node.args
    va, vb = fake_val(a), fake_val(b)
    if b not in weights or any(x is not None for x in rest) or node.kwargs:
        return None
    if va is None or vb is None or va.dim() != 2 or vb.dim() != 3:
        return None
    rows, groups = va.shape[0], vb.shape[0]
    if not isinstance(rows, int) or not isinstance(groups, int) or groups == 0:
        return None
    return a, b, rows // groups


def _widened(graph: torch.fx.Graph, node: torch.fx.Node, *operands: torch.fx.Node) -> list:
    with graph.inserting_before(node):
        return [
            chain(graph, node, [(aten._to_copy.default, (x,), {"dtype": torch.float32})])
            for x in operands
        ]


def widen_weights(gm: torch.fx.GraphModule, static: frozenset[int]) -> int:
    """Widens the weight-only right operands of ``gm``'s half-precision products (grouped
    ones included) whose kernel would widen them on every call (see the module docs); returns
    how many."""
    graph = gm.graph
    weights = hoist.Split(gm, static).static_nodes
    widened = 0
    for node, a, b, bias in weight_products(gm, weights):
        va = fake_val(a)
        rows = va.shape[0] if va is not None and va.dim() == 2 else None
        if not isinstance(rows, int) or not _widens(a, b, rows):
            continue
        wide = _widened(graph, node, a, b)
        with graph.inserting_before(node):
            product = chain(graph, node, [(aten.mm.default, tuple(wide), {})])
        replace(graph, node, product, bias)
        widened += 1
    for node in list(graph.nodes):
        grouped = _grouped(node, weights)
        if grouped is None or not _widens(*grouped):
            continue
        a, b, _ = grouped
        wide = _widened(graph, node, a, b)
        with graph.inserting_before(node):
            product = chain(graph, node, [(node.target, (*wide, node.args[2]), {})])
        replace(graph, node, product, None)
        widened += 1
    if widened:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return widened
