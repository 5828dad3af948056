"""The FX rewrites of fxmlir's functional ATen graphs, a module each, and the order they run in.

A graph meets them in this order:

1. :mod:`.decompositions`, while it is traced: fxmlir's own decompositions join core ATen's
   in the table the trace uses (``backend.decompositions``).
2. :mod:`.aliasing`, on every graph the backend compiles: outputs that are views of one
   another or of an input leave the graph and are rebuilt as views after each call. The
   backend applies it (``backend._compile``) before it decides whether the graph compiles
   whole or in partitions: that decision is made on the graph without those outputs, and the
   views are rebuilt around whichever callable comes of it.
3. :func:`run`, on a graph compiled whole: the weight rewrites, then the hoist.

:mod:`.rewriting` holds what the weight rewrites share; the ops that :mod:`.bf16_pairs`
inserts are fxmlir's own, defined in :mod:`fxmlir.custom_ops`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx

from .. import plugins
from ..config import Config
from . import bf16_pairs, hoist, panels, parts, skew, taps, widen


def run(
    gm: torch.fx.GraphModule,
    static: frozenset[int],
    target: str,
    config: Config,
    compile_main: Callable[[torch.fx.GraphModule], Callable[[list[Any]], Any]],
) -> Callable[[list[Any]], Any] | None:
    """Rewrites ``gm`` in place for its weights (the inputs at positions ``static``) and the
    CPU ``target`` names, then hoists its weight-only work: returns a callable that computes
    that work once and calls the kernel ``compile_main`` compiled from the rest, or None when
    nothing is hoisted (the caller then compiles ``gm`` as it now is).

    Nothing is done unless ``config.hoist`` is on: each weight
    rewrite makes a weight-only value (a packed, widened or padded copy of a weight) that only
    the hoist keeps out of the kernel, which would otherwise make it on every call. The order:

    0. :func:`.parts.split_normalizations`: a batch norm (and ReLU) of a concatenation runs
       on each part, its parameters sliced, so that the concatenation is written once, by
       the parts' normalisations. First: the rewrites below then see the parts' nodes.

    1. :func:`.bf16_pairs.pack_weights`: bf16 products and convolutions by a weight become
       products on the weight packed in pairs, where the target has AVX512-BF16's dot product.
       Before skew: a weight that skew reads through a view in the kernel is no longer
       weight-only there and would not be packed (the packing pads its own rows). Widening
       takes only products the target has no dot product for: the two never take the same.
    2. :func:`.widen.widen_weights` (``config.widen``): half-precision products by a weight
       the kernel would widen become f32 products of a widened copy. Before skew, which must
       see the copy's rows (a 1024-column f16 weight has rows of 2 KiB, its f32 copy of 4).
    3. :func:`.panels.panel_weights` (``config.panels``): f32 products by a weight that the
       kernel would copy into panels on every call become products on the weight in panels
       (not for a plugin's executor: the layout is fxmlir's register tiles').
       After widening, whose f32 copies it takes; before skew, whose padded rows the panels
       have no need of.
    4. :func:`.skew.skew_weights`: a weight whose rows are a multiple of 4 KiB is read through
       longer rows, a view (kept in the kernel) of a padded copy.
    5. :func:`.taps.tap_major_weights`: a convolution computed as one product per kernel tap
       reads its weight tap-major, a view (kept in the kernel) of a transposed copy. After
       widening, whose f32 copy of a half-precision weight it transposes.
    6. :func:`.hoist.hoist`: what the graph computes from weights alone, the copies above
       included, is computed once, outside the kernel.
    """
    if not config.hoist:
        return None
    # The weight-only analysis of the graph as it is. A rewrite that changes the graph adds
    # nodes the analysis has not seen: copies of weights, which the next rewrite must know as
    # weights (skew pads a widened copy), and skew's views to keep in the kernel, which the
    # hoist must know. So the analysis is made again after a rewrite that changed something.
    parts.split_normalizations(gm)
    split = hoist.Split(gm, static)
    if bf16_pairs.pack_weights(gm, split, target):
        split = hoist.Split(gm, static)
    if config.widen and widen.widen_weights(gm, split, target):
        split = hoist.Split(gm, static)
    # The panels are the layout of fxmlir's own register tiles: a plugin's executor, which
    # compiles the module its own way, gets the plain products.
    jit = plugins.executor(plugins.active()) is None
    if config.panels and jit and panels.panel_weights(gm, split, target):
        split = hoist.Split(gm, static)
    if skew.skew_weights(gm, split):
        split = hoist.Split(gm, static)
    if taps.tap_major_weights(gm, split, target):
        split = hoist.Split(gm, static)
    # Without parameter or buffer inputs (a training graph, or one compiled outside
    # torch.compile: see hoist.static_inputs) nothing is hoisted, though the graph's own
    # constants count as weights above.
    if not static:
        return None
    return hoist.hoist(gm, split, compile_main)
