"""fxmlir: a ``torch.compile`` backend that compiles FX graphs through MLIR and LLVM.

    import torch
    compiled = torch.compile(model, backend="fxmlir")

The backend is also declared as a ``torch_dynamo_backends`` entry point, so the string works
without importing this package first.
"""

from __future__ import annotations

import logging
import os

from ._fxmlir import (
    CallError,
    CompileError,
    FxmlirError,
    GraphError,
    LoweringError,
    UnsupportedOpError,
    __version__,
)
from ._fxmlir import pipelines as _pipelines
from ._fxmlir import supported_ops as _supported_ops
from .backend import compile_graph, fxmlir_backend
from .config import config
from .explain import ExplainReport, explain

__all__ = [
    "CallError",
    "CompileError",
    "ExplainReport",
    "FxmlirError",
    "GraphError",
    "LoweringError",
    "UnsupportedOpError",
    "__version__",
    "compile_graph",
    "config",
    "explain",
    "fxmlir_backend",
    "pipelines",
    "supported_ops",
]


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


_register()
_configure_logging()
