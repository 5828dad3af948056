"""The lowering table: for each ATen overload or ``torch.library`` custom op, the rows that
lower it. fxmlir's own rows (``origin="fxmlir"``: the Rust registry, ``src/lower/``) are in it
from the start; rows written in Python, registered here or by a plugin, go on top of them,
with the same effect on partitioning and decompositions. A Python row's lowering is MLIR text,
built per node::

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
the function, each op at the node's location; the ``expand`` stage inlines it.

A node goes to the first row of its op, newest first, whose ``supports`` (a predicate on the
FX node; none accepts all) accepts it: a row overrides fxmlir's own for the nodes it takes,
and the others stay with fxmlir's row or run eagerly. An op with a row leaves the
decomposition table, so it reaches the graph whole. ``unregister(op, origin="fxmlir")`` takes
fxmlir's own row out: the op is then decomposed, or runs eagerly.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterator

import torch
import torch.fx

# interchange imports this module: its functions are looked up when called.
from . import _fxmlir, collectives, interchange


@dataclasses.dataclass(frozen=True)
class Call:
    """One node to lower: the node, and the MLIR types of its tensor arguments (in order)
    and of its outputs, as the lowering's function takes and returns them."""

    node: torch.fx.Node
    inputs: list[str]
    outputs: list[str]


@dataclasses.dataclass(frozen=True)
class Lowering:
    """A row: the op, the function that writes a node's MLIR (``None`` for fxmlir's own rows,
    which the Rust registry lowers), the nodes it supports (all when ``supports`` is None) and
    who registered it (named in errors, and the key of the row among its op's)."""

    op: str
    mlir: Callable[[Call], str] | None
    supports: Callable[[torch.fx.Node], bool] | None
    origin: str


#: The origin of fxmlir's own rows.
FXMLIR = "fxmlir"

#: op → its rows, oldest first: fxmlir's own at the bottom.
_rows: dict[str, list[Lowering]] = {}
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


def _add(row: Lowering) -> None:
    """Puts ``row`` on top of its op's rows (fxmlir's own at the bottom), in place of an
    earlier row of its origin."""
    with _lock:
        rows = [r for r in _rows.get(row.op, []) if r.origin != row.origin]
        _rows[row.op] = [row, *rows] if row.origin == FXMLIR else [*rows, row]


def register(
    op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket,
    mlir: Callable[[Call], str],
    *,
    supports: Callable[[torch.fx.Node], bool] | None = None,
    origin: str = "fxmlir.lowerings",
) -> None:
    """Registers (or replaces, for the same ``origin``) a Python lowering of ``op``: see the
    module docs."""
    if origin == FXMLIR:
        raise ValueError(f"origin {FXMLIR!r} is fxmlir's own rows'; name who registers the row")
    _add(Lowering(_op_name(op), mlir, supports, origin))


def unregister(
    op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket, origin: str | None = None
) -> None:
    """Removes ``op``'s row of ``origin``, or, without one, every row registered on top of
    fxmlir's own. ``origin="fxmlir"`` removes fxmlir's own row."""
    name = _op_name(op)

    def removed(row: Lowering) -> bool:
        return row.origin != FXMLIR if origin is None else row.origin == origin

    with _lock:
        kept = [r for r in _rows.get(name, []) if not removed(r)]
        if kept:
            _rows[name] = kept
        else:
            _rows.pop(name, None)


def rows(op: str | torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> list[Lowering]:
    """``op``'s rows, newest first: those active in this context, then the registered ones."""
    name = _op_name(op)
    scoped_row = (_scoped.get() or {}).get(name)
    with _lock:
        registered = list(reversed(_rows.get(name, [])))
    return [scoped_row, *registered] if scoped_row else registered


def registered() -> frozenset[str]:
    """The ops with a row (fxmlir's own, registered, or active in this context)."""
    with _lock:
        ops = frozenset(_rows)
    return ops | frozenset(_scoped.get() or ())


def lowering_for(node: torch.fx.Node) -> Lowering | None:
    """The row that takes ``node``, if one does (see the module docs); a ``supports`` that
    raises is an error naming the row's origin."""
    if node.op != "call_function":
        return None
    for row in rows(str(node.target)):
        if row.supports is None:
            return row
        try:
            if row.supports(node):
                return row
        except Exception as e:
            raise _error(row, node, f": supports raised {e!r}") from e
    return None


def _error(row: Lowering, node: torch.fx.Node, message: str) -> Exception:
    """A ``LoweringError`` naming the row's origin and op and the node (with its fields)."""
    return interchange.node_fields(
        _fxmlir.LoweringError(f"{row.origin} lowering of {row.op} (node `{node.name}`){message}"),
        node,
    )


def mlir_for(row: Lowering, node: torch.fx.Node, inputs: list[str], outputs: list[str]) -> str:
    """The MLIR text ``row`` writes for ``node``; a lowering that raises or returns no text is
    an error naming its origin."""
    try:
        text = row.mlir(Call(node, inputs, outputs))
    except Exception as e:
        raise _error(row, node, f" raised {e!r}") from e
    if not isinstance(text, str):
        raise _error(row, node, f" returned {type(text).__name__}, not MLIR text")
    return text


#: The nodes some of fxmlir's own rows take (all, for the others).
_SUPPORTS: dict[str, Callable[[torch.fx.Node], bool]] = {
    collectives.WAIT: collectives.waits_on_compiled,
}


def add_fxmlirs_own() -> None:
    """Adds fxmlir's own rows, one for each op of the Rust registry, beneath any registered
    row: done on import, and again to undo ``unregister(op, origin="fxmlir")``."""
    for op, _family in _fxmlir.supported_ops():
        _add(Lowering(op, None, _SUPPORTS.get(op), FXMLIR))


add_fxmlirs_own()
