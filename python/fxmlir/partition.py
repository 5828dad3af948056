"""Partitioning: nodes fxmlir can lower are grouped into compiled submodules; the rest run in
eager PyTorch between them. Every op that falls back is recorded with its reason, so
``fxmlir.explain`` and the INFO log can say what ran eagerly and why."""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from . import lowerings
from ._fxmlir import FxmlirError, UnsupportedOpError
from .interchange import DTYPES, is_size_float, source_line, target_name

log = logging.getLogger("fxmlir")

#: How many times a failing partition is re-split before giving up on it.
MAX_RETRIES = 32


@dataclasses.dataclass(frozen=True)
class Fallback:
    """One FX node that runs in eager PyTorch."""

    seq: int
    op: str
    node: str
    source: str | None
    reason: str


_seq = itertools.count()

#: Fallbacks recorded in this process, oldest first.
fallbacks: collections.deque[Fallback] = collections.deque(maxlen=10000)


def _is_random(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in (
        target.tags
    )


def _tensor_kind(t: torch.Tensor) -> str | None:
    """Why fxmlir compiles nothing on ``t`` (a complex, quantized or fp8 dtype, a device other
    than the CPU, a sparse layout), or None."""
    if t.dtype not in DTYPES:
        return f"{t.dtype} tensors are not compiled"
    if t.device.type != "cpu":
        return f"tensors on {t.device} are not compiled (CPU only)"
    if t.layout != torch.strided:
        return f"{t.layout} tensors are not compiled"
    return None


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a node's value or argument (lists and tuples included)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _uncompiled_tensor(node: torch.fx.Node) -> str | None:
    """Why a tensor ``node`` reads or makes is one fxmlir compiles nothing on, or None."""
    values = [node.meta.get("val")]
    values += [a.meta.get("val") for a in node.all_input_nodes]
    for value in values:
        for t in _tensors(value):
            reason = _tensor_kind(t)
            if reason is not None:
                return reason
    return None


def _reason(node: torch.fx.Node) -> str | None:
    """Why ``node`` cannot be compiled, or None when it can."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        source = node.args[0]
        return None if isinstance(source, torch.fx.Node) else "getitem of a non-node"
    val = node.meta.get("val")
    if isinstance(val, (int, torch.SymInt)) or is_size_float(node):
        return None  # size arithmetic, evaluated by the exporter
    if not isinstance(node.target, torch._ops.OpOverload):
        return f"`{target_name(node)}` is not an ATen operator"
    uncompiled = _uncompiled_tensor(node)
    if uncompiled is not None:
        return uncompiled
    if lowerings.lowering_for(node) is not None:
        return None
    if _is_random(node):
        return "random op: runs eagerly so it draws from PyTorch's generator"
    if lowerings.rows(node.target):
        origins = ", ".join(sorted({row.origin for row in lowerings.rows(node.target)}))
        return f"its lowerings ({origins}) do not take this node"
    return "no lowering is registered"


class _Support(OperatorSupportBase):
    def __init__(self, excluded: dict[str, str]):
        self.excluded = excluded

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.excluded:
            return False
        if node.target is operator.getitem:
            source = node.args[0]
            return isinstance(source, torch.fx.Node) and self.is_node_supported(submodules, source)
        return _reason(node) is None


def unsupported_nodes(gm: torch.fx.GraphModule) -> dict[str, str]:
    """Node name → reason, for every node that cannot be compiled."""
    out = {}
    for node in gm.graph.nodes:
        reason = _reason(node)
        if reason is not None:
            out[node.name] = reason
    return out


def strict_error(gm: torch.fx.GraphModule, excluded: dict[str, str]) -> UnsupportedOpError:
    """The exception of strict mode: every op that would fall back, with node and line."""
    nodes = {n.name: n for n in gm.graph.nodes}
    lines = []
    for name, reason in excluded.items():
        node = nodes[name]
        where = source_line(node)
        lines.append(
            f"  {target_name(node)} (node `{name}`{', ' + where if where else ''}): {reason}"
        )
    return UnsupportedOpError(
        "fxmlir is in strict mode (FXMLIR_FALLBACK=error) and these ops would run eagerly:\n"
        + "\n".join(lines)
    )


class CompiledPartition(torch.nn.Module):
    """Replaces a fused submodule: calls its compiled graph, returns its output structure."""

    def __init__(self, compiled: Callable[[list[Any]], list[Any]], single: bool):
        super().__init__()
        self.compiled = compiled
        self.single = single

    def forward(self, *args: Any) -> Any:
        out = self.compiled(list(args))
        return out[0] if self.single else tuple(out)


def partition_and_compile(
    gm: torch.fx.GraphModule,
    compile_graph: Callable[[torch.fx.GraphModule], Callable[[list[Any]], list[Any]]],
    strict: bool,
) -> torch.fx.GraphModule:
    """Splits ``gm`` into compiled partitions and eager nodes. A partition that fails to
    compile names the node at fault; that node is excluded and the graph re-split."""
    excluded = unsupported_nodes(gm)
    if excluded and strict:
        raise strict_error(gm, excluded)
    for _ in range(MAX_RETRIES):
        try:
            result = _split(gm, excluded, compile_graph)
        except FxmlirError as e:
            name = getattr(e, "node", None)
            if strict or name is None or name in excluded:
                raise
            excluded[name] = f"lowering failed: {str(e).splitlines()[0]}"
            continue
        _record(gm, excluded)
        return result
    raise UnsupportedOpError(f"gave up after {MAX_RETRIES} failed partition compiles")


def _split(gm, excluded, compile_graph) -> torch.fx.GraphModule:
    # Fusing rewrites the module in place; work on a copy of the graph (sharing the weights) so
    # that a failed attempt leaves ``gm`` intact for the next.
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    partitioner = CapabilityBasedPartitioner(
        gm, _Support(excluded), allows_single_node_partition=True
    )
    partitions = partitioner.propose_partitions()
    split = partitioner.fuse_partitions(partitions)
    for node in list(split.graph.nodes):
        if node.op != "call_module":
            continue
        submodule = getattr(split, node.target)
        output = next(n for n in submodule.graph.nodes if n.op == "output")
        single = not isinstance(output.args[0], (tuple, list))
        compiled = compile_graph(submodule)
        setattr(split, node.target, CompiledPartition(compiled, single))
    split.recompile()
    return split


def _record(gm: torch.fx.GraphModule, excluded: dict[str, str]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    counts = collections.Counter()
    for name, reason in excluded.items():
        node = nodes[name]
        fallbacks.append(Fallback(next(_seq), target_name(node), name, source_line(node), reason))
        counts[target_name(node)] += 1
    if counts:
        summary = ", ".join(f"{op} x{n}" for op, n in counts.most_common())
        log.info("ops running eagerly: %s", summary)
