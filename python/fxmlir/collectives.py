"""Collectives compiled in place. A graph that uses PyTorch's functional collectives
(``torch.distributed._functional_collectives``: ``_c10d_functional.all_reduce`` and the
others below, each followed by ``wait_tensor``) compiles into one kernel: each collective is a
call from the kernel back into Python (``Kernel.run``'s ``host``), which runs the same
functional op in PyTorch's c10d on views of the kernel's buffers and waits for it. The
collectives therefore run in graph order, on the calling thread, each complete before the
kernel goes on; the graph is no longer cut around them, and strict mode accepts it.

The kernel copies a collective's input into a contiguous buffer of its own and gives a fresh
one for its output (the same one for the in-place ``all_reduce`` and ``broadcast``).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import torch

# lowerings imports this module, and interchange imports lowerings: names are looked up
# when called.
from . import interchange

_ops = torch.ops._c10d_functional


def _all_reduce(source: torch.Tensor, target: torch.Tensor, args: list[Any]) -> None:
    _ops.all_reduce_(target, *args)
    _ops.wait_tensor(target)


def _broadcast(source: torch.Tensor, target: torch.Tensor, args: list[Any]) -> None:
    _ops.broadcast_(target, *args)
    _ops.wait_tensor(target)


def _all_gather(source: torch.Tensor, target: torch.Tensor, args: list[Any]) -> None:
    _ops.all_gather_into_tensor_out(source, *args, out=target)
    _ops.wait_tensor(target)


def _reduce_scatter(source: torch.Tensor, target: torch.Tensor, args: list[Any]) -> None:
    _ops.reduce_scatter_tensor_out(source, *args, out=target)
    _ops.wait_tensor(target)


def _all_to_all(source: torch.Tensor, target: torch.Tensor, args: list[Any]) -> None:
    result = _ops.all_to_all_single(source, *args)
    target.copy_(_ops.wait_tensor(result))


#: The collectives fxmlir compiles in place (the ops of the Rust registry's collectives
#: family), and how the host runs each on the kernel's buffers.
RUNNERS: dict[str, Callable[[torch.Tensor, torch.Tensor, list[Any]], None]] = {
    "_c10d_functional.all_reduce.default": _all_reduce,
    "_c10d_functional.broadcast.default": _broadcast,
    "_c10d_functional.all_gather_into_tensor.default": _all_gather,
    "_c10d_functional.reduce_scatter_tensor.default": _reduce_scatter,
    "_c10d_functional.all_to_all_single.default": _all_to_all,
}

#: The wait on a collective's result: compiled (as the identity) only after a collective
#: compiled in the same kernel.
WAIT = "_c10d_functional.wait_tensor.default"


def is_collective(target: Any) -> bool:
    """Whether ``target`` (an FX node's) is a collective or a wait on one: never pure, never
    hoisted out of the kernel, never computed ahead of time."""
    name = str(target)
    return name in RUNNERS or name == WAIT


def waits_on_compiled(node: torch.fx.Node) -> bool:
    """Whether ``node`` (a ``wait_tensor``) waits on a collective fxmlir compiles, which is
    complete when its call returns; a wait on anything else runs eagerly."""
    waited = node.args[0] if node.args else None
    return isinstance(waited, torch.fx.Node) and str(waited.target) in RUNNERS


def _decode(value: Any) -> Any:
    """An interchange argument (``{"str": "sum"}``, ``{"list": [...]}``) as Python."""
    if isinstance(value, dict):
        ((kind, inner),) = value.items()
        if kind == "list":
            return [_decode(v) for v in inner]
        return inner
    return None if value == "none" else value


def _view(address: int, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """The contiguous tensor of ``shape`` and ``dtype`` at ``address`` (a buffer of the
    kernel's, alive while the host call runs)."""
    count = math.prod(shape)
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    size = count * dtype.itemsize
    raw = (ctypes.c_byte * size).from_address(address)
    return torch.frombuffer(raw, dtype=dtype).view(shape)


class HostCalls:
    """The host calls of one compiled graph: call ``k`` runs the ``k``-th of ``names``
    (``Kernel.host_calls``), nodes of the interchange document ``doc``."""

    def __init__(self, doc: dict[str, Any], names: list[str]):
        dtypes = {name: dtype for dtype, name in interchange.DTYPES.items()}
        metas = {(n["name"], i): m for n in doc["nodes"] for i, m in enumerate(n["outputs"])}
        metas.update({(i["name"], 0): i["meta"] for i in doc["inputs"]})
        nodes = {n["name"]: n for n in doc["nodes"]}
        self.calls = []
        for name in names:
            node = nodes[name]
            ref = node["args"][0]["ref"]
            source = metas[(ref["node"], ref.get("index", 0))]
            target = node["outputs"][0]
            self.calls.append(
                (
                    RUNNERS[node["target"]],
                    (source["shape"], dtypes[source["dtype"]]),
                    (target["shape"], dtypes[target["dtype"]]),
                    [_decode(a) for a in node["args"][1:]],
                )
            )

    def __call__(self, number: int, source: int, target: int) -> None:
        run, source_layout, target_layout, args = self.calls[number]
        run(_view(source, *source_layout), _view(target, *target_layout), args)
