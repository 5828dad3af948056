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
import operator
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd

from . import (
    _fxmlir,
    inference,
    interchange,
    lowerings,
    partition,
    passes,
    plugins,
    runtime,
    stages,
)
from .config import config
from .passes import aliasing, hoist
from .passes import decompositions as written_out

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

    #: Whether the kernel compiled on a thread of its own (``config.background``) while Dynamo
    #: went on, and how long the first call then waited for it, in ms.
    background: bool = False
    waited_ms: float = 0.0

    #: Problems that did not fail the compile (also logged as warnings): an optimisation stage
    #: skipped (the kernel is correct but slower), compile cache trouble.
    warnings: tuple[str, ...] = ()

    #: The complete spec of the target the kernel was compiled for (``"znver4,l2=1M,threads=2"``;
    #: see ``config.target``).
    target: str = ""

    #: The size symbols of a kernel for every size they take (empty: fixed sizes).
    symbols: tuple[str, ...] = ()

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


def decompositions() -> dict[Any, Callable]:
    """Core ATen decompositions, except for ops with a row in the lowering table
    (:mod:`fxmlir.lowerings`: fxmlir's own or one registered in Python; faster whole), and
    fxmlir's own (:mod:`fxmlir.passes.decompositions`): PyTorch's fused inference fast paths
    and the backward ops core ATen leaves whole."""
    table = dict(_decompositions(lowerings.registered()))
    for collected in plugins.active():
        for op, fn in collected.decompositions.items():
            if fn is None:
                table.pop(op, None)
            else:
                table[op] = fn
    return table


@functools.cache
def _decompositions(whole: frozenset[str]) -> dict[Any, Callable]:
    from torch._decomp import core_aten_decompositions

    core = {op: fn for op, fn in core_aten_decompositions().items() if str(op) not in whole}
    return {**core, **written_out.DECOMPOSITIONS}


#: A graph with symbolic sizes called with at most this many sizes compiles a size on its
#: second call; beyond, its sizes change from call to call and compile in the background.
STABLE_SIZES = 2

#: Calls in a row with one set of sizes after which a graph with a kernel for every size
#: compiles one for those sizes alone (see ``config.specializations``). In a row: a server
#: called with one batch size again and again gains, a decoder whose cache grows by one each
#: call (``generate()``) never repeats a size in a row, and would gain nothing from a kernel
#: for a length it meets once per generation.
HOT_CALLS = 3


class GraphCompiler:
    """Compiles one functional ATen graph. Static graphs compile at once, or with
    ``background`` on a thread of their own (exported at once; :meth:`ready` waits for the
    kernel). Graphs with symbolic sizes are compiled for concrete sizes (cached per binding):
    on the first call with new sizes, or with ``background`` without ever making a call wait
    (see :meth:`_dynamic`)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        settings: runtime.Settings,
        background: bool = False,
    ):
        self.gm = gm
        self.settings = settings
        #: The plugins active at compile time, active again for the sizes compiled later.
        self.plugins = plugins.active()
        #: The complete spec of the target of the last compile started (see ``_start``).
        self.target_spec = ""
        self.name = _next_name()
        self.dynamic = interchange.is_dynamic(gm)
        #: Kernels for one set of sizes each, the most recently used last; at most
        #: ``config.sizes_per_graph`` (see :meth:`_keep`).
        self.specialized: collections.OrderedDict[tuple, runtime.CompiledGraph] = (
            collections.OrderedDict()
        )
        #: Graphs with symbolic sizes: how often each binding was called, the bindings called
        #: again and waiting for a background compile, the one background compile under way
        #: (its binding and build) and the bindings whose compile failed (they run eagerly).
        self.defer = background
        self.seen: collections.Counter[tuple] = collections.Counter()
        self.queued: collections.OrderedDict[tuple, dict[Any, int]] = collections.OrderedDict()
        self.compiling: tuple[tuple, runtime.Compiling] | None = None
        self.failed: set[tuple] = set()
        #: The sizes of the last call of the kernel for every size and how many calls in a row
        #: had them (see :meth:`_hot`).
        self.streak: tuple[tuple | None, int] = (None, 0)
        self.specializations = itertools.count()
        self.static: runtime.CompiledGraph | None = None
        #: The plan and the function that waits for its kernel, while it compiles.
        self.pending: tuple[interchange.Plan, Callable[[], Any]] | None = None
        #: The kernel for every size, for a graph with symbolic sizes that has one.
        self.symbolic: runtime.DynamicGraph | None = None
        if self.dynamic:
            compiled = self._compile_symbolic() if config.symbolic else None
            if isinstance(compiled, runtime.DynamicGraph):
                self.symbolic = compiled
            elif compiled is not None:
                # Every symbolic size was fixed by the guards: a kernel of fixed sizes.
                self.static = compiled
            return
        plan = interchange.export(gm, self.name, {})
        finish = self._start(plan, background)
        if background:
            self.pending = (plan, finish)
        else:
            self.static = self._record(plan, *finish())

    def _compile_symbolic(self) -> runtime.CompiledGraph | None:
        """The graph compiled once for every size its symbols take, if every op of it takes
        symbolic sizes and every size is an expression the interchange writes over symbols
        that are sizes of its inputs; else None (it compiles per size), with the reason
        logged."""
        # The batch ops that take no other symbolic sizes (a resize called whole) say so when
        # lowered with them, and the graph then compiles per size.
        dynamic = frozenset(_fxmlir.dynamic_ops()) | frozenset(_fxmlir.batch_ops())
        others = sorted(
            {
                str(n.target)
                for n in self.gm.graph.nodes
                if n.op == "call_function"
                # Size arithmetic is evaluated by the export, getitem read off its source.
                and not isinstance(n.meta.get("val"), (int, torch.SymInt))
                and not interchange.is_size_float(n)
                and n.target is not operator.getitem
            }
            - dynamic
        )
        if others:
            log.info(
                "%s compiles per size: %s take no symbolic sizes", self.name, ", ".join(others)
            )
            return None
        try:
            with plugins.restored(self.plugins):
                plan = interchange.export(self.gm, self.name, interchange.Symbolic())
            return self._record(plan, *self._start(plan, False)())
        except _fxmlir.FxmlirError as e:
            log.info("%s compiles per size: %s", self.name, str(e).splitlines()[0])
            return None

    def _start(
        self, plan: interchange.Plan, background: bool, low_priority: bool = False
    ) -> Callable[[], tuple[runtime.CompiledGraph, str]]:
        # The thread count is read here: with OpenMP it is a setting of the calling thread.
        threads = torch.get_num_threads()
        self.target_spec = _fxmlir.target_info(self.settings.target, threads)["spec"]
        vendor = plugins.executor(self.plugins)
        if vendor is not None:
            return runtime.execute(plan, self.settings, *vendor)
        return runtime.build(plan, self.settings, threads, background, low_priority)

    def ready(self) -> None:
        """Waits for the background compile, if one is under way; raises its error (again on
        every call, if it failed)."""
        if self.pending is None:
            return
        plan, finish = self.pending
        start = time.perf_counter()
        compiled, source = finish()
        waited_ms = (time.perf_counter() - start) * 1e3
        self.pending = None
        self.static = self._record(plan, compiled, source, True, waited_ms)

    def _build(self, bindings: dict[Any, int], name: str) -> runtime.CompiledGraph:
        with plugins.restored(self.plugins):
            plan = interchange.export(self.gm, name, bindings)
        return self._record(plan, *self._start(plan, False)())

    def _record(
        self,
        plan: interchange.Plan,
        compiled: runtime.CompiledGraph,
        source: str,
        background: bool = False,
        waited_ms: float = 0.0,
    ) -> runtime.CompiledGraph:
        """Appends the compile to :data:`history`; returns ``compiled``."""
        kernel = compiled.kernel
        history.append(
            CompileRecord(
                seq=next(_records),
                name=plan.document["name"],
                nodes=len(plan.document["nodes"]),
                timings=tuple(kernel.timings) if kernel and source != "memory" else (),
                dumped=tuple(kernel.dumped) if kernel else (),
                source=source,
                background=background,
                waited_ms=waited_ms,
                warnings=tuple(kernel.warnings) if kernel and source != "memory" else (),
                target=self.target_spec,
                symbols=tuple(s["name"] for s in plan.document.get("symbols", ())),
            )
        )
        return compiled

    def __call__(self, args: list[Any]) -> list[Any]:
        if self.pending is not None:
            self.ready()
        out = self._dynamic(args) if self.static is None else self.static(args)
        if self.settings.golden:
            self._golden(args, out)
        return out

    def _golden(self, args: list[Any], out: list[Any]) -> None:
        """``config.golden``: the graph run eagerly on the same arguments must give the same
        outputs; else ``GoldenMismatch`` naming the first op (node, source line) whose value
        differs, found by compiling the graph up to each node in turn."""
        with torch.no_grad():
            expected = self.gm(*args)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        for i, (actual, wanted) in enumerate(zip(out, expected)):
            if not isinstance(wanted, torch.Tensor) or _golden_close(actual, wanted):
                continue
            from . import debug

            with plugins.restored(self.plugins), config.patch(golden=False, background=False):
                first = debug.first_divergence(self.gm, args)
            raise GoldenMismatch(
                f"{self.name}: output {i} differs from eager PyTorch; "
                + (first or "every op agrees alone, so their combination differs")
            )

    def _dynamic(self, args: list[Any]) -> list[Any]:
        """A call of a graph with symbolic sizes. With a kernel for every size
        (``self.symbolic``), that kernel runs it, unless its sizes have a kernel of their own
        (see :meth:`_hot`). Otherwise, without ``background``, new sizes compile
        before their first call runs. With it, a size's first call runs eagerly (the ATen
        graph, in PyTorch), and its second call compiles it, unless the graph has been called
        with more than ``STABLE_SIZES`` sizes: then the sizes change from call to call (a
        decoder's cache length in ``generate()``, which compiled a kernel per token: a small
        Llama's first 16 tokens took 6.7 s against eager's 17 ms), and sizes that recur queue
        for a compile on a thread of its own at the lowest scheduling priority, one at a time,
        while their calls run eagerly, never waiting for it."""
        self._collect()
        if self.symbolic is not None:
            sizes = self.symbolic.sizes_of(args)
            compiled = self._used(sizes)
            if compiled is None:
                self._hot(sizes, args)
                return self.symbolic(args)
            return compiled(args)
        bindings = interchange.symbol_bindings(self.gm, args)
        key = tuple(sorted((str(k), v) for k, v in bindings.items()))
        compiled = self._used(key)
        if compiled is None and key not in self.failed:
            self.seen[key] += 1
            if not self.defer or (self.seen[key] > 1 and len(self.seen) <= STABLE_SIZES):
                compiled = self._specialize(key, bindings, background=False)
            elif self.seen[key] > 1 and (self.compiling is None or self.compiling[0] != key):
                self.queued[key] = bindings
                self._advance()
        if compiled is not None:
            return compiled(args)
        out = self.gm(*args)
        # As the compiled graph returns them: a list, even of one output.
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _used(self, key: tuple) -> runtime.CompiledGraph | None:
        """The kernel for sizes ``key``, if there is one, marked as the most recently used."""
        compiled = self.specialized.get(key)
        if compiled is not None:
            self.specialized.move_to_end(key)
        return compiled

    def _keep(self, key: tuple, compiled: runtime.CompiledGraph) -> runtime.CompiledGraph:
        """Keeps the kernel for sizes ``key``, dropping the least recently used beyond
        ``config.sizes_per_graph`` (their sizes run as before they compiled, and may compile
        again): a graph called with ever new sizes holds a bounded number of kernels."""
        self.specialized[key] = compiled
        while len(self.specialized) > max(config.sizes_per_graph, 1):
            dropped, _ = self.specialized.popitem(last=False)
            self.seen.pop(dropped, None)
        return compiled

    def _hot(self, key: tuple, args: list[Any]) -> None:
        """Counts a call of sizes ``key`` the kernel for every size serves; the
        ``HOT_CALLS``-th call in a row of sizes starts their own kernel's compile (on a thread
        of its own with ``background``), for at most ``config.specializations`` sizes."""
        last, calls = self.streak
        calls = calls + 1 if key == last else 1
        self.streak = (key, calls)
        started = len(self.specialized) + len(self.queued) + (self.compiling is not None)
        if calls != HOT_CALLS or key in self.failed:
            return
        if started >= config.specializations:
            return
        bindings = interchange.symbol_bindings(self.gm, args)
        if self.defer:
            self.queued[key] = bindings
            self._advance()
            return
        try:
            self._specialize(key, bindings, background=False)
        except _fxmlir.FxmlirError as e:
            self._give_up(key, e)

    def _specialize(
        self, key: tuple, bindings: dict[Any, int], background: bool
    ) -> runtime.CompiledGraph | None:
        """Compiles the graph for ``bindings`` (``background``: starts the compile, at the
        lowest priority); ``None`` while that runs or, with ``self.defer``, if it failed (the
        sizes then run eagerly; without it the error is raised, as it always was)."""
        try:
            with plugins.restored(self.plugins):
                plan = interchange.export(
                    self.gm, f"{self.name}_s{next(self.specializations)}", bindings
                )
            build = self._start(plan, background, low_priority=background)
            if isinstance(build, runtime.Compiling):
                self.compiling = (key, build)
                return None
            compiled = self._keep(key, self._record(plan, *build()))
            return compiled
        except _fxmlir.FxmlirError as e:
            if not self.defer:
                raise
            self._give_up(key, e)
            return None

    def _give_up(self, key: tuple, error: Exception) -> None:
        log.info("%s: sizes %s run eagerly: their compile failed (%s)", self.name, key, error)
        self.failed.add(key)

    def _advance(self) -> None:
        """Starts the compile of the longest-queued sizes, unless one is under way."""
        while self.compiling is None and self.queued:
            key, bindings = self.queued.popitem(last=False)
            self._specialize(key, bindings, background=True)

    def _collect(self) -> None:
        """Takes the kernel of the background compile for new sizes once it is ready."""
        if self.compiling is None or not self.compiling[1].done():
            return
        key, build = self.compiling
        self.compiling = None
        try:
            self._keep(key, self._record(build.plan, *build(), background=True))
        except _fxmlir.FxmlirError as e:
            self._give_up(key, e)
        self._advance()


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """aot_autograd's compiler hook: a callable for one functional ATen graph. It takes the
    arguments as one list (aot_autograd's boxed convention), which lets aot_autograd free them."""
    return _compile(gm, hoist.static_inputs(gm))


class GoldenMismatch(_fxmlir.FxmlirError):
    """A compiled graph's output differs from eager PyTorch's (``config.golden``)."""


def _golden_close(actual: Any, expected: torch.Tensor) -> bool:
    """Whether a compiled output is eager's to the precision of its dtype: relative to the
    largest eager value, 1e-4 for 32- and 64-bit floats, 2e-2 for halves; exact otherwise."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    if not expected.is_floating_point():
        return bool(torch.equal(actual, expected))
    tolerance = 2e-2 if expected.element_size() == 2 else 1e-4
    scale = max(expected.double().abs().max().item(), 1.0) if expected.numel() else 1.0
    return bool(
        torch.allclose(
            actual.double(),
            expected.double(),
            rtol=tolerance,
            atol=tolerance * scale,
            equal_nan=True,
        )
    )


def _checked_target(spec: str) -> str:
    """``spec`` if it names a target whose code runs here; else ``TargetError``, whatever the
    fallback mode: a target that cannot be compiled for is a setting to fix, not an op to run
    eagerly."""
    reason = _fxmlir.target_info(spec)["runs_here"]
    if reason is not None:
        raise _fxmlir.TargetError(f"fxmlir.config.target: {reason}")
    return spec


def _checked_extensions() -> str | None:
    """The stages, dialects and native plugins ``fxmlir.config`` and the active plugins add
    (and the plugins' key), as the compiles take them, once they apply to the pipeline, parse
    and load; else ``CompileError`` naming the stage, dialect or native plugin, whatever the
    fallback mode (like a bad target: a setting to fix)."""
    active = plugins.active()
    pipeline = config.pipeline
    added = stages.extensions(
        [*config.stages, *(e for c in active for e in c.stages)],
        [
            *config.dialects,
            *((f"plugin `{c.plugin.name}`", d) for c in active for d in c.dialects),
        ],
        "\n".join(c.key for c in active),
        config.pass_plugins,
        config.dialect_plugins,
    )
    if added is not None:
        try:
            _fxmlir.check_extensions(pipeline, added)
        except _fxmlir.CompileError as e:
            if not active:
                raise
            names = ", ".join(f"`{c.plugin.name}`" for c in active)
            raise _fxmlir.CompileError(f"{e} (with the stages of plugins {names})") from e
    return added


def _run_graph_passes(gm: torch.fx.GraphModule) -> None:
    """The active plugins' FX passes over ``gm``, in order; one that raises is a
    ``PluginError`` naming its plugin."""
    for collected in plugins.active():
        for graph_pass in collected.graph_passes:
            try:
                graph_pass(gm)
            except Exception as e:
                raise plugins.PluginError(
                    f"plugin `{collected.plugin.name}`: graph pass "
                    f"{getattr(graph_pass, '__name__', graph_pass)!r} raised {e!r}"
                ) from e
            gm.recompile()


def _compile(gm: torch.fx.GraphModule, static: frozenset[int]) -> Callable:
    """A boxed callable for the functional ATen graph ``gm`` whose inputs at positions
    ``static`` are parameters or buffers.

    A graph fxmlir can lower whole compiles as one kernel, after the weight rewrites, minus
    what it computes from weights alone (see :func:`fxmlir.passes.run`); with
    ``config.background`` the kernel compiles on a thread of its own (see :class:`_Pending`).
    Otherwise, or when that compile fails, the supported nodes are grouped into compiled
    partitions and the rest run eagerly between them, unless ``config.fallback == "error"``,
    which raises instead. Outputs that share memory are rebuilt as views after each call (see
    :mod:`fxmlir.passes.aliasing`)."""
    _run_graph_passes(gm)
    aliases = aliasing.aliases(gm)
    if aliases:
        return aliasing.rebuilding(_compile(aliasing.without(gm, aliases), static), aliases)
    strict = config.check_fallback() == "error"
    settings = runtime.Settings(
        config.pipeline,
        config.dump_dir,
        config.cache_dir,
        _checked_target(config.target),
        _checked_extensions(),
        config.golden,
        config.checks,
    )
    background = config.background and not strict

    def partitioned() -> Callable:
        split = partition.partition_and_compile(
            gm,
            lambda sub: GraphCompiler(sub, settings),
            strict,
        )

        def run(args: list[Any]) -> Any:
            return split(*args)

        run._boxed_call = True
        return run

    if partition.unsupported_nodes(gm):
        return partitioned()
    compilers: list[GraphCompiler] = []

    def compile_whole(main: torch.fx.GraphModule) -> GraphCompiler:
        compiler = GraphCompiler(main, settings, background)
        compilers.append(compiler)
        return compiler

    try:
        whole = passes.run(gm, static, settings.target, config, compile_whole)
        if whole is None:
            whole = compile_whole(gm)
            whole._boxed_call = True
    except _fxmlir.FxmlirError:
        if strict:
            raise
        return partitioned()
    if any(c.pending for c in compilers):
        return _Pending(whole, compilers, partitioned)
    return whole


class _Pending:
    """A whole graph's callable while its kernel compiles on a thread of its own. The first
    call waits for the compile; if it failed, the graph is compiled in partitions then (as it
    would have been at compile time) and that runs instead."""

    def __init__(
        self,
        whole: Callable[[list[Any]], Any],
        compilers: list[GraphCompiler],
        fallback: Callable[[], Callable[[list[Any]], Any]],
    ):
        self.whole = whole
        self.compilers = compilers
        self.fallback = fallback
        self.target: Callable[[list[Any]], Any] | None = None
        self.lock = threading.Lock()
        # On the instance: wrappers such as ``torch._dynamo.disable`` copy its ``__dict__``.
        self._boxed_call = True

    def _resolve(self) -> Callable[[list[Any]], Any]:
        try:
            for compiler in self.compilers:
                compiler.ready()
        except _fxmlir.FxmlirError as e:
            log.info("%s: compiling in partitions (%s)", self.compilers[0].name, e)
            return self.fallback()
        return self.whole

    def __call__(self, args: list[Any]) -> Any:
        target = self.target
        if target is None:
            with self.lock:
                if self.target is None:
                    self.target = self._resolve()
                target = self.target
        return target(args)


def fxmlir_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """The ``torch.compile`` backend, with the plugins ``config.plugins`` names active."""
    with plugins.activated(config.plugins):
        return compile_in_context(gm, example_inputs, **kwargs)


def compile_in_context(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """fxmlir's backend with the plugins active now (see :func:`fxmlir.plugins.backend`). An
    inference graph is traced by :mod:`fxmlir.inference`; any other goes through
    aot_autograd, whose compiles (a backward graph's comes later) see the same plugins."""
    traced = inference.trace(gm, example_inputs, decompositions())
    if traced is not None:
        graph, static = traced
        return inference.unboxed(_compile(graph, static))
    active = plugins.active()

    def compile_with_plugins(g: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable:
        with plugins.restored(active):
            return compile_graph(g, inputs)

    backend = aot_autograd(
        fw_compiler=compile_with_plugins,
        bw_compiler=compile_with_plugins,
        decompositions=decompositions(),
    )
    return backend(gm, example_inputs, **kwargs)
