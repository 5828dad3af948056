"""XACC's "toolchain": the module after fxmlir's ``llvm`` stage, translated to LLVM IR by
``mlir-translate`` and built into a shared library by ``clang``, loaded with ctypes and called
through the function's C interface (``_mlir_ciface_<graph>``, one memref descriptor per input
and output). It stands in for a vendor's compiler and runtime; fxmlir checks the inputs and
allocates the outputs around it."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import tempfile
from collections.abc import Callable

import torch
from fxmlir.plugins import Executor, Module

#: Where LLVM's tools are (``LLVM_BIN_DIR``, else the version fxmlir is built with).
LLVM_BIN = pathlib.Path(os.environ.get("LLVM_BIN_DIR", "/usr/lib/llvm-22/bin"))


def _descriptor(tensor: torch.Tensor) -> ctypes.Structure:
    """A memref descriptor of ``tensor``: its data pointer (twice), offset 0, sizes, strides."""
    rank = tensor.dim()

    class Descriptor(ctypes.Structure):
        _fields_ = [
            ("allocated", ctypes.c_void_p),
            ("aligned", ctypes.c_void_p),
            ("offset", ctypes.c_int64),
            ("sizes", ctypes.c_int64 * rank),
            ("strides", ctypes.c_int64 * rank),
        ]

    pointer = tensor.data_ptr()
    return Descriptor(
        pointer,
        pointer,
        0,
        (ctypes.c_int64 * rank)(*tensor.shape),
        (ctypes.c_int64 * rank)(*tensor.stride()),
    )


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed:\n{done.stderr}")


def build(module: Module) -> Callable[[list[torch.Tensor], list[torch.Tensor]], None]:
    """The graph of ``module`` (LLVM dialect) as a function of its inputs and outputs."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix=f"xacc-{module.name}-"))
    (directory / "module.mlir").write_text(module.mlir)
    _run(
        [
            str(LLVM_BIN / "mlir-translate"),
            "--mlir-to-llvmir",
            str(directory / "module.mlir"),
            "-o",
            str(directory / "module.ll"),
        ]
    )
    library = directory / "module.so"
    _run(
        [
            str(LLVM_BIN / "clang"),
            "-O2",
            "-shared",
            "-fPIC",
            "-Wno-override-module",
            str(directory / "module.ll"),
            "-o",
            str(library),
            "-lmvec",
            "-lm",
        ]
    )
    entry = getattr(ctypes.CDLL(str(library)), f"_mlir_ciface_{module.name}")
    entry.restype = None

    def run(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        descriptors = [_descriptor(t) for t in [*inputs, *outputs]]
        entry(*(ctypes.byref(d) for d in descriptors))

    return run


#: XACC's executor: fxmlir's pipeline through its last stage, then the toolchain above.
EXECUTOR = Executor("llvm", build)
