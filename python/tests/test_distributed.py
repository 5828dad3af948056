"""Distributed training stays correct: two processes on loopback (gloo) train with DDP and with
FSDP2, uncompiled and compiled with fxmlir, and the parameters match step for step
(``distributed_worker.py``). The compiled runs must have compiled kernels, so a run that fell
back to eager entirely fails."""

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


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_compiled_training_matches_uncompiled(kind, tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(WORKER), kind, str(report), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(report.read_text())
    assert result["kernels"] > 0, "the compiled run compiled nothing"
    assert result["max_difference"] <= 1e-6, result
