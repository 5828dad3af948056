"""Stages of one's own (``fxmlir.config.stages``) and dialects in IRDL
(``fxmlir.config.dialects``): a PDL, transform or pass-pipeline stage runs in every compile,
is dumped and keyed in the cache; a mistake is a ``CompileError`` naming the stage or the
dialect in either fallback mode."""

import pathlib

import fxmlir
import pytest
import torch
from fxmlir import backend

INPUTS = pathlib.Path(__file__).resolve().parents[2] / "lit-tests"
TANH_TO_SIN = (INPUTS / "pipeline" / "Inputs" / "tanh_to_sin.pdl.mlir").read_text()
GENERALIZE = (INPUTS / "pipeline" / "Inputs" / "generalize.transform.mlir").read_text()
XACC_IRDL = INPUTS.parent / "examples" / "xacc" / "fxmlir_xacc" / "xacc.irdl.mlir"
BROKEN_IRDL = INPUTS / "dialects" / "Inputs" / "broken.irdl.mlir"


def _tanh_product(a, b):
    return torch.tanh(a @ b) * 2


def _inputs():
    torch.manual_seed(0)
    return torch.randn(16, 32), torch.randn(32, 24) / 8


def _compiled(fn, args, tmp_path, **config):
    torch._dynamo.reset()
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error", **config):
        return torch.compile(fn, backend="fxmlir")(*args)


def test_a_pdl_stage_rewrites_every_compile(tmp_path):
    """Patterns that turn tanh into sin: the kernel computes sin, so the stage ran; its
    output is dumped under its own name, after fusion's."""
    a, b = _inputs()
    stage = fxmlir.Stage("sine", pdl=TANH_TO_SIN)
    actual = _compiled(_tanh_product, (a, b), tmp_path, stages=[stage.after("fusion")])
    torch.testing.assert_close(actual, torch.sin(a @ b) * 2, rtol=1e-5, atol=1e-5)
    (dump,) = tmp_path.glob("*.04-sine.mlir")
    assert "math.sin" in dump.read_text() and "math.tanh" not in dump.read_text()
    assert "math.tanh" in next(tmp_path.glob("*.03-fusion.mlir")).read_text()


def test_a_transform_stage_runs_its_script(tmp_path):
    """A script that generalises matrix products, before the schedule: the products reach
    the schedule as generics (which it leaves to the loops); the results stay eager's."""
    a, b = _inputs()
    stage = fxmlir.Stage("generalize", transform=GENERALIZE)
    actual = _compiled(_tanh_product, (a, b), tmp_path, stages=[stage.before("schedule")])
    torch.testing.assert_close(actual, _tanh_product(a, b), rtol=1e-5, atol=1e-5)
    (dump,) = tmp_path.glob("*.02-generalize.mlir")
    text = dump.read_text()
    assert "linalg.matmul" not in text and "linalg.generic" in text
    assert "transform." not in text, "the script is erased after the stage"
    assert next(tmp_path.glob("*.02-generalize.transform.mlir")).exists()


def test_a_stage_replaces_one_of_fxmlirs(tmp_path):
    a, b = _inputs()
    stage = fxmlir.Stage("serial", passes="builtin.module(canonicalize)")
    actual = _compiled(_tanh_product, (a, b), tmp_path, stages=[stage.replacing("parallel")])
    torch.testing.assert_close(actual, _tanh_product(a, b), rtol=1e-5, atol=1e-5)
    stages = sorted(p.name.split(".")[1] for p in tmp_path.glob("*.0[0-9]-*.mlir"))
    assert "04-serial" in stages and not any(s.endswith("-parallel") for s in stages), stages


def test_a_stage_runs_fxmlirs_own_work(tmp_path):
    """A stage of one's own with fxmlir's schedule as its work, in place of fxmlir's schedule
    stage: the products are vectorised as fxmlir's stage would; with passes alone they are
    not."""
    a, b = _inputs()
    scheduled = tmp_path / "work"
    stage = fxmlir.Stage("my-schedule", work="schedule")
    actual = _compiled(_tanh_product, (a, b), scheduled, stages=[stage.replacing("schedule")])
    torch.testing.assert_close(actual, _tanh_product(a, b), rtol=1e-5, atol=1e-5)
    (dump,) = scheduled.glob("*.02-my-schedule.mlir")
    assert "vector.contract" in dump.read_text() or "vector.fma" in dump.read_text()
    assert next(scheduled.glob("*.02-my-schedule.transform.mlir")).exists()
    plain = tmp_path / "plain"
    stage = fxmlir.Stage("my-schedule", passes="builtin.module(canonicalize)")
    _compiled(_tanh_product, (a, b), plain, stages=[stage.replacing("schedule")])
    (dump,) = plain.glob("*.02-my-schedule.mlir")
    assert "vector." not in dump.read_text()


def test_stages_are_part_of_the_cache_key():
    # Shapes of this test's own, so that no earlier compile of the graph is in memory.
    a, b = torch.randn(8, 40), torch.randn(40, 8)
    sources = []
    for stages in ([], [fxmlir.Stage("sine", pdl=TANH_TO_SIN).after("fusion")], []):
        torch._dynamo.reset()
        before = max((r.seq for r in backend.history), default=-1)
        with torch.no_grad(), fxmlir.config.patch(stages=stages, cache_dir=None):
            torch.compile(_tanh_product, backend="fxmlir")(a, b)
        sources += [r.source for r in backend.history if r.seq > before]
    assert sources == ["compiled", "compiled", "memory"]


@pytest.mark.parametrize(
    ("stage", "message"),
    [
        (fxmlir.Stage("x", passes="builtin.module(cse)").after("tiling"), "no stage `tiling`"),
        (fxmlir.Stage("bad", pdl=GENERALIZE).after("fusion"), "pipeline stage `bad` failed"),
        (
            fxmlir.Stage("bad", passes="builtin.module(no-such-pass)").after("fusion"),
            "no-such-pass",
        ),
        (fxmlir.Stage("a/b", passes="builtin.module(cse)").after("fusion"), "stage name `a/b`"),
        (fxmlir.Stage("bad", transform="not mlir").before("schedule"), "pipeline stage `bad`"),
        (
            fxmlir.Stage("bad", pdl=TANH_TO_SIN, transform=GENERALIZE).after("fusion"),
            "runs one of",
        ),
        (fxmlir.Stage("bad", work="tiling").after("fusion"), "no work `tiling`"),
    ],
)
@pytest.mark.parametrize("fallback", ["eager", "error"])
def test_a_broken_stage_is_named_whatever_the_fallback(stage, message, fallback):
    torch._dynamo.reset()
    with fxmlir.config.patch(stages=[stage], fallback=fallback), pytest.raises(Exception) as e:
        torch.compile(_tanh_product, backend="fxmlir")(*_inputs())
    assert message in str(e.value)


def test_stages_must_be_stage_edits():
    torch._dynamo.reset()
    with fxmlir.config.patch(stages=[fxmlir.Stage("x", passes="builtin.module(cse)")]):
        with pytest.raises(Exception, match="holds StageEdits"):
            torch.compile(_tanh_product, backend="fxmlir")(*_inputs())


def test_dialects_load_in_every_compile(tmp_path):
    a, b = _inputs()
    actual = _compiled(_tanh_product, (a, b), tmp_path, dialects=[str(XACC_IRDL)])
    torch.testing.assert_close(actual, _tanh_product(a, b), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    with fxmlir.config.patch(dialects=[str(BROKEN_IRDL)]), pytest.raises(Exception) as e:
        torch.compile(_tanh_product, backend="fxmlir")(a, b)
    assert f"dialect from {BROKEN_IRDL}: does not parse" in str(e.value)
    torch._dynamo.reset()
    with fxmlir.config.patch(dialects=["irdl.dialect @empty {"]), pytest.raises(Exception) as e:
        torch.compile(_tanh_product, backend="fxmlir")(a, b)
    assert "dialect from fxmlir.config.dialects: does not parse" in str(e.value)
