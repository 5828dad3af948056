import os
import pathlib
import shutil
import tempfile

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
LLVM_BIN = pathlib.Path(os.environ.get("LLVM_BIN_DIR", "/usr/lib/llvm-22/bin"))

# Hermetic compiles: the session's disk cache starts empty and is removed afterwards, so no test
# loads a kernel an earlier session (or the user, under ~/.cache) compiled, and subprocesses
# inherit it. Set before fxmlir is imported, since its config reads the environment then.
SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="fxmlir-test-cache-")
os.environ["FXMLIR_CACHE_DIR"] = SESSION_CACHE_DIR


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir():
    import fxmlir

    with fxmlir.config.patch(cache_dir=SESSION_CACHE_DIR):
        yield SESSION_CACHE_DIR
    shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)


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
