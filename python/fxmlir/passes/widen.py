"""Weights of half-precision products widened to float32 once, outside the kernel.

A bf16 or f16 product accumulates in f32 and rounds once (as PyTorch's CPU kernels do). Where
the CPU has no dot product for the half type (f16 everywhere, bf16 without AVX512-BF16), the
register tiles would widen every operand element they load, a conversion beside each
multiply-add: on the AVX2 host a 128 x 512 x 4000 product ran at 28 GFLOP/s in bf16 and 8 in
f16, against about 130 in f32. So the kernel multiplies f32 copies of such operands
(``widened`` in ``src/lower/products.rs``, which also says from how many rows on), made by a
pass over each.

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
tile of rows that reads it. So does a convolution whose weight (and bias) are weight-only:
its kernel would widen the weight on every call. :mod:`fxmlir.passes.hoist` then computes ``wide``
once: the kernel keeps an f32 copy of such weights, twice their size. Products on bf16 pairs
(:mod:`fxmlir.passes.bf16_pairs`) are rewritten before this and left alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx

from .. import _fxmlir
from . import hoist
from .rewriting import chain, fake_val, replace, weight_products

aten = torch.ops.aten


#: Grouped products (mixture-of-experts layers) by their targets' names: the second is
#: registered by transformers, which need not be imported.
GROUPED = ("aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")


@dataclasses.dataclass
class Rewrite:
    """A half-precision product whose weight is weight-only: ``operands`` (input first, then
    the weight and maybe a bias) are widened and ``rebuilt`` into the f32 product's target
    and arguments; ``rows`` are the rows of one product, ``bias`` is added after it."""

    node: torch.fx.Node
    operands: list[torch.fx.Node]
    rows: object
    rebuilt: Callable[[list[torch.fx.Node]], tuple[Any, tuple]]
    bias: object = None


def _products(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> Iterator[Rewrite]:
    for node, a, b, bias in weight_products(gm, weights):
        va = fake_val(a)
        rows = va.shape[0] if va is not None and va.dim() == 2 else None
        yield Rewrite(node, [a, b], rows, lambda wide: (aten.mm.default, tuple(wide)), bias)


def _grouped(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> Iterator[Rewrite]:
    """Grouped products of ``a`` (rows x k) by weight-only ``b`` (groups x k x n), without bias
    or output dtype; a product's rows are those of a group on average."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or str(node.target) not in GROUPED:
            continue
        a, b, offs, *rest = node.args
        va, vb = fake_val(a), fake_val(b)
        if b not in weights or any(x is not None for x in rest) or node.kwargs:
            continue
        if va is None or vb is None or va.dim() != 2 or vb.dim() != 3 or not vb.shape[0]:
            continue
        target = node.target
        yield Rewrite(
            node,
            [a, b],
            va.shape[0] // vb.shape[0],
            lambda wide, target=target, offs=offs: (target, (*wide, offs)),
        )


def _convolutions(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> Iterator[Rewrite]:
    """Convolutions by a weight-only weight (and bias); a product's rows are the output's
    pixels (the convolution's kernel widens its weight on every call otherwise: a 512 x 512 x
    3 x 3 f16 weight cost a fifth of ResNet-18's time)."""
    for node in gm.graph.find_nodes(op="call_function", target=aten.convolution.default):
        x, w, bias, *rest = node.args
        out = fake_val(node)
        if w not in weights or (bias is not None and bias not in weights) or out is None:
            continue
        rows = math.prod(out.shape) // out.shape[1] if out.dim() > 2 else None
        operands = [x, w] if bias is None else [x, w, bias]
        yield Rewrite(
            node,
            operands,
            rows,
            lambda wide, rest=tuple(rest): (
                aten.convolution.default,
                (wide[0], wide[1], wide[2] if len(wide) > 2 else None, *rest),
            ),
        )


def _widens(rewrite: Rewrite, target: str) -> bool:
    vals = [fake_val(x) for x in rewrite.operands]
    if any(v is None or v.dtype != vals[0].dtype for v in vals):
        return False
    dtype = str(vals[0].dtype).removeprefix("torch.")
    rows = rewrite.rows
    return isinstance(rows, int) and _fxmlir.widened_product(dtype, rows, target)


def widen_weights(gm: torch.fx.GraphModule, split: hoist.Split, target: str = "host") -> int:
    """Widens the weight-only operands (in the ``static_nodes`` of ``split``, the analysis of
    ``gm``) of ``gm``'s half-precision products (grouped ones and convolutions included) whose
    kernel for the CPU ``target`` names would widen them on every call (see the module docs);
    returns how many products were rewritten."""
    graph = gm.graph
    weights = split.static_nodes
    rewrites = [
        r
        for found in (_products, _grouped, _convolutions)
        for r in list(found(gm, weights))
        if _widens(r, target)
    ]
    # In graph order, so that an operand two products share (a weight used twice) is widened
    # once, before the first.
    order = {n: i for i, n in enumerate(graph.nodes)}
    rewrites.sort(key=lambda r: order[r.node])
    widened: dict[torch.fx.Node, torch.fx.Node] = {}
    for r in rewrites:
        with graph.inserting_before(r.node):
            for x in r.operands:
                if x not in widened:
                    steps = [(aten._to_copy.default, (x,), {"dtype": torch.float32})]
                    widened[x] = chain(graph, r.node, steps)
            target, args = r.rebuilt([widened[x] for x in r.operands])
            product = chain(graph, r.node, [(target, args, {})])
        replace(graph, r.node, product, r.bias)
    if rewrites:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return len(rewrites)
