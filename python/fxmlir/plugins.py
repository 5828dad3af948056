"""Vendor plugins: a backend built on fxmlir without forking it. A plugin is a Python
distribution with an entry point in the group ``fxmlir.plugins`` naming a :class:`Plugin`
subclass; it brings what fxmlir already takes from a user (dialects in IRDL, stages of its own,
lowerings written in Python) plus decompositions and FX passes, under an API version fxmlir
checks. It is active on the ``fxmlir`` backend when ``fxmlir.config.plugins`` (or
``FXMLIR_PLUGINS``) names it, or behind a backend name of its own::

    # the plugin's package
    class Xacc(fxmlir.plugins.Plugin):
        name = "xacc"
        def dialects(self): return [XACC_IRDL]
        def stages(self): return [fxmlir.Stage("xacc-lower", pdl=PATTERNS).before("fusion")]
        def lowerings(self): return [Lowering("aten.tanh.default", tanh, None, "xacc")]

    backend = fxmlir.plugins.backend(Xacc())   # entry point torch_dynamo_backends: xacc

What a plugin brings is collected once per activation, each hook called inside a guard: a
plugin that fails to import, declares another API version, or whose hook raises or returns
the wrong kind of value gives a :class:`PluginError` naming the plugin and the hook. Its name
and :meth:`Plugin.options` are part of the compile-cache key.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.metadata
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch.fx

from . import lowerings, stages
from ._fxmlir import FxmlirError

#: The plugin API this fxmlir implements; a plugin declares the one it was written for.
API_VERSION = 1
#: The entry-point group plugins are found in.
GROUP = "fxmlir.plugins"


class PluginError(FxmlirError):
    """A plugin that cannot be used: the message names the plugin and the hook."""


class Plugin:
    """A vendor plugin: subclass it, set :attr:`name`, and override the hooks it needs."""

    #: The plugin's name: in errors, in the cache key, and the usual backend name.
    name: str = ""
    #: The plugin API version the plugin was written for (:data:`API_VERSION`).
    api_version: int = API_VERSION

    def options(self) -> dict[str, Any]:
        """Settings that change what the plugin generates (JSON-serialisable): part of the
        compile-cache key."""
        return {}

    def dialects(self) -> list[str]:
        """Dialects in IRDL (files, or the text): loaded into every compile."""
        return []

    def stages(self) -> list[stages.StageEdit]:
        """Stages of the plugin's own, before, after or instead of fxmlir's."""
        return []

    def lowerings(self) -> list[lowerings.Lowering]:
        """Lowerings written in Python (see :mod:`fxmlir.lowerings`); they override fxmlir's
        own rows while the plugin is active."""
        return []

    def decompositions(self) -> dict[Any, Callable]:
        """Decompositions added to the table ops are traced with (an op mapped to ``None`` is
        taken out of the table and reaches the graph whole)."""
        return {}

    def graph_passes(self) -> list[Callable[[torch.fx.GraphModule], None]]:
        """Passes over each functional ATen graph before it is partitioned, in order; each
        rewrites the graph in place."""
        return []

    def executor(self) -> Executor | None:
        """The plugin's own compiler and runtime for the compiled graphs, in place of
        fxmlir's JIT; None keeps the JIT."""
        return None


@dataclasses.dataclass(frozen=True)
class Module:
    """What an executor receives: the graph's module after the executor's stage, as text
    (with locations) and as bytecode, and the graph's inputs and outputs (interchange metas:
    ``shape``, ``strides``, ``dtype``)."""

    name: str
    stage: str
    mlir: str
    bytecode: bytes
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Executor:
    """A plugin's way to run a graph: ``build`` gets the :class:`Module` after the stage named
    ``stage`` (no later stage runs) and returns ``run(inputs, outputs)``, which computes the
    outputs into the tensors fxmlir allocated for them. fxmlir checks the inputs, allocates
    the outputs and turns an exception of ``run`` into ``CallError`` naming the plugin."""

    stage: str
    build: Callable[[Module], Callable[[list[torch.Tensor], list[torch.Tensor]], None]]


@dataclasses.dataclass(frozen=True)
class Collected:
    """What one active plugin brings, collected once."""

    plugin: Plugin
    dialects: tuple[str, ...]
    stages: tuple[stages.StageEdit, ...]
    lowerings: tuple[lowerings.Lowering, ...]
    decompositions: dict[Any, Callable | None]
    graph_passes: tuple[Callable[[torch.fx.GraphModule], None], ...]
    key: str
    executor: Executor | None


def _call(plugin: Plugin, hook: str, kind: type | tuple[type, ...]) -> Any:
    name = getattr(plugin, "name", "") or type(plugin).__name__
    try:
        value = getattr(plugin, hook)()
    except Exception as e:
        raise PluginError(f"plugin `{name}`: hook `{hook}` raised {e!r}") from e
    if not isinstance(value, kind):
        raise PluginError(
            f"plugin `{name}`: hook `{hook}` returned {type(value).__name__}, "
            f"not {getattr(kind, '__name__', kind)}"
        )
    return value


def collect(plugin: Plugin) -> Collected:
    """Checks ``plugin`` and calls its hooks: see the module docs for the errors."""
    if not isinstance(plugin, Plugin) or not plugin.name:
        raise PluginError(f"plugin {plugin!r}: not a fxmlir.plugins.Plugin with a name")
    if plugin.api_version != API_VERSION:
        raise PluginError(
            f"plugin `{plugin.name}`: written for plugin API {plugin.api_version}, "
            f"this fxmlir implements {API_VERSION}"
        )
    options = _call(plugin, "options", dict)
    try:
        key = json.dumps({"plugin": plugin.name, "options": options}, sort_keys=True)
    except TypeError as e:
        raise PluginError(f"plugin `{plugin.name}`: hook `options`: {e}") from e
    rows = tuple(_call(plugin, "lowerings", list))
    for row in rows:
        if not isinstance(row, lowerings.Lowering) or row.mlir is None:
            raise PluginError(f"plugin `{plugin.name}`: hook `lowerings` gave {row!r}")
    edits = tuple(_call(plugin, "stages", list))
    for edit in edits:
        if not isinstance(edit, stages.StageEdit):
            raise PluginError(f"plugin `{plugin.name}`: hook `stages` gave {edit!r}")
    return Collected(
        plugin,
        tuple(_call(plugin, "dialects", list)),
        edits,
        rows,
        _call(plugin, "decompositions", dict),
        tuple(_call(plugin, "graph_passes", list)),
        key,
        _call(plugin, "executor", (Executor, type(None))),
    )


def available() -> dict[str, str]:
    """The installed plugins: entry-point name → the object it names."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=GROUP)}


def load(name: str) -> Plugin:
    """The installed plugin ``name``, imported and instantiated."""
    found = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise PluginError(
            f"plugin `{name}`: not installed (entry-point group {GROUP}); "
            f"installed: {', '.join(sorted(available())) or 'none'}"
        )
    return load_entry_point(found[0])


def load_entry_point(entry_point: importlib.metadata.EntryPoint) -> Plugin:
    """The plugin an entry point names (a :class:`Plugin` subclass or instance)."""
    try:
        loaded = entry_point.load()
        plugin = loaded() if isinstance(loaded, type) else loaded
    except Exception as e:
        raise PluginError(
            f"plugin `{entry_point.name}`: cannot import {entry_point.value}: {e!r}"
        ) from e
    return plugin


_active: contextvars.ContextVar[tuple[Collected, ...]] = contextvars.ContextVar(
    "fxmlir_plugins", default=()
)


def active() -> tuple[Collected, ...]:
    """The plugins active in this context (see :func:`activated`)."""
    return _active.get()


def executor(collected_plugins: tuple[Collected, ...]) -> tuple[Executor, str] | None:
    """The executor of the last of ``collected_plugins`` that has one, with its name."""
    for collected in reversed(collected_plugins):
        if collected.executor is not None:
            return collected.executor, collected.plugin.name
    return None


@contextlib.contextmanager
def activated(plugins: Sequence[Plugin | str]) -> Iterator[tuple[Collected, ...]]:
    """Makes ``plugins`` (instances, or names of installed ones) active, in order, for what
    runs inside: their lowerings override fxmlir's rows, and a compile takes their dialects,
    stages, decompositions and passes."""
    collected = tuple(collect(load(p) if isinstance(p, str) else p) for p in plugins)
    with restored(collected):
        yield collected


@contextlib.contextmanager
def restored(collected: tuple[Collected, ...]) -> Iterator[None]:
    """Makes plugins collected earlier active again (a compile that goes on after the
    backend returned: a new size, a backward graph)."""
    rows = {row.op: row for c in collected for row in c.lowerings}
    token = _active.set(collected)
    with lowerings.scoped(rows):
        try:
            yield
        finally:
            _active.reset(token)


def backend(plugin: Plugin) -> Callable[..., Any]:
    """A ``torch.compile`` backend: fxmlir's, with ``plugin`` active (after the plugins
    ``fxmlir.config.plugins`` names). Declare it as a ``torch_dynamo_backends`` entry point
    to give the plugin a backend name of its own."""
    from . import backend as fxmlir

    def compile_with_plugin(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any):
        from .config import config

        with activated([*config.plugins, plugin]):
            return fxmlir.compile_in_context(gm, example_inputs, **kwargs)

    compile_with_plugin.__name__ = f"{plugin.name}_backend"
    return compile_with_plugin
