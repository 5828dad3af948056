"""Run-time settings of fxmlir. Each field has an environment variable; code may also set the
fields directly or temporarily with ``config.patch(...)``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator


def _env_str(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def _cache_dir() -> str | None:
    """``FXMLIR_CACHE_DIR`` if set (empty: no disk cache), else the user's cache directory."""
    value = os.environ.get("FXMLIR_CACHE_DIR")
    if value is not None:
        return value or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fxmlir")


@dataclasses.dataclass
class Config:
    #: Write ``<graph>.fx.json``, ``<graph>.NN-<stage>.mlir`` and ``<graph>.ll`` here
    #: (``FXMLIR_DUMP_DIR``).
    dump_dir: str | None = dataclasses.field(default_factory=lambda: _env_str("FXMLIR_DUMP_DIR"))
    #: Compiled kernels are stored here and loaded by later processes compiling an identical
    #: graph; ``None`` or ``""`` turns the disk cache off (``FXMLIR_CACHE_DIR``; default
    #: ``$XDG_CACHE_HOME/fxmlir`` or ``~/.cache/fxmlir``). Nothing is loaded while ``dump_dir``
    #: is set, so that every stage is dumped.
    cache_dir: str | None = dataclasses.field(default_factory=_cache_dir)
    #: Named MLIR pipeline used to compile graphs (``FXMLIR_PIPELINE``).
    pipeline: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_PIPELINE", "default")
    )

    #: The CPU kernels are compiled for (``FXMLIR_TARGET``; default ``"host"``, this machine):
    #: a named CPU (``"znver4"``, ``"skylake-avx512"``, ``"x86-64-v3"``) or ``"host"``, each
    #: optionally followed by changes: ``"host,-avx512bf16"``, ``"x86-64-v4,+avx512bf16,l2=1M"``,
    #: ``"znver4,threads=2"`` (else torch's intra-op thread count). The kernels must run here:
    #: a target whose code this host cannot run raises ``TargetError`` at compile time.
    #: :func:`fxmlir.target_info` tells what a spec means.
    target: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_TARGET") or "host"
    )

    #: Installed plugins active on the ``fxmlir`` backend, by name (``FXMLIR_PLUGINS``:
    #: comma-separated; see :mod:`fxmlir.plugins`).
    plugins: list[str] = dataclasses.field(
        default_factory=lambda: [
            p.strip() for p in os.environ.get("FXMLIR_PLUGINS", "").split(",") if p.strip()
        ]
    )

    #: Stages of one's own, placed before, after or instead of fxmlir's (a list of
    #: ``fxmlir.Stage(...).before/after/replacing(anchor)``; see :mod:`fxmlir.stages`).
    stages: list = dataclasses.field(default_factory=list)

    #: Dialects defined in IRDL, loaded into every compile: files, or the IRDL text itself
    #: (``FXMLIR_DIALECTS``: files separated by ``os.pathsep``).
    dialects: list[str] = dataclasses.field(
        default_factory=lambda: [
            p for p in os.environ.get("FXMLIR_DIALECTS", "").split(os.pathsep) if p
        ]
    )

    #: Native MLIR pass plugins (shared objects exporting ``mlirGetPassPluginInfo``, built
    #: against fxmlir's MLIR, see docs/c-api.md), loaded once per process; a stage's passes
    #: may name their passes (``FXMLIR_PASS_PLUGINS``: paths separated by ``os.pathsep``).
    pass_plugins: list[str] = dataclasses.field(
        default_factory=lambda: [
            p for p in os.environ.get("FXMLIR_PASS_PLUGINS", "").split(os.pathsep) if p
        ]
    )

    #: Native MLIR dialect plugins (``mlirGetDialectPluginInfo``), registered with every
    #: compile's context (``FXMLIR_DIALECT_PLUGINS``).
    dialect_plugins: list[str] = dataclasses.field(
        default_factory=lambda: [
            p for p in os.environ.get("FXMLIR_DIALECT_PLUGINS", "").split(os.pathsep) if p
        ]
    )

    #: Run-time checks where PyTorch raises: an index out of range (gathers, scatters,
    #: embeddings) or an integer division by zero raises PyTorch's exception, naming the node.
    #: Off (``FXMLIR_CHECKS=0``), such a call returns unspecified values instead, still without
    #: reading out of bounds: for measuring what the checks cost (``make bench``).
    checks: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_CHECKS", "1") != "0"
    )

    #: Golden check: every call of a compiled graph also runs the graph in eager PyTorch and
    #: compares; a difference raises ``GoldenMismatch`` naming the first op (node and source
    #: line) that differs. A debugging mode: each call costs an eager run, a difference one
    #: compile per op (``FXMLIR_GOLDEN=1``).
    golden: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_GOLDEN", "0") == "1"
    )

    #: What happens to ops fxmlir cannot compile: ``"eager"`` runs them in PyTorch between
    #: compiled partitions, ``"error"`` raises ``UnsupportedOpError`` naming them
    #: (``FXMLIR_FALLBACK``).
    fallback: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_FALLBACK", "eager")
    )

    #: Compute what a graph derives from its parameters and buffers alone (a linear layer's
    #: transposed weight) once, outside the kernel, and reuse it while those tensors are
    #: unchanged (``FXMLIR_HOIST``; ``0`` turns it off).
    hoist: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_HOIST", "1") != "0"
    )

    #: Keep an f32 copy of the half-precision weights whose products the kernel computes on
    #: f32 operands (``fxmlir.passes.widen``: f16 everywhere, bf16 without AVX512-BF16), made once
    #: with the hoisted values. Off, the weights keep only their own size and the kernel widens
    #: them on every call instead (``FXMLIR_WIDEN``; ``0`` turns it off).
    widen: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_WIDEN", "1") != "0"
    )

    #: Keep the f32 weights of large products in panels, the layout the kernel's register
    #: tiles read them in (``fxmlir.passes.panels``), made once with the hoisted values: the
    #: kernel reads them where they lie instead of copying each block of them into panels on
    #: every call. Off, the weights keep only their own layout (``FXMLIR_PANELS``; ``0`` turns
    #: it off).
    panels: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_PANELS", "1") != "0"
    )

    #: Compile a graph with symbolic sizes (``torch.compile(dynamic=True)``, ``mark_dynamic``,
    #: Dynamo's automatic dynamic shapes) once, into a kernel that serves every size its
    #: symbols take, when every op of it takes symbolic sizes (``_fxmlir.dynamic_ops()``, or
    #: a symbolic batch alone: ``_fxmlir.batch_ops()``, lowered one sample at a time); other
    #: graphs compile per size (``FXMLIR_SYMBOLIC``; ``0`` turns it off).
    symbolic: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_SYMBOLIC", "1") != "0"
    )

    #: How many sizes of a graph with a kernel for every size (``symbolic``) also get a kernel
    #: of their own, compiled for that size alone (parallel loops, tiled products): the first
    #: sizes called ``HOT_CALLS`` times in a row, compiled on a thread of their own (with
    #: ``background``) while the kernel for every size serves their calls
    #: (``FXMLIR_SPECIALIZATIONS``; ``0``: none).
    specializations: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("FXMLIR_SPECIALIZATIONS", "1"))
    )

    #: How many kernels for one set of sizes a graph with symbolic sizes keeps (compiled per
    #: size, or the specializations of a kernel for every size); beyond, the least recently
    #: used is dropped, and the kernel memory cache may free it (``FXMLIR_SIZES_PER_GRAPH``).
    sizes_per_graph: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("FXMLIR_SIZES_PER_GRAPH", "32"))
    )

    #: Compile a whole graph's kernel on a thread of its own while Dynamo finishes (guards, the
    #: frame's bytecode) and the first call starts; the first call waits for it. A compile
    #: that fails there falls back to partitions as at compile time. Off with
    #: ``fallback="error"``, whose errors surface at compile time (``FXMLIR_BACKGROUND``;
    #: ``0`` turns it off).
    background: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_BACKGROUND", "1") != "0"
    )

    def check_fallback(self) -> str:
        if self.fallback not in ("eager", "error"):
            raise ValueError(
                f"fxmlir.config.fallback must be 'eager' or 'error', got {self.fallback!r}"
            )
        return self.fallback

    @contextlib.contextmanager
    def patch(self, **changes: object) -> Iterator[Config]:
        """Temporarily change settings: ``with fxmlir.config.patch(dump_dir="d"): ...``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise AttributeError(f"unknown fxmlir config fields: {sorted(unknown)}")
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


config = Config()
