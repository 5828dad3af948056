"""Graph outputs that are views of one another. A graph may return several views of one
tensor (``y.view(-1)`` and ``y.t()`` of an intermediate ``y``, or ``y`` and a view of it);
in eager PyTorch, and in what aot_autograd expects of an inference graph's compiler, they
share memory, so a write through one shows in the others. fxmlir's runtime gives every output
a buffer of its own, so such outputs are taken out of the compiled graph and rebuilt after
each call as views (``as_strided``) of the output whose memory holds them all."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef


@dataclasses.dataclass(frozen=True)
class View:
    """Output ``index`` is ``outputs[of]`` seen with ``size`` and ``stride`` from ``offset``
    elements after its start (``of`` is a position among the graph's outputs)."""

    index: int
    of: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The storage elements ``t`` can reach: [first, last + 1)."""
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return t.storage_offset(), t.storage_offset() + last + 1


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(v, int) for v in (*t.shape, *t.stride(), t.storage_offset()))


def views_among_outputs(gm: torch.fx.GraphModule) -> list[View]:
    """The outputs of ``gm`` to rebuild as views of another output: those sharing storage with
    a contiguous output whose memory covers theirs (the runtime allocates that one densely, so
    its buffer holds the others at the same relative places)."""
    (output,) = gm.graph.find_nodes(op="output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)):
        return []
    values = [r.meta.get("val") if isinstance(r, torch.fx.Node) else None for r in results]
    tensors = {
        i: (v, StorageWeakRef(v.untyped_storage()))
        for i, v in enumerate(values)
        if isinstance(v, torch.Tensor) and _static(v)
    }
    holders: dict[StorageWeakRef, int] = {}
    for index, (value, storage) in tensors.items():
        if value.is_contiguous() and value.numel():
            holders.setdefault(storage, index)
    views = []
    for index, (value, storage) in tensors.items():
        of = holders.get(storage)
        if of is None or of == index:
            continue
        holder = values[of]
        first, end = _extent(holder)
        start, stop = _extent(value)
        if first <= start and stop <= end and value.dtype == holder.dtype:
            views.append(View(index, of, tuple(value.shape), value.stride(), start - first))
    return views


def without(gm: torch.fx.GraphModule, views: list[View]) -> torch.fx.GraphModule:
    """A copy of ``gm`` that does not return the outputs ``views`` rebuild."""
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    output = graph.graph_copy(gm.graph, mapping)
    dropped = {v.index for v in views}
    kept = tuple(r for i, r in enumerate(output) if i not in dropped)
    graph.output(kept)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


def rebuilding(compiled: Callable[[list[Any]], Any], views: list[View]) -> Callable:
    """``compiled`` (which returns the outputs other than the views, in order), with the views
    built from them and put in their places; boxed like ``compiled``."""
    by_index = {v.index: v for v in views}

    def call(args: list[Any]) -> list[Any]:
        own = list(compiled(args))
        rest = iter(own)
        outputs = [
            None if index in by_index else next(rest) for index in range(len(own) + len(views))
        ]
        for view in views:
            base = outputs[view.of]
            offset = base.storage_offset() + view.offset
            outputs[view.index] = torch.as_strided(base, view.size, view.stride, offset)
        return outputs

    call._boxed_call = True
    return call
