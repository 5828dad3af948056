"""Distributed training stays correct: two processes on loopback (gloo) train with DDP and with
FSDP2, uncompiled and compiled with fxmlir, and the parameters match step for step
(``distributed_worker.py``). The compiled runs must have compiled kernels, so a run that fell
back to eager entirely fails. Functional collectives compile in place: in strict mode, one
kernel per function, matching eager."""

import json
import pathlib
import socket
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(kind: str, tmp_path: pathlib.Path) -> dict:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(WORKER), kind, str(report), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(report.read_text())


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_compiled_training_matches_uncompiled(kind, tmp_path):
    result = _run(kind, tmp_path)
    assert result["kernels"] > 0, "the compiled run compiled nothing"
    assert result["max_difference"] <= 1e-6, result


def test_functional_collectives_compile_in_place(tmp_path):
    result = _run("functional", tmp_path)
    # Strict mode: a collective running eagerly would have raised. One kernel for the function
    # with five kinds of collective (not partitions cut around them), one for the SGD step.
    assert result["fallbacks"] == 0, result
    assert result["kernels_of_collectives"] == 1, result
    assert result["kernels"] == 2, result
    assert result["max_difference"] <= 1e-5, result
