"""f32 matrix products by a weight, the weight handed to the kernel in panels: the layout the
schedule's register tiles read it in.

A large product's schedule copies its right operand into panels, one per register tile of
columns (``w`` of them: two vectors), each panel's rows one after another: block by block
along the reduction as each block begins, or whole for a weight that fits half of L2. The
tiles then read a panel as one stream from L2. For a weight that copy is the same on every
call: 10-17% of the products of a BERT or ViT layer, half of it waiting on memory, since the
copy reads a few hundred bytes from each of hundreds of rows kilobytes apart, which no
hardware prefetcher follows.

So before hoisting, each f32 ``mm`` / ``addmm`` whose right operand ``b`` (``k x n``) the graph
computes from parameters alone (a linear layer's ``t(weight)``), where the schedule would copy
it so (``_fxmlir.weight_panels`` says when, and the width ``w``), becomes

    panels = clone(permute(view(b, [k, n // w, w]), [1, 0, 2]))   # weight-only: hoisted
    out = mm_panels(a, panels[, bias])

``panels[j // w, k, j % w] = b[k, j]``: :mod:`fxmlir.passes.hoist` computes it once, outside the
kernel, and the kernel's register tiles read each panel where it lies (``fxmlir.mm_panels`` in
``src/lower/linear.rs``). A linear layer's bias is the op's own, added in the product's layout,
so that the schedule fuses it (and the elementwise ops after it) into the register tiles.
Products whose sizes are symbolic or whose width is no multiple of ``w`` keep the plain
product.
"""

from __future__ import annotations

import torch
import torch.fx

from .. import _fxmlir
from . import hoist
from .rewriting import chain, fake_val, matrices, weight_products

aten = torch.ops.aten


def panel_weights(gm: torch.fx.GraphModule, split: hoist.Split, target: str = "host") -> int:
    """Rewrites the f32 products of ``gm`` whose weight is weight-only (one of the
    ``static_nodes`` of ``split``, the analysis of ``gm``) into products on the weight in
    panels, where the kernel for the CPU ``target`` names would copy it into panels on every
    call (see the module docs); returns how many."""
    graph = gm.graph
    threads = torch.get_num_threads()
    rewritten = 0
    for node, a, b, bias in weight_products(gm, split.static_nodes):
        operands = matrices(a, b, torch.float32)
        if operands is None or not all(isinstance(d, int) for v in operands for d in v.shape):
            continue
        (m, k), (_, n) = (v.shape for v in operands)
        width = _fxmlir.weight_panels(m, k, n, target, threads)
        if width is None:
            continue
        with graph.inserting_before(node):
            steps = [
                (aten.view.default, (b, [k, n // width, width]), {}),
                (aten.permute.default, (None, [1, 0, 2]), {}),
                (aten.clone.default, (None,), {"memory_format": torch.contiguous_format}),
                (torch.ops.fxmlir.mm_panels.default, (a, None, *_f32_bias(bias, n)), {}),
            ]
            product = chain(graph, node, steps)
            if bias is not None and not _f32_bias(bias, n):
                product = chain(graph, node, [(aten.add.Tensor, (product, bias), {})])
        node.replace_all_uses_with(product)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph.eliminate_dead_code()
        gm.recompile()
    return rewritten


def _f32_bias(bias: object, n: int) -> tuple[torch.fx.Node, ...]:
    """``(bias,)`` when ``bias`` is an f32 vector of the product's ``n`` columns, the op's own
    bias; else nothing (no bias, or one broadcast otherwise, added after the op)."""
    val = fake_val(bias)
    if val is not None and val.dtype == torch.float32 and list(val.shape) == [n]:
        return (bias,)
    return ()
