"""fxmlir: a ``torch.compile`` backend that compiles FX graphs through MLIR and LLVM.

    import torch
    compiled = torch.compile(model, backend="fxmlir")

The backend is also declared as a ``torch_dynamo_backends`` entry point, so the string works
without importing this package first.
"""

from __future__ import annotations

import logging
import os

from . import custom_ops, lowerings
from ._fxmlir import (
    CallError,
    CompileError,
    FxmlirError,
    GraphError,
    LoweringError,
    TargetError,
    UnsupportedOpError,
    __version__,
)
from ._fxmlir import fma_peak as _fma_peak
from ._fxmlir import pipelines as _pipelines
from ._fxmlir import supported_ops as _supported_ops
from ._fxmlir import target_info as _target_info
from .backend import GoldenMismatch, compile_graph, fxmlir_backend
from .config import config
from .explain import ExplainReport, explain
from .stages import Stage, StageEdit
from .stages import removing as remove_stage

__all__ = [
    "CallError",
    "CompileError",
    "ExplainReport",
    "FxmlirError",
    "GoldenMismatch",
    "GraphError",
    "LoweringError",
    "Stage",
    "StageEdit",
    "remove_stage",
    "TargetError",
    "UnsupportedOpError",
    "__version__",
    "compile_graph",
    "config",
    "explain",
    "fma_peak",
    "fxmlir_backend",
    "lowerings",
    "plugins",
    "pipelines",
    "supported_ops",
    "target_info",
]


def target_info(spec: str | None = None) -> dict:
    """What fxmlir makes of a target spec (default: ``config.target``) with torch's thread
    count: its complete ``spec``, a readable ``summary``, LLVM's ``cpu``, the ``features`` it
    decides by, ``vector_bytes``, ``registers``, ``l2_bytes``, ``threads``, ``bf16_dot``, and
    ``runs_here`` (``None`` if this host runs its code, else why not). Raises ``TargetError``
    for a spec that does not parse."""
    import torch

    return _target_info(config.target if spec is None else spec, torch.get_num_threads())


def fma_peak(spec: str | None = None, threads: int | None = None, seconds: float = 1.0) -> float:
    """The f32 FMA peak of this host in GFLOP/s, measured now: fused multiply-adds on the
    widest vectors of the target (default: ``config.target``, which must run here) on
    ``threads`` threads (default: torch's thread count) for about ``seconds``. What a kernel
    would do if nothing waited on memory: the bench reports models' GFLOP/s against it."""
    import torch

    threads = torch.get_num_threads() if threads is None else threads
    return _fma_peak(config.target if spec is None else spec, threads, seconds)


def supported_ops() -> dict[str, str]:
    """``{aten_overload: family}`` for every op fxmlir lowers natively."""
    return dict(_supported_ops())


def pipelines() -> list[str]:
    """Names of the MLIR pipelines ``config.pipeline`` may select."""
    return list(_pipelines())


def _register() -> None:
    """Makes ``backend="fxmlir"`` resolve. When the package's entry point is installed Dynamo
    loads it by itself (registering here too would clash with that load); otherwise (running
    from a source tree) the backend is registered directly."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends import registry

    if entry_points(group="torch_dynamo_backends", name="fxmlir"):
        return
    if "fxmlir" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=fxmlir_backend, name="fxmlir")


def _configure_logging() -> None:
    level = os.environ.get("FXMLIR_LOG")
    if not level:
        return
    logger = logging.getLogger("fxmlir")
    name = level.split(",")[0].split("=")[-1].upper()
    logger.setLevel(getattr(logging, name, logging.INFO))
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("fxmlir %(levelname)s: %(message)s"))
        logger.addHandler(handler)


custom_ops.register()
_register()
_configure_logging()
