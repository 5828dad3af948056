"""The call path of a compiled graph: check each argument against what was compiled, allocate
the outputs with torch, pass data pointers to the kernel (no copies), assemble the results."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import torch

from . import _fxmlir
from ._fxmlir import CallError
from .interchange import DTYPES, Plan

log = logging.getLogger("fxmlir")

_TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}


def _format(shape: Sequence[int], strides: Sequence[int], dtype: Any) -> str:
    name = DTYPES.get(dtype, str(dtype))
    return f"{name}{list(shape)} strides {tuple(strides)}"


class InputSpec:
    __slots__ = ("name", "arg", "shape", "strides", "dtype", "checked_strides")

    def __init__(self, name: str, arg: int, meta: dict[str, Any]):
        self.name = name
        self.arg = arg
        self.shape = torch.Size(meta["shape"])
        self.strides = tuple(meta["strides"])
        self.dtype = _TORCH_DTYPES[meta["dtype"]]
        # Strides of size-1 dimensions are never used to address memory.
        self.checked_strides = tuple(
            s if d > 1 else None for d, s in zip(meta["shape"], meta["strides"])
        )

    def check(self, graph: str, value: Any) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise CallError(
                f"graph `{graph}`, input `{self.name}` (argument {self.arg}): expected a tensor, "
                f"got {type(value).__name__}"
            )
        ok = (
            value.dtype == self.dtype
            and value.shape == self.shape
            and value.device.type == "cpu"
            and value.layout == torch.strided
            and all(c is None or c == s for c, s in zip(self.checked_strides, value.stride()))
        )
        if not ok:
            raise CallError(
                f"graph `{graph}`, input `{self.name}` (argument {self.arg}): compiled for "
                f"{_format(self.shape, self.strides, self.dtype)} on cpu, got "
                f"{_format(value.shape, value.stride(), value.dtype)} on {value.device}"
            )
        return value


class CompiledGraph:
    """A callable running one exported graph; ``kernel`` is None when no output needs code."""

    def __init__(self, plan: Plan, kernel: _fxmlir.Kernel | None):
        doc = plan.document
        self.name: str = doc["name"]
        self.plan = plan
        self.kernel = kernel
        self.inputs = [
            InputSpec(i["name"], arg, i["meta"]) for i, arg in zip(doc["inputs"], plan.input_args)
        ]
        metas = []
        for ref in doc["outputs"]:
            metas.append(_meta_of(doc, ref))
        self.outputs = [
            (torch.Size(m["shape"]), tuple(m["strides"]), _TORCH_DTYPES[m["dtype"]]) for m in metas
        ]

    @property
    def timings(self) -> list[tuple[str, float]]:
        return self.kernel.timings if self.kernel is not None else []

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        if self.kernel is None:
            results: list[Any] = []
        else:
            pointers = [spec.check(self.name, args[spec.arg]).data_ptr() for spec in self.inputs]
            results = [
                torch.empty_strided(shape, strides, dtype=dtype)
                for shape, strides, dtype in self.outputs
            ]
            pointers.extend(t.data_ptr() for t in results)
            self.kernel.run(pointers)
        out = []
        for kind, value in self.plan.outputs:
            if kind == "kernel":
                out.append(results[value])
            elif kind == "arg":
                out.append(args[value])
            else:
                out.append(value)
        return out


def _meta_of(doc: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    for node in doc["nodes"]:
        if node["name"] == ref["node"]:
            return node["outputs"][ref["index"]]
    for constant in doc["constants"]:
        if constant["name"] == ref["node"]:
            return constant["meta"]
    raise CallError(f"output `{ref['node']}` has no metadata")


#: Kernels by structural key, so identical graphs (repeated blocks of a model, recompiles of
#: the same code) compile once per process.
_kernels: dict[str, _fxmlir.Kernel] = {}
_kernels_lock = threading.Lock()


def structural_key(doc: dict[str, Any], pipeline: str) -> str:
    """A hash of what determines the code: ops, arguments, metadata, constants and pipeline,
    but not the graph's name, node names or source lines."""
    index: dict[str, str] = {}
    for prefix, entries in (("i", doc["inputs"]), ("c", doc["constants"]), ("n", doc["nodes"])):
        for i, entry in enumerate(entries):
            index[entry["name"]] = f"{prefix}{i}"

    def canon(arg: Any) -> Any:
        if isinstance(arg, dict) and "ref" in arg:
            return ["ref", index[arg["ref"]["node"]], arg["ref"].get("index", 0)]
        if isinstance(arg, dict) and "list" in arg:
            return ["list", [canon(a) for a in arg["list"]]]
        return arg

    body = {
        "version": doc["version"],
        "inputs": [i["meta"] for i in doc["inputs"]],
        "constants": [(c["meta"], c["data"]) for c in doc["constants"]],
        "nodes": [(n["target"], [canon(a) for a in n["args"]], n["outputs"]) for n in doc["nodes"]],
        "outputs": [(index[o["node"]], o.get("index", 0)) for o in doc["outputs"]],
        "pipeline": pipeline,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def build(plan: Plan, pipeline: str, dump_dir: str | None) -> tuple[CompiledGraph, bool]:
    """Compiles an exported plan (unless it needs no kernel) and wraps it for calling. Returns
    the graph and whether its kernel came from the in-process cache (never when dumping, so
    that every graph's dumps are written)."""
    if not plan.document["outputs"]:
        return CompiledGraph(plan, None), False
    key = structural_key(plan.document, pipeline)
    if dump_dir is None:
        with _kernels_lock:
            kernel = _kernels.get(key)
        if kernel is not None:
            log.info("graph %s reuses the kernel of %s", plan.document["name"], kernel.name)
            return CompiledGraph(plan, kernel), True
    kernel = _fxmlir.compile(plan.to_json(), pipeline, dump_dir)
    total = dict(kernel.timings).get("total", 0.0)
    log.info("compiled graph %s in %.1f ms", kernel.name, total)
    if dump_dir:
        log.info("dumps of %s: %s", kernel.name, ", ".join(kernel.dumped))
    with _kernels_lock:
        _kernels[key] = kernel
    return CompiledGraph(plan, kernel), False
