"""bf16 matrix products and convolutions by a weight on AVX512-BF16's dot product: the weight
packed once in pairs along the reduction.

``vdpbf16ps`` multiplies 16 pairs of bf16 values by 16 other pairs and adds each pair's two
products to an f32 lane: twice the multiply-adds of an f32 FMA per instruction. It wants the
right operand of ``a @ b`` packed in pairs along the reduction, ``pairs[k // 2, n, k % 2] =
b[k, n]``, so that one 64-byte load holds a pair for each of 16 columns. Packing costs a copy of
``b``: a weight is packed here, once; the kernel packs the right operand of a product of two
computed operands (attention's) itself, on every call, where enough rows repay the copy
(``computed_pairs`` in ``src/lower/linear.rs``).

So before hoisting, each bf16 ``mm`` / ``addmm`` whose right operand the graph computes from
parameters alone (a linear layer's ``t(weight)``) becomes

    pairs = clone(permute(view(b, [k // 2, 2, n]), [0, 2, 1]))   # weight-only: hoisted
    out = _to_copy(mm_pairs(a, pairs) [+ bias], bfloat16)

``fxmlir::mm_pairs`` (a custom op, :mod:`fxmlir.custom_ops`) returns the f32 accumulator, so
the bias is added before the one rounding to bf16, as PyTorch's own bf16 ``addmm`` does.
:mod:`fxmlir.passes.hoist` then computes ``pairs`` once, outside the kernel; the kernel's
schedule turns the product into dot products (see ``docs/architecture.md``). A width that is
no multiple of 16 (GPT-2's vocabulary of 50257) is padded with zero columns, which the result
drops again, and so is one of a multiple of 1024 columns, whose packed rows would be a multiple
of 4 KiB apart. Hosts without AVX512-BF16, dynamic shapes, an odd ``k`` and narrow products of
such widths keep the plain bf16 product.

bf16 convolutions without groups whose weight is weight-only become

    pairs = clone(permute(view(w, [oc, c // 2, 2, *k]), [0, 1, 3, ..., 2]))   # hoisted
    out = _to_copy(conv_pairs(x, pairs, stride, padding, dilation) [+ bias], bfloat16)

with the weight's input channels in pairs (an odd count gets a zero channel first): the kernel
computes ``weight @ patches`` with the patches written in pairs of channels as it gathers them,
and the weight as it is packed here (see ``fxmlir.conv_pairs`` in ``src/lower/conv.rs``).
"""

from __future__ import annotations

import torch
import torch.fx

from .. import _fxmlir
from . import hoist
from .rewriting import chain, fake_val, matrices, replace, weight_products

aten = torch.ops.aten

#: The columns of one dot product: a product's width is padded to a multiple of it (the
#: lowering and the schedule read the same constant, ``tuning::PAIR_LANES``).
LANES = _fxmlir.PAIR_LANES

#: Packed rows of a multiple of this many columns are a multiple of 4 KiB apart: the rows a
#: register tile walks down then share cache sets and evict one another (a 1 x 2816 x 1024
#: product took 0.11 ms, 0.045 with its rows ``SKEW`` columns longer; 128 x 4096 x 4096 8.2
#: ms, 6.4). Such widths get ``SKEW`` more zero columns.
ALIASED_COLUMNS = 1024
SKEW = 32

#: The narrowest product whose width is padded (by at most 15 columns, an eighth of it: as much
#: as :mod:`fxmlir.passes.hoist` materialises); narrower ones whose width is no multiple of
#: ``LANES`` are left as they are.
MIN_PADDED = 128


def pack_weights(gm: torch.fx.GraphModule, split: hoist.Split, target: str = "host") -> int:
    """Rewrites the bf16 products and convolutions of ``gm`` whose weight is weight-only (one
    of the ``static_nodes`` of ``split``, the analysis of ``gm``; see the module docs), where
    the CPU ``target`` names has AVX512-BF16's dot product; returns how many."""
    if not _fxmlir.target_info(target)["bf16_dot"]:
        return 0
    weights = split.static_nodes
    rewritten = _pack_products(gm, weights) + _pack_convolutions(gm, weights)
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return rewritten


def _pack_convolutions(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> int:
    graph = gm.graph
    rewritten = 0
    for node in graph.find_nodes(op="call_function", target=aten.convolution.default):
        x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
        vx, vw = fake_val(x), fake_val(w)
        if (
            w not in weights
            or transposed
            or groups != 1
            or vx is None
            or vw is None
            or vx.dtype != torch.bfloat16
            or vw.dtype != torch.bfloat16
            or not 3 <= vw.dim() <= 5
            or not all(isinstance(d, int) for d in (*vx.shape, *vw.shape))
        ):
            continue
        nd = vw.dim() - 2
        out, channels, *kernel = vw.shape
        with graph.inserting_before(node):
            # An odd channel count gets a zero channel (the kernel reads the input's as zero).
            padded = (
                chain(graph, node, [(aten.constant_pad_nd.default, (w, [0, 0] * nd + [0, 1]), {})])
                if channels % 2
                else w
            )
            steps = [
                (aten.view.default, (padded, [out, (channels + 1) // 2, 2, *kernel]), {}),
                (aten.permute.default, (None, [0, 1, *range(3, nd + 3), 2]), {}),
                (aten.clone.default, (None,), {"memory_format": torch.contiguous_format}),
            ]
            packed = chain(graph, node, steps)
            conv = (torch.ops.fxmlir.conv_pairs.default, (x, packed, stride, padding, dilation), {})
            result = chain(graph, node, [conv])
            if bias is not None:
                bias = chain(graph, node, [(aten.view.default, (bias, [out] + [1] * nd), {})])
        replace(graph, node, result, bias)
        rewritten += 1
    return rewritten


def _pack_products(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> int:
    graph = gm.graph
    rewritten = 0
    for node, a, b, bias in weight_products(gm, weights):
        operands = matrices(a, b, torch.bfloat16)
        if operands is None:
            continue
        k, n = operands[1].shape
        if not isinstance(k, int) or not isinstance(n, int) or k % 2:
            continue
        # Columns up to a whole number of dot products: zeros, cut off the result again.
        pad = -n % LANES
        if pad and n < MIN_PADDED:
            continue
        if (n + pad) % ALIASED_COLUMNS == 0:
            pad += SKEW
        with graph.inserting_before(node):
            steps = [
                (aten.view.default, (b, [k // 2, 2, n]), {}),
                (aten.permute.default, (None, [0, 2, 1]), {}),
                (aten.clone.default, (None,), {"memory_format": torch.contiguous_format})
                if not pad
                else (aten.constant_pad_nd.default, (None, [0, 0, 0, pad]), {}),
            ]
            packed = chain(graph, node, steps)
            product = chain(graph, node, [(torch.ops.fxmlir.mm_pairs.default, (a, packed), {})])
            if pad:
                product = chain(graph, node, [(aten.slice.Tensor, (product, 1, 0, n), {})])
        replace(graph, node, product, bias)
        rewritten += 1
    return rewritten
