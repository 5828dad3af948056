"""What the weight rewrites share: finding the matrix products by a weight, and inserting
nodes, each with its fake value and the source location of the node it stands for."""

from __future__ import annotations

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

aten = torch.ops.aten


def fake_val(node: object) -> FakeTensor | None:
    """The fake tensor a traced node holds (what :func:`chain` computes new values with)."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, FakeTensor) else None


def operands(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, object] | None:
    """``(a, b, bias)`` of an ``mm`` or of an ``addmm`` with unit scales (``bias`` None for
    ``mm``); None for anything else."""
    if node.op != "call_function":
        return None
    if node.target is aten.mm.default:
        a, b = node.args
        return a, b, None
    if node.target is aten.addmm.default:
        bias, a, b, *scales = node.args
        beta = node.kwargs.get("beta", scales[0] if scales else 1)
        alpha = node.kwargs.get("alpha", scales[1] if len(scales) > 1 else 1)
        return (a, b, bias) if beta == 1 and alpha == 1 else None
    return None


def weight_products(
    gm: torch.fx.GraphModule, weights: set[torch.fx.Node]
) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node, object]]:
    """``(node, a, b, bias)`` of each ``mm`` / unit-scale ``addmm`` of ``gm`` whose right operand
    ``b`` is one of ``weights`` (computed from parameters and buffers alone: the
    ``static_nodes`` of a :class:`hoist.Split`)."""
    found = [(node, operands(node)) for node in gm.graph.nodes]
    return [(node, *ops) for node, ops in found if ops is not None and ops[1] in weights]


def matrices(a: object, b: object, dtype: torch.dtype) -> tuple[FakeTensor, FakeTensor] | None:
    """The fake values of ``a`` and ``b`` when both are traced matrices of ``dtype``; else
    None."""
    va, vb = fake_val(a), fake_val(b)
    if va is None or vb is None or any(v.dtype != dtype or v.dim() != 2 for v in (va, vb)):
        return None
    return va, vb


def chain(
    graph: torch.fx.Graph,
    origin: torch.fx.Node,
    steps: list[tuple[torch._ops.OpOverload, tuple, dict]],
) -> torch.fx.Node:
    """Appends ``steps`` (a ``None`` argument is the previous step's node), each with its fake
    value and ``origin``'s source location; returns the last."""
    node = None
    for target, args, kwargs in steps:
        args = tuple(node if arg is None else arg for arg in args)
        vals = [fake_val(arg) if isinstance(arg, torch.fx.Node) else arg for arg in args]
        fake = next(v for v in vals if isinstance(v, FakeTensor)).fake_mode
        with fake:
            val = target(*vals, **kwargs)
        node = graph.call_function(target, args, kwargs)
        node.meta["val"] = val
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in origin.meta:
                node.meta[key] = origin.meta[key]
    return node


def replace(
    graph: torch.fx.Graph, node: torch.fx.Node, result: torch.fx.Node, bias: object
) -> None:
    """Replaces ``node`` by the f32 ``result`` plus ``bias`` (if not None), rounded once to
    ``node``'s dtype."""
    dtype = fake_val(node).dtype
    with graph.inserting_before(node):
        if bias is not None:
            result = chain(graph, node, [(aten.add.Tensor, (result, bias), {})])
        result = chain(graph, node, [(aten._to_copy.default, (result,), {"dtype": dtype})])
    node.replace_all_uses_with(result)
    graph.erase_node(node)
