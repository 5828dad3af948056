"""Debugging helpers: find the first node whose compiled value differs from eager."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from .backend import compile_graph
from .interchange import describe


def _prefix(gm: torch.fx.GraphModule, target: torch.fx.Node) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose only output is ``target`` (dead code removed)."""
    graph = copy.deepcopy(gm.graph)
    node = next(n for n in graph.nodes if n.name == target.name)
    output = next(n for n in graph.nodes if n.op == "output")
    graph.erase_node(output)
    graph.output((node,))
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


def first_divergence(
    gm: torch.fx.GraphModule, args: Sequence[Any], atol: float = 1e-4, rtol: float = 1e-4
) -> str | None:
    """Compiles each tensor-valued node of ``gm`` (as a graph ending there), in order, and
    returns a description of the first whose value differs from eager beyond the tolerances,
    or None when all agree. Costs one compile per node: a debugging tool, not a test."""
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n.name] = out
            return out

    Recorder(gm).run(*args)
    for node in gm.graph.nodes:
        expected = values.get(node.name)
        if node.op != "call_function" or not isinstance(expected, torch.Tensor):
            continue
        actual = compile_graph(_prefix(gm, node), args)(list(args))[0]
        if not torch.allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True):
            error = (actual.double() - expected.double()).abs().max().item()
            return f"{describe(node)} differs from eager: max abs error {error:.3g}"
    return None
