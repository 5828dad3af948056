"""Inference graphs without aot_autograd. A Dynamo graph that computes no gradient (grad mode
off, or no input that requires grad), has static shapes, mutates none of its inputs and
returns no alias of an input needs none of aot_autograd's machinery: its
metadata pass (a second run of the graph), its input-mutation and output-alias handling, its
runtime wrappers. Here such a graph is traced once, functionalised and with fxmlir's
decompositions, into the same kind of functional ATen graph aot_autograd would produce, which
costs about half of aot_autograd's time (BERT 68 ms against 127, resnet18 89 against 200).
Every other graph (training, dynamic shapes, input mutation such as batch norm's running
statistics in training mode, outputs aliasing inputs) goes through aot_autograd as before."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.fx import traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef

log = logging.getLogger("fxmlir")

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="placeholder"))


def _why_not(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why ``gm`` needs aot_autograd before it is traced, or None."""
    if torch._guards.TracingContext.try_get() is None:
        return "not compiled by Dynamo"
    if not all(type(x) in _PLAIN for x in example_inputs):
        return "an input is not a plain tensor"
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return "an input requires grad"
    if (
        any(n.op == "get_attr" for n in gm.graph.nodes)
        or list(gm.parameters())
        or list(gm.buffers())
    ):
        return "the graph holds tensors of its own"
    for node in _placeholders(gm):
        value = node.meta.get("example_value")
        if not isinstance(value, torch.Tensor):
            return f"input {node.name} has no example tensor"
        if not all(isinstance(d, int) for d in (*value.shape, *value.stride())):
            return f"input {node.name} has symbolic sizes"
    return None


def _why_not_traced(graph: torch.fx.GraphModule) -> str | None:
    """Why the traced ``graph`` cannot stand for the Dynamo graph, or None: it writes to an
    input (functionalisation leaves those writes as ``copy_`` at the end) or an output aliases
    an input, which only aot_autograd's runtime reproduces. (Outputs that alias one another
    are rebuilt as views by :mod:`fxmlir.passes.aliasing`, on either path.)"""
    for node in graph.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return f"it mutates an input ({node.name}: {target})"
    inputs = {StorageWeakRef(n.meta["val"].untyped_storage()) for n in _placeholders(graph)}
    (output,) = graph.graph.find_nodes(op="output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)):
        return "its result is not a flat sequence"
    for result in results:
        value = result.meta.get("val") if isinstance(result, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return "an output is not a tensor"
        if StorageWeakRef(value.untyped_storage()) in inputs:
            return f"output {result.name} aliases an input"
    return None


def trace(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    decompositions: dict[Any, Callable],
) -> tuple[torch.fx.GraphModule, frozenset[int]] | None:
    """The functional ATen graph of Dynamo's ``gm`` for inference and the positions of its
    parameter and buffer inputs (for :mod:`fxmlir.passes.hoist`), or None when ``gm`` needs
    aot_autograd (the reason is logged at DEBUG)."""
    reason = _why_not(gm, example_inputs)
    if reason is None:
        fake_mode = torch._guards.TracingContext.get().fake_mode
        fakes = [fake_mode.from_tensor(x, static_shapes=True) for x in example_inputs]
        interpreter = torch.fx.Interpreter(gm)

        def run(*args: Any) -> Any:
            with fx_traceback.preserve_node_meta():
                return interpreter.run(*args)

        functional = torch.func.functionalize(run, remove="mutations")
        depth = torch._C._functorch.get_dynamic_layer_stack_depth()
        try:
            with enable_python_dispatcher(), fake_mode:
                graph = make_fx(functional, decomposition_table=decompositions)(*fakes)
        # Whatever this trace cannot do, aot_autograd's own may (or it reports the error).
        except Exception as e:
            # A failure inside a function transform of the graph's own (Mamba's scan runs
            # under vmap) can leave functorch's layers pushed; aot_autograd would trip on them.
            torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)
            reason = f"fxmlir's trace failed ({type(e).__name__}: {e})"
        else:
            reason = _why_not_traced(graph)
    if reason is not None:
        log.debug("graph goes through aot_autograd: %s", reason)
        return None
    static = frozenset(
        i
        for i, node in enumerate(_placeholders(gm))
        if node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
    )
    return graph, static


def unboxed(compiled: Callable[[list[Any]], Any]) -> Callable[..., Any]:
    """Dynamo calls a backend's function with the arguments spread out; fxmlir's compiled
    graphs take them as one list."""

    def call(*args: Any) -> Any:
        return compiled(list(args))

    return call
