"""Convolution weights handed over tap-major, transposed once outside the kernel.

A stride-1 convolution (of one image, of several in one canvas, or of a symbolic batch one
image at a time) is one matrix product per kernel tap (``shifted_products`` in
``src/lower/conv.rs``): tap ``(i, j)`` multiplies the weight ``w[:, :, i, j]`` by a shifted
slice of the padded input. Its left operands are the weight in its tap-major layout
``[k…, cout, c]``, which the kernel would otherwise transpose on every call (ResNet-50's 3 x 3
weights: 28 MB a call, 5% of its time).

So before hoisting, the weight-only weight ``w`` of each convolution the lowering computes so
(``_fxmlir.shifted_convolution``, the lowering's own rule, for the target and this thread's
count) becomes ``permute(permute(w, to), back)``: :mod:`fxmlir.passes.hoist` computes the
tap-major copy ``permute(w, to)`` once, contiguous, and the outer ``permute`` (marked, it stays
in the kernel) is the view the lowering recognises and reads through.
"""

from __future__ import annotations

import torch
import torch.fx

from .. import _fxmlir
from . import hoist
from .rewriting import chain, fake_val

aten = torch.ops.aten


def _shifted(node: torch.fx.Node, target: str) -> bool:
    x, w, _, stride, padding, dilation, transposed, _, groups = node.args
    vx, vw = fake_val(x), fake_val(w)
    if vx is None or vw is None or transposed or vx.dtype != vw.dtype:
        return False
    # A symbolic batch, every other size fixed: the lowering computes the convolution one
    # sample at a time (src/lower/samples.rs), each sample one image.
    image = list(vx.shape)
    if image and isinstance(image[0], torch.SymInt):
        image[0] = 1
    shapes = [image, list(vw.shape), stride, padding, dilation]
    if not all(isinstance(d, int) for values in shapes for d in values):
        return False
    return _fxmlir.shifted_convolution(
        *shapes,
        groups,
        str(vx.dtype).removeprefix("torch."),
        target,
        torch.get_num_threads(),
    )


def tap_major_weights(gm: torch.fx.GraphModule, split: hoist.Split, target: str = "host") -> int:
    """Hands the weight-only weights (in the ``static_nodes`` of ``split``, the analysis of
    ``gm``) of ``gm``'s convolutions computed as one product per tap over tap-major (see the
    module docs); returns how many."""
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.target is not aten.convolution.default or len(node.args) != 9:
            continue
        w = node.args[1]
        if w not in split.static_nodes or not _shifted(node, target):
            continue
        to, back = _fxmlir.tap_major_permutations(fake_val(w).dim() - 2)
        with graph.inserting_before(node):
            steps = [(aten.permute.default, (w, to), {}), (aten.permute.default, (None, back), {})]
            view = chain(graph, node, steps)
        view.meta[hoist.KEEP_IN_KERNEL] = True
        node.replace_input_with(w, view)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten
