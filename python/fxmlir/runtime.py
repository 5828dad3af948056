"""The call path of a compiled graph: check each argument against what was compiled, allocate
the outputs with torch, pass data pointers to the kernel (no copies), assemble the results."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import logging
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _fxmlir, collectives
from ._fxmlir import CallError
from .interchange import DTYPES, Plan

try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # a torch without Dynamo's C++ guards: every call checks in Python
    TensorGuards = None

log = logging.getLogger("fxmlir")

_TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}

# Outputs of at least this many bytes are allocated by fxmlir (`Kernel.output_buffer`), in
# blocks that come back already mapped when torch frees the tensor: a fresh torch allocation
# this large costs a page fault per 4 KiB on every call. Smaller ones come from torch.
POOLED_OUTPUT_BYTES = 1 << 20

#: How many times a compiled graph builds its C++ check of the arguments (see
#: :class:`Checks`). Building one costs about what checking in Python does (170 µs
#: for 213 tensors), so arguments that keep changing how they look (two layouts in turn)
#: stop rebuilding it after this many.
MAX_GUARDS = 8

#: Sizes whose input checks and output allocators a kernel for every size keeps.
MAX_LAYOUTS = 64


def _format(shape: Sequence[int], strides: Sequence[int], dtype: Any) -> str:
    name = DTYPES.get(dtype, str(dtype))
    return f"{name}{list(shape)} strides {tuple(strides)}"


class InputSpec:
    __slots__ = ("name", "arg", "shape", "strides", "dtype", "checked_strides", "where")

    def __init__(self, name: str, arg: int, meta: dict[str, Any], where: str = ""):
        self.name = name
        self.arg = arg
        #: What the layout is for, in errors (the sizes of a kernel for every size).
        self.where = where
        self.shape = torch.Size(meta["shape"])
        self.strides = tuple(meta["strides"])
        self.dtype = _TORCH_DTYPES[meta["dtype"]]
        # Strides of size-1 dimensions are never used to address memory.
        self.checked_strides = tuple(
            s if d > 1 else None for d, s in zip(meta["shape"], meta["strides"])
        )

    def check(self, graph: str, value: Any) -> torch.Tensor:
        # Fast path: exactly the compiled dtype, shape and strides on the CPU (a dense tensor,
        # since only those have strides).
        if (
            isinstance(value, torch.Tensor)
            and value.dtype is self.dtype
            and value.shape == self.shape
            and value.is_cpu
            and value.layout == torch.strided
            and value.stride() == self.strides
        ):
            return value
        return self._check_slowly(graph, value)

    def _check_slowly(self, graph: str, value: Any) -> torch.Tensor:
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
                f"{_format(self.shape, self.strides, self.dtype)} on cpu{self.where}, got "
                f"{_format(value.shape, value.stride(), value.dtype)} on {value.device}"
            )
        return value


class Checks:
    """The checks of a kernel's arguments (one :class:`InputSpec` each). A model passes every
    weight on every call (213 tensors for mobilenet_v3_small), and checking each in Python
    costs about 0.5 µs, a fifth of that model's call. So the arguments that last passed the
    checks are remembered as Dynamo's C++ tensor check (`TensorGuards`: dispatch keys, dtype,
    device, requires_grad, sizes and strides, each exactly as they were; 74 ns a tensor), and
    arguments it accepts are not checked again. It is stricter than the checks in Python (a
    size-1 dimension's stride, requires_grad), so an argument it rejects is checked in
    Python, which accepts it or raises the error naming it; accepted, it becomes the new
    check, at most `MAX_GUARDS` times. Building one costs about a check in Python, so the
    first arguments to pass are only checked: a kernel for every size has checks per size, and
    a decoder meets most sizes once."""

    __slots__ = ("graph", "specs", "guard", "built", "passed")

    def __init__(self, graph: str, specs: list[InputSpec]):
        self.graph = graph
        self.specs = specs
        #: Dynamo's C++ tensor check, how many times it was built, and whether arguments
        #: passed the checks in Python before.
        self.guard: Any = None
        self.built = 0
        self.passed = False

    def __call__(self, values: Sequence[Any]) -> None:
        if self.guard is not None and self.guard.check(*values):
            return
        for spec, value in zip(self.specs, values):
            spec.check(self.graph, value)
        if self.passed and self.built < MAX_GUARDS:
            self.built += 1
            self.guard = _guard(values)
        self.passed = True


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
        outputs = [
            (torch.Size(m["shape"]), tuple(m["strides"]), _TORCH_DTYPES[m["dtype"]]) for m in metas
        ]
        # Per output, what allocates it: fxmlir's allocator (large ones), else torch.
        sizes = kernel.output_bytes if kernel is not None else [0] * len(outputs)
        self.allocators = [
            functools.partial(_pooled, kernel, i)
            if size >= POOLED_OUTPUT_BYTES
            else functools.partial(torch.empty_strided, shape, strides, dtype=dtype)
            for i, (size, (shape, strides, dtype)) in enumerate(zip(sizes, outputs))
        ]

        self.pick = _picker([spec.arg for spec in self.inputs])
        #: What runs the kernel's collectives (its calls back into Python), if it has any.
        self.host = (
            collectives.HostCalls(doc, kernel.host_calls)
            if kernel is not None and kernel.host_calls
            else None
        )
        self.checks = Checks(self.name, self.inputs)

    @property
    def timings(self) -> list[tuple[str, float]]:
        return self.kernel.timings if self.kernel is not None else []

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        if self.kernel is None:
            results: list[Any] = []
        else:
            values = self.pick(args)
            self.checks(values)
            pointers = list(map(torch.Tensor.data_ptr, values))
            results = [allocate() for allocate in self.allocators]
            pointers.extend(t.data_ptr() for t in results)
            self.kernel.run(pointers, self.host)
        return self._outputs(args, results)

    def _outputs(self, args: Sequence[Any], results: list[Any]) -> list[Any]:
        """The graph's outputs: the computed ``results``, arguments returned as they are, and
        values the export computed."""
        out = []
        for kind, value in self.plan.outputs:
            if kind == "kernel":
                out.append(results[value])
            elif kind == "arg":
                out.append(args[value])
            else:
                out.append(value)
        return out


class DynamicGraph(CompiledGraph):
    """A graph compiled once for every size its symbols take (``Kernel.symbols``). Each call
    reads the symbols' values off the arguments (each is the size of a dimension of an
    input), has the kernel say the layouts they give (``Kernel.sized``, which raises a
    ``CallError`` for a value outside a symbol's range), checks the inputs against them and
    allocates the outputs as they say."""

    def __init__(self, plan: Plan, kernel: _fxmlir.Kernel):
        doc = plan.document
        self.name = doc["name"]
        self.plan = plan
        self.kernel = kernel
        self.input_names = [i["name"] for i in doc["inputs"]]
        self.input_dtypes = [_TORCH_DTYPES[i["meta"]["dtype"]] for i in doc["inputs"]]
        self.output_dtypes = [_TORCH_DTYPES[_meta_of(doc, r)["dtype"]] for r in doc["outputs"]]
        # Where each symbol's value is read: (input, dimension) of a dimension that is it.
        self.readers = []
        for symbol in kernel.symbols:
            self.readers.append(
                next(
                    (k, d)
                    for k, i in enumerate(doc["inputs"])
                    for d, size in enumerate(i["meta"]["shape"])
                    if size == symbol
                )
            )
        self.pick = _picker(plan.input_args)
        self.host = collectives.HostCalls(doc, kernel.host_calls) if kernel.host_calls else None
        #: Input checks and output allocators by sizes, the most recent last.
        self.layouts: dict[tuple[int, ...], tuple[Checks, list[Callable]]] = {}

    def sizes_of(self, args: Sequence[Any], values: Sequence[Any] | None = None) -> tuple[int, ...]:
        """The values of the kernel's size symbols in a call with ``args`` (whose kernel
        arguments are ``values``, if picked already)."""
        if values is None:
            values = self.pick(args)
        try:
            return tuple(values[k].shape[d] for k, d in self.readers)
        except (AttributeError, IndexError):
            raise self._unreadable(values) from None

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        values = self.pick(args)
        sizes = self.sizes_of(args, values)
        layout = self.layouts.get(sizes)
        if layout is None:
            layout = self._layout(sizes)
        checks, allocators = layout
        checks(values)
        results = [allocate() for allocate in allocators]
        pointers = list(map(torch.Tensor.data_ptr, values))
        pointers.extend(t.data_ptr() for t in results)
        self.kernel.run(pointers, self.host, list(sizes))
        return self._outputs(args, results, list(sizes))

    def _unreadable(self, values: Sequence[Any]) -> CallError:
        """The error for arguments the sizes cannot be read off: one is not a tensor, or has
        fewer dimensions than compiled."""
        for name, arg, value, meta in zip(
            self.input_names, self.plan.input_args, values, self.plan.document["inputs"]
        ):
            where = f"graph `{self.name}`, input `{name}` (argument {arg})"
            if not isinstance(value, torch.Tensor):
                return CallError(f"{where}: expected a tensor, got {type(value).__name__}")
            rank = len(meta["meta"]["shape"])
            if value.dim() != rank:
                return CallError(f"{where}: compiled for {rank} dimensions, got {value.dim()}")
        return CallError(f"graph `{self.name}`: the sizes cannot be read off the arguments")

    def _layout(self, sizes: tuple[int, ...]) -> tuple[Checks, list[Callable]]:
        """The checks of the inputs and the allocators of the outputs at ``sizes`` (the kernel
        says the layouts, or raises a ``CallError`` for a size outside its range); the last
        ``MAX_LAYOUTS`` are kept."""
        inputs, outputs = self.kernel.sized(list(sizes))
        specs = [
            InputSpec(
                name,
                arg,
                {"shape": shape, "strides": strides, "dtype": DTYPES[dtype]},
                f" at sizes {self._named(list(sizes))}",
            )
            for name, arg, dtype, (shape, strides) in zip(
                self.input_names, self.plan.input_args, self.input_dtypes, inputs
            )
        ]
        allocators: list[Callable] = []
        for i, ((shape, strides), dtype) in enumerate(zip(outputs, self.output_dtypes)):
            if math.prod(shape) * dtype.itemsize >= POOLED_OUTPUT_BYTES:
                allocators.append(functools.partial(_pooled, self.kernel, i, list(sizes)))
            else:
                allocate = functools.partial(torch.empty_strided, shape, strides, dtype=dtype)
                allocators.append(allocate)
        if len(self.layouts) >= MAX_LAYOUTS:
            self.layouts.pop(next(iter(self.layouts)))
        layout = (Checks(self.name, specs), allocators)
        self.layouts[sizes] = layout
        return layout

    def _named(self, sizes: list[int]) -> str:
        return ", ".join(f"{s}={v}" for s, v in zip(self.kernel.symbols, sizes))

    def _outputs(
        self, args: Sequence[Any], results: list[Any], sizes: list[int] | None = None
    ) -> list[Any]:
        out = super()._outputs(args, results)
        values = dict(zip(self.kernel.symbols, sizes or []))
        return [_concrete(v, values) if isinstance(v, torch.SymInt) else v for v in out]


def _concrete(value: torch.SymInt, sizes: dict[str, int]) -> int:
    """A size the graph returns, at the call's sizes."""
    expr = value.node.expr
    return int(expr.xreplace({s: sizes[str(s)] for s in expr.free_symbols}))


class ExecutedGraph(CompiledGraph):
    """A graph a plugin's executor runs (see :class:`fxmlir.plugins.Executor`), behind the
    same call contract as fxmlir's kernels: the arguments are checked against the graph's
    inputs, the outputs allocated as recorded, and an executor that raises gives a
    ``CallError`` naming it."""

    def __init__(self, plan: Plan, run: Callable[[list[Any], list[Any]], None], origin: str):
        super().__init__(plan, None)
        self.run = run
        self.origin = origin

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        values = list(self.pick(args)) if self.inputs else []
        self.checks(values)
        results = [allocate() for allocate in self.allocators]
        try:
            self.run(values, results)
        except Exception as e:
            raise CallError(f"{self.name}: the {self.origin} executor raised {e!r}") from e
        return self._outputs(args, results)


def execute(
    plan: Plan, settings: Settings, executor: Any, origin: str
) -> Callable[[], tuple[CompiledGraph, str]]:
    """The graph of ``plan`` run by a plugin's ``executor``: the module after its stage (text
    and bytecode) and the graph's signature go to the executor's ``build``, whose callable
    runs the graph (on the calling thread: the vendor's compiler decides how to run)."""
    if not plan.document["outputs"]:
        return lambda: (CompiledGraph(plan, None), "compiled")
    from .plugins import Module

    text = plan.to_json(indent=1 if settings.dump_dir else None)
    # One thread: what runs the module, and on how many threads, is the executor's to decide.
    mlir, bytecode = _fxmlir.lower_to_stage(
        text,
        executor.stage,
        settings.pipeline,
        settings.dump_dir,
        settings.target,
        1,
        settings.extensions,
    )
    doc = plan.document
    module = Module(
        doc["name"],
        executor.stage,
        mlir,
        bytecode,
        [i["meta"] for i in doc["inputs"]],
        [_meta_of(doc, ref) for ref in doc["outputs"]],
    )
    # The graph without its name, which differs between identical graphs compiled apart.
    graph = json.dumps({**doc, "name": ""}, sort_keys=True)
    key = (origin, executor.build, executor.stage, settings.extensions, settings.target, graph)
    run = _executed.get(key)
    source = "memory"
    if run is None:
        try:
            run = executor.build(module)
        except Exception as e:
            raise _fxmlir.CompileError(f"{doc['name']}: the {origin} executor raised {e!r}") from e
        if len(_executed) >= EXECUTED_LIMIT:
            del _executed[next(iter(_executed))]
        _executed[key] = run
        source = "compiled"
    executed = ExecutedGraph(plan, run, origin)
    return lambda: (executed, source)


#: How many graphs an executor built this process keeps, oldest dropped first.
EXECUTED_LIMIT = 128
#: Executor-built graphs by what they were built from (the executor and its plugin's key, the
#: target and the graph): an identical graph reuses its callable.
_executed: dict[tuple, Callable[[list[Any], list[Any]], None]] = {}


def _picker(picks: list[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """What picks a kernel's arguments (the call's arguments at ``picks``), in one C call."""
    if len(picks) > 1:
        return operator.itemgetter(*picks)
    return lambda args: [args[i] for i in picks]


def _guard(values: Sequence[torch.Tensor]) -> Any:
    """Dynamo's C++ check that tensors have exactly the properties ``values`` have, or None
    when this torch has none (or builds none for them)."""
    if TensorGuards is None:
        return None
    try:
        return TensorGuards(
            *values,
            dynamic_dims_sizes=[list(v.shape) for v in values],
            dynamic_dims_strides=[list(v.stride()) for v in values],
        )
    except (TypeError, RuntimeError) as e:
        log.debug("no C++ check of the arguments (%s): checking each call in Python", e)
        return None


def _pooled(kernel: _fxmlir.Kernel, index: int, sizes: Sequence[int] = ()) -> torch.Tensor:
    """A new tensor for output ``index`` (at ``sizes``, for a kernel with size symbols) in a
    block of fxmlir's allocator."""
    return torch.from_dlpack(kernel.output_buffer(index, list(sizes)))


def _meta_of(doc: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    for node in doc["nodes"]:
        if node["name"] == ref["node"]:
            return node["outputs"][ref["index"]]
    for constant in doc["constants"]:
        if constant["name"] == ref["node"]:
            return constant["meta"]
    raise CallError(f"output `{ref['node']}` has no metadata")


@dataclasses.dataclass(frozen=True)
class Settings:
    """How graphs compile, read from ``fxmlir.config`` once per Dynamo graph: the named
    pipeline, the dump and cache directories, the target spec, and the stages and dialects
    added (:func:`fxmlir.stages.extensions`' JSON, or ``None``)."""

    pipeline: str = "default"
    dump_dir: str | None = None
    cache_dir: str | None = None
    target: str = "host"
    extensions: str | None = None
    #: Compare every call with eager PyTorch (``config.golden``).
    golden: bool = False
    #: Check indices and integer divisors at run time (``config.checks``).
    checks: bool = True


def build(
    plan: Plan,
    settings: Settings,
    threads: int,
    background: bool = False,
    low_priority: bool = False,
) -> Callable[[], tuple[CompiledGraph, str]]:
    """Starts the compile of an exported plan (unless it needs no kernel) with ``settings``,
    for the CPU its target names, whose large loops split into ``threads`` chunks (torch's
    intra-op thread count) unless the target says ``threads=``. Returns a function giving
    the graph wrapped for calling and where its kernel came from: ``"compiled"``,
    ``"memory"`` (an identical graph compiled earlier in this process) or ``"disk"`` (the
    compile cache under ``settings.cache_dir``). The compile runs before this returns, or with
    ``background`` on a thread of its own, which that function waits for (and whose error it
    raises, on every call); ``low_priority`` runs that thread at the lowest scheduling
    priority. Identity ignores the graph's name, node names and source lines;
    while dumping, nothing is reused, so that every graph's dumps are written."""
    if not plan.document["outputs"]:
        return lambda: (CompiledGraph(plan, None), "compiled")
    # Compact unless it is dumped: the text is serialised even when the kernel is reused.
    text = plan.to_json(indent=1 if settings.dump_dir else None)
    job = _fxmlir.compile(
        text,
        settings.pipeline,
        settings.dump_dir,
        settings.cache_dir or None,
        settings.target,
        threads,
        background,
        low_priority,
        settings.extensions,
        settings.checks,
    )
    if not background:
        return functools.partial(_wrap, plan, job.wait())
    _unfinished.add(job)
    return Compiling(plan, job)


#: Background compiles not yet waited for: the interpreter waits for them at exit, so that no
#: compile thread is still inside LLVM while the process tears LLVM down.
_unfinished: set[Any] = set()


@atexit.register
def _wait_for_compiles() -> None:
    for job in list(_unfinished):
        with contextlib.suppress(_fxmlir.FxmlirError):
            job.wait()


class Compiling:
    """A background compile: calling it waits for the kernel (see :func:`build`)."""

    def __init__(self, plan: Plan, job: Any):
        self.plan = plan
        self.job = job

    def done(self) -> bool:
        """Whether the compile has finished (or failed): calling waits no more."""
        return self.job.done()

    def __call__(self) -> tuple[CompiledGraph, str]:
        try:
            kernel = self.job.wait()
        finally:
            _unfinished.discard(self.job)
        return _wrap(self.plan, kernel)


def _wrap(plan: Plan, kernel: _fxmlir.Kernel) -> tuple[CompiledGraph, str]:
    for warning in kernel.warnings:
        log.warning("%s: %s", kernel.name, warning)
    total = dict(kernel.timings).get("total", 0.0)
    if kernel.source == "compiled":
        log.info("compiled graph %s in %.1f ms", kernel.name, total)
    else:
        log.info("graph %s: kernel from %s in %.1f ms", kernel.name, kernel.source, total)
    if kernel.dumped:
        log.info("dumps of %s: %s", kernel.name, ", ".join(kernel.dumped))
    graph = DynamicGraph(plan, kernel) if kernel.symbols else CompiledGraph(plan, kernel)
    return graph, kernel.source
