"""Weight-only work out of the per-call kernel. Dynamo passes a module's parameters and
buffers to the graph as ordinary inputs, so whatever the graph computes from them alone (above
all ``aten.t`` of a linear layer's weight, which the kernel would otherwise copy transposed on
every call) is recomputed on every call. Here that part of the graph becomes a *prologue*, run
eagerly by PyTorch, whose results enter the kernel as extra, contiguous inputs. They are kept
and reused for as long as the weights they come from are the same tensors (same object, same
storage, same version counter): an optimiser step or ``load_state_dict`` (in-place writes), a
new parameter object or new data all run the prologue again, so a stale value is never used.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from .. import collectives

log = logging.getLogger("fxmlir")


#: Node metadata marking a view of weights that stays in the kernel (a weight read through
#: longer rows, :mod:`fxmlir.passes.skew`): what it views is hoisted, the view itself is not.
KEEP_IN_KERNEL = "fxmlir_kernel_view"


#: What a hoisted value may hold beyond the largest tensor it is computed from, when that is
#: more than an eighth of it.
SMALL_GROWTH_BYTES = 64 * 1024


def static_inputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """Positions of the inputs of ``gm`` that aot_autograd knows to be parameters or buffers,
    when ``gm`` is an inference graph. Empty for the forward and backward graphs of training
    (aot_autograd names their inputs ``primals_*`` and ``tangents_*``; the recorded positions
    describe the forward's inputs only, and weights change every step anyway) and for graphs
    compiled outside torch.compile."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context else None
    training = any(
        n.op == "placeholder" and n.name.startswith(("primals_", "tangents_"))
        for n in gm.graph.nodes
    )
    if metadata is None or training:
        return frozenset()
    return frozenset(getattr(metadata, "static_input_indices", None) or ())


def _tensor(node: torch.fx.Node) -> torch.Tensor | None:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _pure(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    return (
        not schema.is_mutable
        and torch.Tag.nondeterministic_seeded not in target.tags
        and not collectives.is_collective(target)
    )


def _aliasing(node: torch.fx.Node) -> bool:
    returns = node.target._schema.returns
    return bool(returns) and returns[0].alias_info is not None


class Split:
    """The static part of a graph: ``static_nodes`` are the nodes computed from weights only;
    ``hoisted`` those of them whose values the rest of the graph uses; ``cone`` every static
    node they need, in graph order; ``watched`` the positions of the inputs they read."""

    def __init__(self, gm: torch.fx.GraphModule, static: frozenset[int]):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        position = {n: i for i, n in enumerate(placeholders)}
        is_static: set[torch.fx.Node] = {n for n in placeholders if position[n] in static}
        # Whether computing a static node does work the kernel would repeat (not only views
        # that leave a weight contiguous). A weight that is not contiguous itself (a
        # convolution's in channels-last) would be copied into the layout the kernel reads on
        # every call: its contiguous copy is hoisted.
        work: dict[torch.fx.Node, bool] = {
            n: (t := _tensor(n)) is not None and not t.is_contiguous() for n in is_static
        }
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                is_static.add(node)
                work[node] = False
                continue
            if node.meta.get(KEEP_IN_KERNEL):
                continue
            out = _tensor(node)
            inputs = node.all_input_nodes
            if (
                not _pure(node)
                or out is None
                or not inputs
                or not all(i in is_static for i in inputs)
            ):
                continue
            # Never materialise much more than what it is computed from (an expand); a weight
            # padded to whole vectors (``fxmlir.passes.bf16_pairs``) grows by at most an
            # eighth, or by up to half if that is a few kilobytes (a convolution's three input
            # channels padded to four).
            largest = max((t.numel() for i in inputs if (t := _tensor(i)) is not None), default=0)
            extra = out.numel() - largest
            small = extra * 2 <= largest and extra * out.element_size() <= SMALL_GROWTH_BYTES
            if extra * 8 > largest and not small:
                continue
            is_static.add(node)
            work[node] = (
                any(work[i] for i in inputs) or not _aliasing(node) or not out.is_contiguous()
            )
        self.static_nodes = frozenset(is_static)
        self.hoisted = [
            n
            for n in gm.graph.nodes
            if n in is_static
            and n.op in ("call_function", "placeholder")
            and work[n]
            and any(u not in is_static for u in n.users)
        ]
        needed: set[torch.fx.Node] = set()
        stack = list(self.hoisted)
        while stack:
            node = stack.pop()
            if node not in needed:
                needed.add(node)
                stack.extend(node.all_input_nodes)
        self.cone = [n for n in gm.graph.nodes if n in needed and n.op != "placeholder"]
        self.watched = [position[n] for n in placeholders if n in needed]
        self.placeholders = placeholders


def prologue(gm: torch.fx.GraphModule, split: Split) -> torch.fx.GraphModule:
    """A module taking the graph's arguments and returning the hoisted values."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in split.placeholders:
        env[node] = graph.node_copy(node)
    for node in split.cone:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in split.hoisted))
    return torch.fx.GraphModule(gm, graph)


def main_graph(gm: torch.fx.GraphModule, split: Split) -> torch.fx.GraphModule:
    """The graph with every hoisted value read from a new contiguous input, appended after the
    original ones, and the weight-only nodes nothing else needs removed."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in split.placeholders:
        env[node] = graph.node_copy(node)
    for i, node in enumerate(split.hoisted):
        placeholder = graph.placeholder(f"hoisted_{i}_{node.name}")
        val = node.meta["val"]
        with val.fake_mode:
            placeholder.meta["val"] = torch.empty(val.shape, dtype=val.dtype, device=val.device)
        placeholder.meta["stack_trace"] = node.meta.get("stack_trace")
        env[node] = placeholder
    for node in gm.graph.nodes:
        if node.op != "placeholder" and node not in env:
            env[node] = graph.node_copy(node, lambda n: env[n])
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


class Hoisted:
    """A compiled graph whose weight-only values come from ``prologue``, reused while the
    watched arguments are unchanged."""

    _boxed_call = True

    def __init__(
        self,
        name: str,
        prologue: torch.fx.GraphModule,
        kernel: Callable[[list[Any]], Any],
        watched: Sequence[int],
    ):
        self.name = name
        self.prologue = prologue
        self.kernel = kernel
        self.watched = tuple(watched)
        #: (weak reference, storage address, version) per watched argument, and the values.
        self.state: tuple[tuple[tuple[Any, int, int], ...], list[torch.Tensor]] | None = None

    def _current(self, args: Sequence[Any]) -> list[torch.Tensor] | None:
        state = self.state
        if state is None:
            return None
        keys, values = state
        for i, (ref, address, version) in zip(self.watched, keys):
            arg = args[i]
            if ref() is not arg or arg.data_ptr() != address or arg._version != version:
                return None
        return values

    def __call__(self, args: list[Any]) -> Any:
        values = self._current(args)
        if values is None:
            with torch.no_grad():
                values = [v.contiguous() for v in self.prologue(*args)]
            keys = tuple(
                (weakref.ref(args[i]), args[i].data_ptr(), args[i]._version) for i in self.watched
            )
            self.state = (keys, values)
            log.debug("%s: weight-only values recomputed", self.name)
        return self.kernel([*args, *values])


def hoist(
    gm: torch.fx.GraphModule,
    split: Split,
    compile_main: Callable[[torch.fx.GraphModule], Callable[[list[Any]], Any]],
) -> Callable[[list[Any]], Any] | None:
    """The graph with its weight-only work (``split``, the analysis of ``gm``) hoisted,
    compiled with ``compile_main``; ``None`` when there is nothing worth hoisting."""
    if not split.hoisted:
        return None
    main = main_graph(gm, split)
    kernel = compile_main(main)
    name = getattr(kernel, "name", "graph")
    log.info(
        "%s: %d weight-only value(s) computed once, outside the kernel: %s",
        name,
        len(split.hoisted),
        ", ".join(n.name for n in split.hoisted),
    )
    return Hoisted(name, prologue(gm, split), kernel, split.watched)
