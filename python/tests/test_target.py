"""The target is an input (``fxmlir.config.target``, ``FXMLIR_TARGET``): what a spec means, that
the kernel is compiled for it (dumps, cache key, explain), and that a target whose code cannot
run here, or a spec that does not parse, is a ``TargetError`` whatever the fallback mode."""

import os
import pathlib
import subprocess
import sys

import fxmlir
import pytest
import torch
from fxmlir import backend


def _mlp(x, w, b):
    return torch.relu(x @ w + b)


def _inputs():
    torch.manual_seed(0)
    return torch.randn(32, 64), torch.randn(64, 48), torch.randn(48)


def test_specs_describe_their_cpu():
    info = fxmlir.target_info("znver4,threads=2")
    assert info["spec"] == "znver4,l2=1M,threads=2"
    assert info["cpu"] == "znver4"
    assert {"avx512f", "avx512bf16", "avx512vnni"} <= set(info["features"])
    assert (info["vector_bytes"], info["registers"], info["l2_bytes"]) == (64, 32, 1 << 20)
    assert info["bf16_dot"] and info["threads"] == 2
    avx2 = fxmlir.target_info("x86-64-v3,l2=512K")
    assert (avx2["vector_bytes"], avx2["registers"], avx2["l2_bytes"]) == (32, 16, 512 << 10)
    assert not avx2["bf16_dot"]
    assert avx2["runs_here"] is None, "every x86-64 host CI uses runs AVX2 code"
    assert fxmlir.target_info("host")["runs_here"] is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("pentium9", "unknown CPU `pentium9`"),
        ("znver4,+sse9", "unknown feature `sse9`"),
        ("znver4,l2=lots", "`l2=lots`: expected a size"),
        ("host,threads=-1", "`threads=-1`: expected a positive integer"),
    ],
)
def test_bad_specs_raise_naming_the_item(spec, message):
    with pytest.raises(fxmlir.TargetError, match=message):
        fxmlir.target_info(spec)
    # From the backend too, in either fallback mode: a bad setting is not an op to run eagerly.
    for fallback in ("eager", "error"):
        torch._dynamo.reset()
        with fxmlir.config.patch(target=spec, fallback=fallback), pytest.raises(Exception) as e:
            torch.compile(_mlp, backend="fxmlir")(*_inputs())
        assert message in str(e.value)


def test_a_target_this_host_cannot_run_is_refused():
    """A named CPU other than the host's may use instructions this host lacks: compiling for it
    under torch.compile (whose kernels run here) raises instead of risking SIGILL."""
    host_cpu = fxmlir.target_info("host")["cpu"]
    other = "cooperlake" if host_cpu != "cooperlake" else "icelake-server"
    reason = fxmlir.target_info(other)["runs_here"]
    assert reason is not None and "lacks" in reason
    with fxmlir.config.patch(target=other), pytest.raises(Exception, match="cannot run|lacks"):
        torch.compile(_mlp, backend="fxmlir")(*_inputs())


def test_the_kernel_is_compiled_for_the_target(tmp_path):
    """A target without AVX-512 (the host's minus it, so it runs here) gives AVX2 register tiles
    and LLVM features without AVX-512; the dumps record the target, which the report shows."""
    x, w, b = _inputs()
    expected = _mlp(x, w, b)
    target = "host,-avx512f,threads=1"
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), target=target):
        report = fxmlir.explain(_mlp, x, w, b)
    torch.testing.assert_close(report.output, expected, rtol=1e-5, atol=1e-5)
    assert not report.fallbacks
    spec = fxmlir.target_info(target)["spec"]
    assert f"for target {spec}" in str(report)
    assert [g.target for g in report.graphs] == [spec]
    (lowered,) = tmp_path.glob("*.00-input.mlir")
    assert f'fxmlir.target = "{spec}"' in lowered.read_text()
    (script,) = tmp_path.glob("*.02-schedule.transform.mlir")
    assert "tile 4x16" in script.read_text(), "16 ymm registers: 4 rows of two 8-lane vectors"
    (llvm,) = [p for p in tmp_path.glob("*.ll") if "unoptimized" not in p.name]
    assert "-avx512f" in llvm.read_text()


def test_targets_do_not_share_kernels():
    """The target is part of the compile-cache key: the same graph for two targets compiles
    twice, and compiling it again for the first reuses that kernel."""
    args = _inputs()
    sources = []
    for target in ("x86-64-v3", "x86-64-v3,l2=256K", "x86-64-v3"):
        torch._dynamo.reset()
        before = max((r.seq for r in backend.history), default=-1)
        with torch.no_grad(), fxmlir.config.patch(target=target, cache_dir=None):
            torch.compile(_mlp, backend="fxmlir")(*args)
        (record,) = [r for r in backend.history if r.seq > before]
        sources.append((record.target.split(",threads")[0], record.source))
    assert sources == [
        ("x86-64-v3,l2=2M", "compiled"),
        ("x86-64-v3,l2=256K", "compiled"),
        ("x86-64-v3,l2=2M", "memory"),
    ]


def test_the_environment_sets_the_default(tmp_path):
    env = {**os.environ, "FXMLIR_TARGET": "x86-64-v3,l2=512K"}
    code = "import fxmlir; print(fxmlir.config.target); print(fxmlir.target_info()['spec'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "x86-64-v3,l2=512K"
    assert out[1].startswith("x86-64-v3,l2=512K,threads=")


def test_the_cli_emits_code_for_a_target_it_cannot_run(fxmlir_cli, tmp_path):
    """`fxmlir compile --target` works for any CPU: every stage and the LLVM IR are dumped,
    and the kernel is loaded only where it can run."""
    torch.manual_seed(0)
    graph = pathlib.Path(__file__).parents[2] / "lit-tests" / "cli" / "target.json"
    document = "\n".join(
        line for line in graph.read_text().splitlines() if not line.startswith("//")
    )
    (tmp_path / "g.fx.json").write_text(document)
    host_cpu = fxmlir.target_info("host")["cpu"]
    other = "cooperlake" if host_cpu != "cooperlake" else "icelake-server"
    out = subprocess.run(
        [
            str(fxmlir_cli),
            "compile",
            f"--target={other}",
            "--dump-dir",
            str(tmp_path / "d"),
            str(tmp_path / "g.fx.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(f"target: {other} ({other}):"), out
    assert "not loaded: code for target" in out
    assert "  codegen " in out
    assert (tmp_path / "d" / "product.ll").exists()


def test_the_fma_peak_is_measured_on_the_targets_vectors():
    """The host's FMA peak on the target's widest vectors: positive on the host and on the
    AVX2 level (which every x86-64 host the project supports runs), and refused for a target
    whose code cannot run here."""
    for spec in ("host", "x86-64-v3"):
        assert fxmlir.fma_peak(spec, threads=1, seconds=0.05) > 1.0
    host_cpu = fxmlir.target_info("host")["cpu"]
    other = "cooperlake" if host_cpu != "cooperlake" else "icelake-server"
    with pytest.raises(fxmlir.TargetError, match="this host"):
        fxmlir.fma_peak(other, threads=1, seconds=0.05)
