"""The Dynamo backend. ``torch.compile(model, backend="fxmlir")`` lands in
:func:`fxmlir_backend`, which turns Dynamo's graph into functional ATen graphs with the core
ATen decompositions (minus the ops fxmlir lowers natively), by its own trace for an inference
graph (:mod:`fxmlir.inference`) or by aot_autograd for any other, and compiles each."""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd

from . import _fxmlir, aliasing, hoist, inference, interchange, partition, runtime
from .config import config

log = logging.getLogger("fxmlir")

_counter = itertools.count()
_records = itertools.count()
_counter_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    """One graph compiled in this process: its name, ATen node count, stage timings in ms
    (ending with ``total``; ``cache-load`` and ``total`` for a kernel from the disk cache; empty
    when the kernel of an identical graph in this process was reused) and the dump files
    written."""

    seq: int
    name: str
    nodes: int
    timings: tuple[tuple[str, float], ...]
    dumped: tuple[str, ...]
    #: Where the kernel came from: ``"compiled"``, ``"memory"`` (an identical graph compiled
    #: earlier in this process) or ``"disk"`` (the compile cache, ``config.cache_dir``).
    source: str = "compiled"

    @property
    def cached(self) -> bool:
        """No compile happened: the kernel came from memory or from disk."""
        return self.source != "compiled"

    @property
    def total_ms(self) -> float:
        return dict(self.timings).get("total", 0.0)


#: The most recent compiles in this process, oldest first.
history: collections.deque[CompileRecord] = collections.deque(maxlen=1000)


def _next_name() -> str:
    with _counter_lock:
        return f"graph_{next(_counter)}"


@functools.cache
def supported_ops() -> frozenset[str]:
    """ATen overloads with a native lowering."""
    return frozenset(op for op, _family in _fxmlir.supported_ops())


@functools.cache
def decompositions() -> dict[Any, Callable]:
    """Core ATen decompositions, except for ops fxmlir lowers natively (which are faster whole)."""
    from torch._decomp import core_aten_decompositions

    native = supported_ops()
    return {op: fn for op, fn in core_aten_decompositions().items() if str(op) not in native}


class GraphCompiler:
    """Compiles one functional ATen graph. Static graphs compile at once; graphs with symbolic
    sizes compile on each call with new concrete sizes (cached per binding)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        pipeline: str,
        dump_dir: str | None,
        cache_dir: str | None,
    ):
        self.gm = gm
        self.pipeline = pipeline
        self.dump_dir = dump_dir
        self.cache_dir = cache_dir
        self.name = _next_name()
        self.dynamic = interchange.is_dynamic(gm)
        self.specialized: dict[tuple, runtime.CompiledGraph] = {}
        self.static: runtime.CompiledGraph | None = None
        if not self.dynamic:
            self.static = self._build({}, self.name)

    def _build(self, bindings: dict[Any, int], name: str) -> runtime.CompiledGraph:
        plan = interchange.export(self.gm, name, bindings)
        compiled, source = runtime.build(plan, self.pipeline, self.dump_dir, self.cache_dir)
        kernel = compiled.kernel
        history.append(
            CompileRecord(
                seq=next(_records),
                name=name,
                nodes=len(plan.document["nodes"]),
                timings=tuple(kernel.timings) if kernel and source != "memory" else (),
                dumped=tuple(kernel.dumped) if kernel else (),
                source=source,
            )
        )
        return compiled

    def __call__(self, args: list[Any]) -> list[Any]:
        compiled = self.static
        if compiled is None:
            bindings = interchange.symbol_bindings(self.gm, args)
            key = tuple(sorted((str(k), v) for k, v in bindings.items()))
            compiled = self.specialized.get(key)
            if compiled is None:
                name = f"{self.name}_s{len(self.specialized)}"
                compiled = self._build(bindings, name)
                self.specialized[key] = compiled
        return compiled(args)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """aot_autograd's compiler hook: a callable for one functional ATen graph. It takes the
    arguments as one list (aot_autograd's boxed convention), which lets aot_autograd free them."""
    return _compile(gm, hoist.static_inputs(gm))


def _compile(gm: torch.fx.GraphModule, static: frozenset[int]) -> Callable:
    """A boxed callable for the functional ATen graph ``gm`` whose inputs at positions
    ``static`` are parameters or buffers.

    A graph fxmlir can lower whole compiles as one kernel, minus what it computes from weights
    alone (see :mod:`fxmlir.hoist`). Otherwise the supported nodes are
    grouped into compiled partitions and the rest run eagerly between them, unless
    ``config.fallback == "error"``, which raises instead. Outputs that share memory are
    rebuilt as views after each call (see :mod:`fxmlir.aliasing`)."""
    aliases = aliasing.aliases(gm)
    if aliases:
        return aliasing.rebuilding(_compile(aliasing.without(gm, aliases), static), aliases)
    strict = config.check_fallback() == "error"
    supported = supported_ops()
    pipeline, dump_dir, cache_dir = config.pipeline, config.dump_dir, config.cache_dir
    if not partition.unsupported_nodes(gm, supported):
        try:
            whole = None
            if config.hoist and not interchange.is_dynamic(gm):
                whole = hoist.hoist(
                    gm,
                    static,
                    lambda main: GraphCompiler(main, pipeline, dump_dir, cache_dir),
                )
            if whole is None:
                whole = GraphCompiler(gm, pipeline, dump_dir, cache_dir)
                whole._boxed_call = True
            return whole
        except _fxmlir.FxmlirError:
            if strict:
                raise
    split = partition.partition_and_compile(
        gm, supported, lambda sub: GraphCompiler(sub, pipeline, dump_dir, cache_dir), strict
    )

    def run(args: list[Any]) -> Any:
        return split(*args)

    run._boxed_call = True
    return run


def fxmlir_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """The ``torch.compile`` backend. An inference graph is traced by :mod:`fxmlir.inference`;
    any other goes through aot_autograd."""
    traced = inference.trace(gm, example_inputs, decompositions())
    if traced is not None:
        graph, static = traced
        return inference.unboxed(_compile(graph, static))
    backend = aot_autograd(
        fw_compiler=compile_graph,
        bw_compiler=compile_graph,
        decompositions=decompositions(),
    )
    return backend(gm, example_inputs, **kwargs)
