import os
import pathlib
import shutil

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
LLVM_BIN = pathlib.Path(os.environ.get("LLVM_BIN_DIR", "/usr/lib/llvm-22/bin"))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts with empty Dynamo caches so compiles are observed, not reused."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fxmlir_cli() -> pathlib.Path:
    path = shutil.which("fxmlir") or str(REPO / "target" / "release" / "fxmlir")
    return pathlib.Path(path)


@pytest.fixture
def mlir_opt() -> pathlib.Path:
    return LLVM_BIN / "mlir-opt"
