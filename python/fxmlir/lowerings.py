"""Lowerings written in Python, next to fxmlir's own (the Rust registry): a row for an ATen
overload or a ``torch.library`` custom op whose lowering is MLIR text, built per node::

    def scaled_tanh(call: fxmlir.lowerings.Call) -> str:
        (x,), (out,) = call.inputs, call.outputs
        return f'''
        func.func @lowering(%x: {x}) -> {out} {{
          %t = "xacc.tanh"(%x) : ({x}) -> {out}
          return %t : {out}
        }}'''

    fxmlir.lowerings.register("mylib::scaled_tanh", scaled_tanh, origin="xacc")

The text is one ``func.func`` taking the node's tensor arguments in order (scalar arguments
are the lowering's to bake into the text: ``call.node.args``) and returning its outputs. Its
body may use upstream dialects or one loaded in IRDL (``fxmlir.config.dialects``); a stage
(``fxmlir.config.stages``) lowers such ops to upstream ones. The node becomes
``fxmlir.external`` (fxmlir's dialect, ``dialects/fxmlir.irdl.mlir``) whose decomposition is
the function, each op at the node's location; the ``expand`` stage inlines it. A row overrides
fxmlir's own for its op, takes the op out of the decomposition table so it reaches the graph
whole, and ``supports`` (a predicate on the FX node) decides which nodes it takes: the others
stay with fxmlir's row or
run eagerly, exactly as the partitioner treats fxmlir's own rows.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterator

import torch
import torch.fx

from . import _fxmlir


@dataclasses.dataclass(frozen=True)
class Call:
    """One node to lower: the node, and the MLIR types of its tensor arguments (in order)
    and of its outputs, as the lowering's function takes and returns them."""

    node: torch.fx.Node
    inputs: list[str]
    outputs: list[str]


@dataclasses.dataclass(frozen=True)
class Lowering:
    """A registered row: the op, the function that writes a node's MLIR, the nodes it
    supports (all when ``supports`` is None) and who registered it (named in errors)."""

    op: str
    mlir: Callable[[Call], str]
    supports: Callable[[torch.fx.Node], bool] | None
    origin: str


_rows: dict[str, Lowering] = {}
_lock = threading.Lock()
#: Rows active in this context only (an active plugin's), ahead of the registered ones.
_scoped: contextvars.ContextVar[dict[str, Lowering] | None] = contextvars.ContextVar(
    "fxmlir_lowerings", default=None
)


@contextlib.contextmanager
def scoped(rows: dict[str, Lowering]) -> Iterator[None]:
    """Makes ``rows`` (op → row) override the registered rows for what runs inside."""
    token = _scoped.set({**(_scoped.get() or {}), **rows})
    try:
        yield
    finally:
        _scoped.reset(token)


def _op_name(op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> str:
    """``aten.gelu.default`` for the overload, its packet's ``default`` for a packet, and a
    string as given (``mylib::op`` is ``mylib.op.default``)."""
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    if "::" in op:
        namespace, name = op.split("::", 1)
        return f"{namespace}.{name}" if "." in name else f"{namespace}.{name}.default"
    return op


def register(
    op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket,
    mlir: Callable[[Call], str],
    *,
    supports: Callable[[torch.fx.Node], bool] | None = None,
    origin: str = "fxmlir.lowerings",
) -> None:
    """Registers (or replaces) the Python lowering of ``op``: see the module docs."""
    with _lock:
        _rows[_op_name(op)] = Lowering(_op_name(op), mlir, supports, origin)


def unregister(op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> None:
    """Removes the Python lowering of ``op``, if there is one."""
    with _lock:
        _rows.pop(_op_name(op), None)


def registered() -> frozenset[str]:
    """The ops with a Python lowering (registered, or active in this context)."""
    return frozenset(_rows) | frozenset(_scoped.get() or ())


def lowering_for(node: torch.fx.Node) -> Lowering | None:
    """The Python lowering that takes ``node``, if one does; a ``supports`` that raises is
    an error naming the row's origin."""
    if node.op != "call_function":
        return None
    op = str(node.target)
    row = (_scoped.get() or {}).get(op) or _rows.get(op)
    if row is None or row.supports is None:
        return row
    try:
        return row if row.supports(node) else None
    except Exception as e:
        raise _fxmlir.LoweringError(
            f"{row.origin} lowering of {row.op} (node `{node.name}`): supports raised {e!r}"
        ) from e


def mlir_for(row: Lowering, node: torch.fx.Node, inputs: list[str], outputs: list[str]) -> str:
    """The MLIR text ``row`` writes for ``node``; a lowering that raises or returns no text is
    an error naming its origin."""
    try:
        text = row.mlir(Call(node, inputs, outputs))
    except Exception as e:
        raise _fxmlir.LoweringError(
            f"{row.origin} lowering of {row.op} (node `{node.name}`) raised {e!r}"
        ) from e
    if not isinstance(text, str):
        raise _fxmlir.LoweringError(
            f"{row.origin} lowering of {row.op} (node `{node.name}`) returned "
            f"{type(text).__name__}, not MLIR text"
        )
    return text
