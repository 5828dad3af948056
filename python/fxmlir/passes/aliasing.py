"""Graph outputs that are views of one another or of an input. A graph may return several
views of one tensor (``y.view(-1)`` and ``y.t()`` of an intermediate ``y``, ``y`` and a view of
it, or the halves ``y[:2]`` and ``y[2:]``); in eager PyTorch, and in what aot_autograd expects
of an inference graph's compiler, they share memory, so a write through one shows in the
others. fxmlir's runtime gives every output a buffer of its own, so such outputs are taken out
of the compiled graph and rebuilt after each call as views (``as_strided``) of a tensor whose
memory holds them all: another output, or else the intermediate they are views of, which the
compiled graph then returns after its own outputs (and the call drops once the views are
built). An output that is a view of an input (a training forward saves ``weight.t()`` for the
backward) is rebuilt as that view of the argument: computed by the kernel it would be a copy
of the weight on every step, and the kernel's own products would read it through its
transposed output buffer."""

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
    elements after its start (``of`` is a position among the graph's outputs followed by the
    bases of :class:`Aliases`)."""

    index: int
    of: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    #: ``of`` is a position among the graph's inputs instead.
    of_input: bool = False


@dataclasses.dataclass(frozen=True)
class Aliases:
    """The outputs of a graph to rebuild as views, and the intermediates (``bases``) the
    compiled graph returns after its own outputs for them: each holds views that no output
    covers."""

    views: list[View]
    bases: list[torch.fx.Node]

    def __bool__(self) -> bool:
        return bool(self.views)


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The storage elements ``t`` can reach: [first, last + 1)."""
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return t.storage_offset(), t.storage_offset() + last + 1


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(v, int) for v in (*t.shape, *t.stride(), t.storage_offset()))


def _view(
    index: int, value: torch.Tensor, of: int, holder: torch.Tensor, of_input: bool = False
) -> View | None:
    """Output ``index`` (``value``) as a view of ``holder`` (at position ``of``), if the
    holder's memory covers it."""
    first, end = _extent(holder)
    start, stop = _extent(value)
    if first <= start and stop <= end and value.dtype == holder.dtype:
        return View(index, of, tuple(value.shape), value.stride(), start - first, of_input)
    return None


def aliases(gm: torch.fx.GraphModule) -> Aliases:
    """The outputs of ``gm`` to rebuild as views: those sharing storage with an input whose
    memory covers theirs, those sharing storage with a contiguous output whose memory covers
    theirs (the runtime allocates that one densely, so its buffer holds the others at the same
    relative places), and, where no output covers outputs that share storage, all of them, as
    views of the contiguous intermediate that does."""
    (output,) = gm.graph.find_nodes(op="output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)):
        return Aliases([], [])
    values = [r.meta.get("val") if isinstance(r, torch.fx.Node) else None for r in results]
    tensors = {
        i: (v, StorageWeakRef(v.untyped_storage()))
        for i, v in enumerate(values)
        if isinstance(v, torch.Tensor) and _static(v)
    }
    inputs: dict[StorageWeakRef, tuple[int, torch.Tensor]] = {}
    for position, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and _static(value):
            inputs.setdefault(StorageWeakRef(value.untyped_storage()), (position, value))
    sharing: dict[StorageWeakRef, list[int]] = {}
    for index, (_, storage) in tensors.items():
        sharing.setdefault(storage, []).append(index)
    views: list[View] = []
    bases: list[torch.fx.Node] = []
    for storage, indices in sharing.items():
        if storage in inputs:
            position, value = inputs[storage]
            found = [_view(i, values[i], position, value, of_input=True) for i in indices]
            if all(found):
                views.extend(v for v in found if v is not None)
                continue
        if len(indices) < 2:
            continue
        holder = next((i for i in indices if values[i].is_contiguous() and values[i].numel()), None)
        if holder is not None:
            found = [_view(i, values[i], holder, values[holder]) for i in indices if i != holder]
            if all(found):
                views.extend(v for v in found if v is not None)
                continue
        for node in gm.graph.nodes:
            value = node.meta.get("val")
            if not (
                node.op == "call_function"
                and isinstance(value, torch.Tensor)
                and _static(value)
                and value.is_contiguous()
                and StorageWeakRef(value.untyped_storage()) == storage
            ):
                continue
            found = [_view(i, values[i], len(results) + len(bases), value) for i in indices]
            if all(found):
                views.extend(v for v in found if v is not None)
                bases.append(node)
                break
    return Aliases(sorted(views, key=lambda v: v.index), bases)


def without(gm: torch.fx.GraphModule, aliases: Aliases) -> torch.fx.GraphModule:
    """A copy of ``gm`` that does not return the outputs ``aliases`` rebuilds, and returns its
    bases after the others."""
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    output = graph.graph_copy(gm.graph, mapping)
    dropped = {v.index for v in aliases.views}
    kept = [r for i, r in enumerate(output) if i not in dropped]
    graph.output(tuple(kept + [mapping[b] for b in aliases.bases]))
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


def rebuilding(compiled: Callable[[list[Any]], Any], aliases: Aliases) -> Callable:
    """``compiled`` (which returns the outputs other than the views, in order, then the
    bases), with the views built from them and put in their places, and the bases dropped;
    boxed like ``compiled``."""
    by_index = {v.index: v for v in aliases.views}
    bases = len(aliases.bases)

    def call(args: list[Any]) -> list[Any]:
        own = list(compiled(args))
        count = len(own) - bases + len(by_index)
        rest = iter(own)
        outputs = [None if index in by_index else next(rest) for index in range(count)]
        outputs.extend(rest)
        for view in aliases.views:
            base = args[view.of] if view.of_input else outputs[view.of]
            offset = base.storage_offset() + view.offset
            outputs[view.index] = torch.as_strided(base, view.size, view.stride, offset)
        return outputs[:count]

    call._boxed_call = True
    return call
