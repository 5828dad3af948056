"""fxmlir's disk compile cache, cold then warm: the same case runs in two fresh processes that
share one new, empty ``FXMLIR_CACHE_DIR``. The first fills the cache, the second should load
from it. Each reports its first call (Dynamo, the ATen trace, fxmlir) and fxmlir's own compile
total from ``fxmlir.backend.history``."""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

import compare
import torch
from cases import all_cases
from measure import process_warmup

CASES = ("transformer_block", "resnet18")


def first_call(case_name: str) -> dict[str, Any]:
    """The worker's side: fxmlir's first call on one case, checked against eager."""
    fn, args = all_cases()[case_name].build()
    with torch.no_grad():
        process_warmup(("fxmlir",))
        expected = fn(*args)
        return compare.first_call("fxmlir", fn, args, expected)[1]


def _contents(directory: pathlib.Path) -> dict[str, int]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def cold_and_warm(case_name: str, spawn: Callable[[str, dict[str, str]], dict]) -> dict:
    """The orchestrator's side: two runs of ``cache:<case>`` through ``spawn(task, env)``."""
    result: dict[str, Any] = {"case": case_name}
    with tempfile.TemporaryDirectory(prefix="fxmlir-bench-cache-") as tmp:
        env = {"FXMLIR_CACHE_DIR": tmp}
        for run in ("cold", "warm"):
            result[run] = spawn(f"cache:{case_name}", env)
            result[run]["cache_dir"] = _contents(pathlib.Path(tmp))
    return result
