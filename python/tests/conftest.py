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


@pytest.fixture(autouse=True)
def no_skipped_stage(request):
    """No compile in a test may skip an optimisation stage: its kernel would still be right,
    only slower, so nothing else would notice. A test that skips one on purpose says so with
    ``@pytest.mark.skips_stage``."""
    from fxmlir import backend

    before = max((r.seq for r in backend.history), default=-1)
    yield
    if request.node.get_closest_marker("skips_stage"):
        return
    skipped = [
        f"{r.name}: {w}"
        for r in backend.history
        if r.seq > before
        for w in r.warnings
        if "stage was skipped" in w
    ]
    assert not skipped, "\n".join(skipped)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Runs the test on one thread and on two (kernels follow ``torch.get_num_threads()``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "skips_stage: the test skips an optimisation stage on purpose"
    )


@pytest.fixture
def fxmlir_cli() -> pathlib.Path:
    path = shutil.which("fxmlir") or str(REPO / "target" / "release" / "fxmlir")
    return pathlib.Path(path)


@pytest.fixture
def mlir_opt() -> pathlib.Path:
    return LLVM_BIN / "mlir-opt"
