"""Batch norms of a concatenation computed part by part.

A dense block (DenseNet) normalises the concatenation of every feature map before it:
``relu(batch_norm(cat(xs, 1)))``, then a pointwise convolution. Lowered as it is, the
concatenation is written once (every part copied into it, the whole block's features at each
layer), then read back by the normalisation. Per channel, the normalisation and the ReLU do
not care which part a channel came from, so here the chain moves into the parts:
``cat([relu(batch_norm(x, w[a:b], …)) for x in xs], 1)``, each part's parameters the slice of
its channels. Each part's normalisation then writes its channels of the concatenation itself,
and the concatenation is where the convolution reads its input (``computed_padded`` in
``src/lower/products.rs``), so nothing is copied.

Only inference batch norms (``_native_batch_norm_legit_no_training``, whose other two outputs
nothing reads) of a concatenation along the channels that nothing else reads, optionally
followed by a ReLU that is the normalisation's only user.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from .rewriting import chain, fake_val

aten = torch.ops.aten

NORM = aten._native_batch_norm_legit_no_training.default


def _only_output(norm: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """The getitem reading ``norm``'s output 0 and the unread getitems of its other outputs,
    when nothing else reads ``norm``."""
    reads = {}
    for user in norm.users:
        if user.op != "call_function" or user.target is not operator.getitem:
            return None
        reads.setdefault(user.args[1], []).append(user)
    first = reads.pop(0, [])
    unread = [u for users in reads.values() for u in users]
    if len(first) != 1 or any(u.users for u in unread):
        return None
    return first[0], unread


def _node(graph: torch.fx.Graph, origin: torch.fx.Node, target, args: tuple, val) -> torch.fx.Node:
    """A node of ``target`` on ``args`` whose value is ``val``, with ``origin``'s source
    location (for the ops :func:`chain` cannot compute: a getitem, a list argument)."""
    node = graph.call_function(target, args)
    node.meta["val"] = val
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in origin.meta:
            node.meta[key] = origin.meta[key]
    return node


def split_normalizations(gm: torch.fx.GraphModule) -> int:
    """Moves each batch norm of a concatenation (and its ReLU) into the concatenation's parts
    (see the module docs); returns how many."""
    graph = gm.graph
    split = 0
    for norm in list(graph.nodes):
        if norm.op != "call_function" or norm.target is not NORM or len(norm.args) != 7:
            continue
        cat, *params, momentum, eps = norm.args
        if not isinstance(cat, torch.fx.Node) or cat.target is not aten.cat.default:
            continue
        parts = cat.args[0]
        dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
        val = fake_val(cat)
        outputs = _only_output(norm)
        if val is None or outputs is None or len(cat.users) != 1 or dim % val.dim() != 1:
            continue
        get, unread = outputs
        widths = [fake_val(p).shape[1] if fake_val(p) is not None else None for p in parts]
        if len(parts) < 2 or not all(isinstance(w, int) and w > 0 for w in widths):
            continue
        users = list(get.users)
        relu = users[0] if len(users) == 1 and users[0].target is aten.relu.default else None
        last = relu or get
        outputs = []
        with graph.inserting_before(last):
            start = 0
            for part, width in zip(parts, widths):
                sliced = [
                    p
                    if p is None
                    else chain(graph, norm, [(aten.slice.Tensor, (p, 0, start, start + width), {})])
                    for p in params
                ]
                start += width
                normed = chain(graph, norm, [(NORM, (part, *sliced, momentum, eps), {})])
                out = _node(graph, norm, operator.getitem, (normed, 0), normed.meta["val"][0])
                if relu is not None:
                    out = chain(graph, relu, [(aten.relu.default, (out,), {})])
                outputs.append(out)
            vals = [fake_val(o) for o in outputs]
            with vals[0].fake_mode:
                val = aten.cat.default(vals, 1)
            joined = _node(graph, last, aten.cat.default, (outputs, 1), val)
        last.replace_all_uses_with(joined)
        for dead in [relu, get, *unread, norm, cat]:
            if dead is not None:
                graph.erase_node(dead)
        split += 1
    if split:
        gm.recompile()
    return split
