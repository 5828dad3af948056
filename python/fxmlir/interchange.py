"""FX graph → interchange document (``docs/interchange.md``).

The exporter walks a functional ATen graph whose nodes carry FakeTensor ``meta["val"]``. Every
argument is written in schema order with defaults filled in; ``getitem`` nodes become indexed
references; symbolic sizes are evaluated against concrete ``bindings`` (one compile per binding),
so the document itself is always static.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import operator
import os
import re
from typing import Any, TypeVar

import torch
import torch.fx

from . import _fxmlir, lowerings
from ._fxmlir import INTERCHANGE_VERSION, GraphError, UnsupportedOpError

E = TypeVar("E", bound=Exception)

FORMAT = "fxmlir.graph"

DTYPES = {
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}

_TRACE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


#: Frames in PyTorch's own package are not the user's (``F.embedding``'s body, the functional
#: collectives' wrappers): a node's source is the innermost frame outside it, when there is one.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def source_of(node: torch.fx.Node) -> dict[str, Any] | None:
    """The innermost user frame of a node's stack trace: ``{"file", "line", "code"}``."""
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    lines = trace.rstrip().splitlines()
    frames = [(i, m) for i, line in enumerate(lines) if (m := _TRACE_LINE.search(line))]
    if not frames:
        return None
    users = [(i, m) for i, m in frames if not m.group(1).startswith(_TORCH_DIR)]
    i, m = (users or frames)[-1]
    code = lines[i + 1].strip() if i + 1 < len(lines) else ""
    out: dict[str, Any] = {"file": m.group(1), "line": int(m.group(2))}
    if code:
        out["code"] = code
    return out


def source_line(node: torch.fx.Node) -> str | None:
    """``model.py:12``, the node's innermost user frame, when known."""
    src = source_of(node)
    return f"{src['file']}:{src['line']}" if src else None


def describe(node: torch.fx.Node) -> str:
    """``node `mm_3` (aten.mm.default) at model.py:12`` for error messages."""
    where = source_line(node)
    return f"node `{node.name}` ({target_name(node)})" + (f" at {where}" if where else "")


def node_fields(error: E, node: torch.fx.Node) -> E:
    """``error`` with the node it is about as fields: ``node``, ``op`` and ``source`` (as the
    errors fxmlir's Rust side raises carry them). The partitioner reads them to run that node
    eagerly."""
    error.node = node.name
    error.op = target_name(node)
    error.source = source_line(node)
    return error


def node_error(cls: type[E], node: torch.fx.Node, message: str) -> E:
    """An error of ``cls`` about ``node``: its description, then ``message``; with its fields."""
    return node_fields(cls(f"{describe(node)}{message}"), node)


def target_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, str):
        return target
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))


class Symbolic(dict):
    """Bindings that keep sizes symbolic: :func:`evaluate` writes a size that depends on
    Dynamo's size symbols as the text of an integer expression over them (``"128*s0"``,
    ``"(s0 - 1)//2 + 1"``), recording each symbol's range (``ranges``: name → (min, max)), for
    a kernel that serves every size. A size the interchange cannot write (a true division, a
    power with a symbolic exponent) raises ``UnsupportedOpError``: such a graph compiles per
    size."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: dict[str, tuple[int, int]] = {}

    def text(self, value: torch.SymInt) -> str:
        self.record(value.node)
        return size_text(value.node.expr)

    def ratio(self, value: torch.SymFloat) -> list[str]:
        """A float computed from sizes as the interchange's ``ratio``: its numerator's and
        denominator's texts."""
        self.record(value.node)
        return ratio_texts(value.node.expr)

    def record(self, node: Any) -> None:
        """Records the ranges of the symbols ``node`` (a SymNode) uses."""
        from torch.utils._sympy.numbers import int_oo

        ranges = node.shape_env.var_to_range
        for symbol in sorted(node.expr.free_symbols, key=str):
            known = ranges.get(symbol)
            low = int(known.lower) if known is not None else 0
            high = known.upper if known is not None else int_oo
            self.ranges[str(symbol)] = (max(low, 0), MAX_SIZE if high == int_oo else int(high))


def ratio_texts(expr: Any) -> list[str]:
    """A SymPy float expression of sizes (``IntTrueDiv``, ``FloatTrueDiv``, ``ToFloat`` of
    integer expressions and float constants) as the texts of a numerator and a denominator
    (``1.0 / (512*s0 / 8)`` is ``["1", "64*s0"]``); ``UnsupportedOpError`` if it is none."""
    import sympy
    from torch.utils._sympy import functions as f

    def exact(e: Any) -> Any:
        if isinstance(e, sympy.Float):
            return sympy.Rational(float(e))
        if isinstance(e, (f.IntTrueDiv, f.FloatTrueDiv)):
            a, b = (exact(x) for x in e.args)
            return a / b
        if isinstance(e, f.ToFloat):
            return exact(e.args[0])
        if isinstance(e, (sympy.Add, sympy.Mul, sympy.Pow)):
            return e.func(*(exact(x) for x in e.args))
        return e

    num, den = sympy.fraction(sympy.together(exact(expr)))
    return [size_text(sympy.expand(num)), size_text(sympy.expand(den))]


def size_text(expr: Any) -> str:
    """The interchange's text of a SymPy size expression: integers and symbols combined by
    ``+``, ``*``, powers by small natural exponents, maxima and minima, and floor division,
    ceiling division and modulo by positive integers or by sizes (as ``//``);
    ``UnsupportedOpError`` for anything else."""
    import sympy
    from torch.utils._sympy import functions as f

    def modulo(a: str, m: int | str) -> str:
        return f"({a} - {m}*({a}//{m}))"

    def text(e: Any) -> str:
        if e.is_Integer:
            return f"({int(e)})"
        if e.is_Symbol:
            return str(e)
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(map(text, e.args)) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + "*".join(map(text, e.args)) + ")"
        if isinstance(e, (sympy.Pow, f.PowByNatural)):
            base, exponent = e.args
            if exponent.is_Integer and 0 <= int(exponent) <= 8:
                return f"({text(base)}**{int(exponent)})"
        if isinstance(e, (f.FloorDiv, f.CeilDiv, f.Mod, f.PythonMod)):
            a, b = e.args
            # By a positive integer, or by a size (which the kernel takes as at least 1):
            # `x % n` of a shifted window, `x.roll(k)` over a symbolic dimension.
            if not b.is_Integer or int(b) > 0:
                a, b = text(a), (int(b) if b.is_Integer else text(b))
                if isinstance(e, f.FloorDiv):
                    return f"({a}//{b})"
                if isinstance(e, f.CeilDiv):
                    return f"((-1)*(((-1)*{a})//{b}))"
                return modulo(a, b)
        if isinstance(e, (f.Max, f.Min)):
            return ("max(" if isinstance(e, f.Max) else "min(") + ", ".join(map(text, e.args)) + ")"
        if isinstance(e, f.ModularIndexing):
            base, divisor, modulus = e.args
            if divisor.is_Integer and modulus.is_Integer and int(divisor) > 0 and int(modulus) > 0:
                return modulo(f"({text(base)}//{int(divisor)})", int(modulus))
        raise UnsupportedOpError(
            f"the symbolic size {expr} is no integer expression the interchange writes "
            f"(`{e}`: only +, *, natural powers, Max, Min, // and % by positive integers or sizes)"
        )

    return text(expr)


#: The largest value a size symbol's range says (Dynamo's ``int_oo``).
MAX_SIZE = 2**63 - 1


def evaluate(value: Any, bindings: dict[Any, int]) -> int | str:
    """A concrete int from an int or SymInt under ``bindings`` (symbol → value); with
    :class:`Symbolic` bindings, a symbolic size's text."""
    if isinstance(value, int):
        return value
    if isinstance(bindings, Symbolic) and isinstance(value, torch.SymInt):
        if value.node.expr.free_symbols:
            return bindings.text(value)
        return int(value.node.expr)
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        result = expr.xreplace(bindings) if bindings else expr
        if getattr(result, "free_symbols", None):
            raise GraphError(f"cannot evaluate symbolic size {expr} with bindings {bindings}")
        return int(result)
    raise GraphError(f"expected an int or SymInt, got {type(value).__name__}")


def is_size_float(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes a float from sizes in Python (``operator.truediv`` of two
    sizes, ``sym_float``): the exporter evaluates it, like size arithmetic."""
    val = node.meta.get("val")
    return isinstance(val, (float, torch.SymFloat)) and not isinstance(
        node.target, torch._ops.OpOverload
    )


def evaluate_float(
    value: torch.SymFloat, bindings: dict[Any, int], node: torch.fx.Node
) -> float | list[str]:
    """A SymFloat's value under ``bindings``: for a kernel for every size (:class:`Symbolic`
    bindings) a ratio of sizes (see :func:`ratio_texts`); an error for a float that depends on
    more than sizes."""
    expr = value.node.expr
    if isinstance(bindings, Symbolic) and expr.free_symbols:
        try:
            return bindings.ratio(value)
        except UnsupportedOpError as e:
            raise node_error(UnsupportedOpError, node, f": {e}") from None
    result = expr if isinstance(bindings, Symbolic) else expr.xreplace(bindings)
    if getattr(result, "free_symbols", None):
        raise node_error(UnsupportedOpError, node, f": the symbolic float {expr} is not supported")
    return float(result)


def tensor_meta(t: torch.Tensor, bindings: dict[Any, int], whose: str) -> dict[str, Any]:
    if t.dtype not in DTYPES:
        raise UnsupportedOpError(f"{whose}: dtype {t.dtype} is not supported")
    if t.device.type != "cpu":
        raise UnsupportedOpError(f"{whose}: device {t.device} is not supported (CPU only)")
    if t.layout != torch.strided:
        raise UnsupportedOpError(f"{whose}: layout {t.layout} is not supported")
    return {
        "shape": [evaluate(d, bindings) for d in t.shape],
        "strides": [evaluate(s, bindings) for s in t.stride()],
        "dtype": DTYPES[t.dtype],
        "device": "cpu",
    }


def symbol_bindings(gm: torch.fx.GraphModule, args: list[Any]) -> dict[Any, int]:
    """Symbol → concrete value, read off the placeholders and the actual arguments."""
    bindings: dict[Any, int] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, arg in zip(placeholders, args):
        val = node.meta.get("val")
        matched: list[tuple[Any, Any]] = []
        if isinstance(val, torch.SymInt):
            matched.append((val, arg))
        elif isinstance(val, torch.Tensor) and isinstance(arg, torch.Tensor):
            matched.extend(zip(val.shape, arg.shape))
            matched.extend(zip(val.stride(), arg.stride()))
        for sym, concrete in matched:
            if isinstance(sym, torch.SymInt):
                expr = sym.node.expr
                if getattr(expr, "is_Symbol", False):
                    bindings[expr] = int(concrete)
    return bindings


def is_dynamic(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        for v in vals:
            if isinstance(v, (torch.SymInt, torch.SymFloat)):
                return True
            if isinstance(v, torch.Tensor) and any(
                isinstance(d, torch.SymInt) for d in (*v.shape, *v.stride())
            ):
                return True
    return False


@dataclasses.dataclass
class Plan:
    """How the runtime maps between the FX graph's calling convention and the kernel's."""

    #: The interchange document.
    document: dict[str, Any]
    #: For each kernel input, the index of the graph argument it reads.
    input_args: list[int]
    #: For each graph output: ("kernel", i) | ("arg", i) | ("value", python_value).
    outputs: list[tuple[str, Any]]

    def to_json(self, indent: int | None = 1) -> str:
        """The document as JSON text; ``indent=None`` is compact and several times faster to
        write (the indented form is for dump files people read)."""
        return json.dumps(self.document, indent=indent, allow_nan=False)


class Exporter:
    def __init__(self, gm: torch.fx.GraphModule, name: str, bindings: dict[Any, int]):
        self.gm = gm
        self.name = name
        self.bindings = bindings
        self.refs: dict[str, dict[str, Any]] = {}  # node name -> {"node", "index"}
        self.values: dict[str, Any] = {}  # node name -> python value (SymInt-valued nodes)
        self.arg_index: dict[str, int] = {}  # placeholder name -> argument index

    def scalar(self, value: int | torch.SymInt) -> int | torch.SymInt:
        """A size the graph computes: its value, or, exporting symbolically, the SymInt
        itself (its text where an argument takes it; evaluated per call as an output)."""
        if isinstance(self.bindings, Symbolic) and isinstance(value, torch.SymInt):
            return value
        return evaluate(value, self.bindings)

    def encode(self, value: Any, node: torch.fx.Node) -> dict[str, Any] | str:
        if isinstance(value, torch.fx.Node):
            if value.name in self.values:
                return self.encode(self.values[value.name], node)
            if value.name not in self.refs:
                raise node_error(GraphError, node, f" uses `{value.name}`, which is not a tensor")
            return {"ref": self.refs[value.name]}
        if isinstance(value, bool):
            return {"bool": value}
        if isinstance(value, (int, torch.SymInt)):
            return {"int": evaluate(value, self.bindings)}
        if isinstance(value, torch.SymFloat):
            value = evaluate_float(value, self.bindings, node)
            if isinstance(value, list):
                return {"ratio": value}
        if isinstance(value, float):
            if math.isnan(value):
                return {"float": "nan"}
            if math.isinf(value):
                return {"float": "inf" if value > 0 else "-inf"}
            return {"float": value}
        if value is None:
            return "none"
        if isinstance(value, str):
            return {"str": value}
        if isinstance(value, torch.dtype):
            if value not in DTYPES:
                raise node_error(UnsupportedOpError, node, f": dtype {value} is not supported")
            return {"dtype": DTYPES[value]}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, torch.layout):
            return {"layout": str(value).removeprefix("torch.")}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).removeprefix("torch.")}
        if isinstance(value, (list, tuple)):
            return {"list": [self.encode(v, node) for v in value]}
        raise node_error(
            UnsupportedOpError, node, f": argument of type {type(value).__name__} is not supported"
        )

    def normalized_args(self, node: torch.fx.Node) -> tuple[list[Any], list[str]]:
        schema = node.target._schema
        args, names = [], []
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                value = node.args[i]
            elif arg.name in node.kwargs:
                value = node.kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise node_error(GraphError, node, f": missing argument `{arg.name}`")
            args.append(self.encode(value, node))
            names.append(arg.name)
        return args, names

    def inline_lowering(
        self,
        row: lowerings.Lowering,
        node: torch.fx.Node,
        args: list[Any],
        outputs: list[dict[str, Any]],
        values: list[dict[str, Any]],
        nodes: list[dict[str, Any]],
    ) -> dict[str, str]:
        """The ``lowering`` of a node a Python row lowers: its MLIR, written for the types of
        the node's tensor arguments (the values its top-level arguments refer to: inputs and
        constants, ``values``, or earlier ``nodes``' outputs) and outputs."""
        metas = {(v["name"], 0): v["meta"] for v in values}
        for n in nodes:
            metas.update({(n["name"], k): m for k, m in enumerate(n["outputs"])})

        def mlir_type(meta: dict[str, Any]) -> str:
            return _fxmlir.tensor_type(meta["shape"], meta["dtype"])

        types = [
            mlir_type(metas[(a["ref"]["node"], a["ref"]["index"])]) for a in args if "ref" in a
        ]
        text = lowerings.mlir_for(row, node, types, [mlir_type(m) for m in outputs])
        return {"origin": row.origin, "mlir": text}

    def export(self) -> Plan:
        inputs, constants, nodes = [], [], []
        placeholder_index = 0
        for node in self.gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder":
                index = placeholder_index
                placeholder_index += 1
                if isinstance(val, torch.Tensor):
                    meta = tensor_meta(val, self.bindings, f"input `{node.name}`")
                    inputs.append({"name": node.name, "meta": meta})
                    self.refs[node.name] = {"node": node.name, "index": 0}
                    self.arg_index[node.name] = index
                elif isinstance(val, (int, torch.SymInt)):
                    self.values[node.name] = self.scalar(val)
                elif isinstance(val, (float, torch.SymFloat)):
                    # A number the graph's caller computes from sizes (a resize's scale):
                    # written as its value for this binding (see `encode`).
                    self.values[node.name] = val
                else:
                    raise UnsupportedOpError(
                        f"input `{node.name}` of type {type(val).__name__} is not supported"
                    )
            elif node.op == "get_attr":
                tensor = getattr(self.gm, node.target)
                if not isinstance(tensor, torch.Tensor):
                    raise UnsupportedOpError(f"attribute `{node.target}` is not a tensor")
                tensor = tensor.detach().contiguous()
                meta = tensor_meta(tensor, self.bindings, f"constant `{node.name}`")
                # Flattened first: a 0-dim tensor cannot be viewed as bytes of another size.
                data = tensor.reshape(-1).view(torch.uint8)
                constants.append(
                    {
                        "name": node.name,
                        "meta": meta,
                        "data": base64.b64encode(data.numpy().tobytes()).decode(),
                    }
                )
                self.refs[node.name] = {"node": node.name, "index": 0}
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    source, index = node.args
                    if source.name in self.values:
                        self.values[node.name] = self.values[source.name][index]
                    else:
                        self.refs[node.name] = {"node": source.name, "index": int(index)}
                    continue
                if isinstance(val, (int, torch.SymInt)):
                    # Size arithmetic (sym_size, mul of sizes, ...) is evaluated here.
                    self.values[node.name] = self.scalar(val)
                    continue
                if is_size_float(node):
                    # A ratio of sizes (a resize's scale): evaluated where it is used.
                    self.values[node.name] = val
                    continue
                if not isinstance(node.target, torch._ops.OpOverload):
                    raise node_error(
                        UnsupportedOpError, node, ": only ATen/prims operators are supported"
                    )
                vals = list(val) if isinstance(val, (tuple, list)) else [val]
                outputs = []
                for i, v in enumerate(vals):
                    if not isinstance(v, torch.Tensor):
                        raise node_error(
                            UnsupportedOpError,
                            node,
                            f": output {i} is {type(v).__name__}, not a tensor",
                        )
                    try:
                        outputs.append(tensor_meta(v, self.bindings, describe(node)))
                    except UnsupportedOpError as e:
                        raise node_fields(e, node) from None
                args, names = self.normalized_args(node)
                entry: dict[str, Any] = {
                    "name": node.name,
                    "target": str(node.target),
                    "args": args,
                    "arg_names": names,
                    "outputs": outputs,
                }
                source = source_of(node)
                if source:
                    entry["source"] = source
                row = lowerings.lowering_for(node)
                if row is not None and row.mlir is not None:
                    entry["lowering"] = self.inline_lowering(
                        row, node, args, outputs, inputs + constants, nodes
                    )
                nodes.append(entry)
                self.refs[node.name] = {"node": node.name, "index": 0}
            elif node.op == "output":
                return self.finish(node, inputs, constants, nodes)
            else:
                raise UnsupportedOpError(f"FX node kind `{node.op}` ({node.name}) is not supported")
        raise GraphError("the graph has no output node")

    def finish(self, output: torch.fx.Node, inputs, constants, nodes) -> Plan:
        results = output.args[0]
        if not isinstance(results, (tuple, list)):
            results = [results]
        kernel_outputs: list[dict[str, Any]] = []
        plan_outputs: list[tuple[str, Any]] = []
        for value in results:
            if isinstance(value, torch.fx.Node) and value.name in self.arg_index:
                plan_outputs.append(("arg", self.arg_index[value.name]))
            elif isinstance(value, torch.fx.Node) and value.name in self.refs:
                ref = self.refs[value.name]
                if ref["node"] in self.arg_index:
                    plan_outputs.append(("arg", self.arg_index[ref["node"]]))
                    continue
                if ref not in kernel_outputs:
                    kernel_outputs.append(ref)
                plan_outputs.append(("kernel", kernel_outputs.index(ref)))
            elif isinstance(value, torch.fx.Node) and value.name in self.values:
                plan_outputs.append(("value", self.values[value.name]))
            elif value is None or isinstance(value, (int, float, bool)):
                plan_outputs.append(("value", value))
            else:
                raise UnsupportedOpError(f"graph output {value!r} is not supported")
        document = {
            "format": FORMAT,
            "version": INTERCHANGE_VERSION,
            "name": self.name,
            "inputs": inputs,
            "constants": constants,
            "nodes": nodes,
            "outputs": kernel_outputs,
        }
        if isinstance(self.bindings, Symbolic) and self.bindings.ranges:
            read = {size for i in inputs for size in i["meta"]["shape"]}
            unread = sorted(set(self.bindings.ranges) - read)
            if unread:
                # The kernel reads each symbol off an input's dimension.
                raise UnsupportedOpError(
                    f"the size symbols {', '.join(unread)} are no input's dimension"
                )
            document["symbols"] = [
                {"name": name, "min": low, "max": high}
                for name, (low, high) in sorted(self.bindings.ranges.items())
            ]
        input_args = [self.arg_index[i["name"]] for i in inputs]
        return Plan(document=document, input_args=input_args, outputs=plan_outputs)


def export(gm: torch.fx.GraphModule, name: str, bindings: dict[Any, int] | None = None) -> Plan:
    """Exports ``gm`` (a functional ATen graph with FakeTensor metadata). Runs outside any
    active FakeTensorMode, so that constants (real tensors) can be read."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return Exporter(gm, name, {} if bindings is None else bindings).export()
