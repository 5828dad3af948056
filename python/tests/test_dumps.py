"""IR dumps: every stage is written, every .mlir parses with stock mlir-opt 22, the interchange
file replays through the CLI, and FXMLIR_LOG shows stage timings from Python."""

import os
import subprocess
import sys

import fxmlir
import torch

STAGES = [
    "00-input",
    "02-schedule.transform",
    "02-schedule",
    "03-fusion",
    "04-parallel.transform",
    "04-parallel",
    "05-bufferize",
    "06-outline",
    "07-loops",
    "08-llvm",
]
# The schedule stage's pass pipeline; its input dump (transform script inside) replays with it.
SCHEDULE_PIPELINE = "builtin.module(transform-interpreter,inline{default-pipeline=},canonicalize)"


def model(x, w, b):
    return torch.relu(x @ w + b).sum(dim=-1)


def test_dumps_parse_with_mlir_opt_and_replay(tmp_path, mlir_opt, fxmlir_cli):
    x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    with fxmlir.config.patch(dump_dir=str(tmp_path)):
        got = torch.compile(model, backend="fxmlir")(x, w, b)
    torch.testing.assert_close(got, model(x, w, b), atol=1e-5, rtol=1e-5)
    graphs = sorted(p.name.removesuffix(".fx.json") for p in tmp_path.glob("*.fx.json"))
    assert graphs, list(tmp_path.iterdir())
    for graph in graphs:
        assert (tmp_path / f"{graph}.ll").stat().st_size > 0
        for stage in STAGES:
            path = tmp_path / f"{graph}.{stage}.mlir"
            out = subprocess.run([mlir_opt, path], capture_output=True, text=True)
            assert out.returncode == 0, f"{path}: {out.stderr}"
        transform = tmp_path / f"{graph}.02-schedule.transform.mlir"
        assert "transform.named_sequence" in transform.read_text()
        out = subprocess.run(
            [mlir_opt, f"--pass-pipeline={SCHEDULE_PIPELINE}", transform],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, f"{transform}: {out.stderr}"
        assert "vector.contract" in out.stdout
        assert "vector.contract" in (tmp_path / f"{graph}.02-schedule.mlir").read_text()
        replay = subprocess.run(
            [fxmlir_cli, "run", tmp_path / f"{graph}.fx.json"], capture_output=True, text=True
        )
        assert replay.returncode == 0, replay.stderr
        assert "output 0: float32 [8]" in replay.stdout
        assert "llvm-opt" in replay.stdout


def test_dump_dir_from_environment_and_log_from_python(tmp_path):
    code = (
        "import torch\n"
        "f = torch.compile(lambda x: x.sin() * 2, backend='fxmlir')\n"
        "f(torch.randn(3))\n"
    )
    env = dict(os.environ, FXMLIR_DUMP_DIR=str(tmp_path), FXMLIR_LOG="debug")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.glob("*.08-llvm.mlir"))
    for needle in ("fusion", "bufferize", "llvm-opt", "compiled graph"):
        assert needle in out.stderr, out.stderr
