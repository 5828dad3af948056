"""`f32` exp and erf as inline polynomials (`pipeline::polynomials`): compared with float64
references over their whole range and at their special values, compiled for an AVX-512 and
an AVX2 target (whichever this host can run), so that the vector width LLVM picks for each
is covered. Both functions reach the kernel as `math.exp`/`math.erf` of f32 on scalars (the
loops LLVM vectorises) here, and as vectors in a product's epilogue in test_chains."""

import fxmlir
import numpy as np
import pytest
import torch

#: Errors measured while fitting: exp at most 1.03 ulp, erf 2.4 (eager: 0.6 and 1.0).
EXP_ULPS = 2.0
ERF_ULPS = 3.0

SPECIALS = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 3.92, -3.92, 4.0]


def _targets():
    targets = ["x86-64-v3"]
    if fxmlir.target_info("host")["vector_bytes"] == 64:
        targets.append("x86-64-v4")
    return targets


def _compiled(fn, x, target):
    with fxmlir.config.patch(fallback="error", target=target), torch.no_grad():
        return torch.compile(fn, backend="fxmlir")(x)


def _ulps(got, x, fn):
    """Errors of `got` in units in the last place of the float64 reference rounded to f32,
    over the finite references; and the reference."""
    reference = fn(x.double())
    finite = torch.isfinite(reference) & (reference.abs() <= torch.finfo(torch.float32).max)
    spacing = torch.from_numpy(np.spacing(np.abs(reference.float().numpy()))).double()
    errors = (got.double() - reference).abs() / spacing
    return errors[finite], reference


@pytest.mark.parametrize("target", _targets())
def test_exp_is_within_two_ulps_from_overflow_to_underflow(target):
    x = torch.cat([torch.linspace(-110.0, 95.0, 1_000_001), torch.tensor(SPECIALS)])
    got = _compiled(torch.exp, x, target)
    errors, reference = _ulps(got, x, torch.exp)
    assert errors.max().item() <= EXP_ULPS, x[errors.argmax()]
    # Overflow to infinity past 88.72, underflow through the subnormals to 0, NaN kept.
    assert torch.equal(got[x > 88.723], torch.full_like(got[x > 88.723], float("inf")))
    assert torch.all(got[x < -104.0] == 0)
    assert torch.all(got[(x > -103.0) & (x < -87.4)] > 0)
    assert torch.isnan(got[torch.isnan(x)]).all()
    assert got[x == float("-inf")].item() == 0.0
    assert torch.equal(got[x == 0], torch.ones(2))


@pytest.mark.parametrize("target", _targets())
def test_erf_is_within_three_ulps_and_exactly_one_from_3_92(target):
    x = torch.cat(
        [torch.linspace(-6.0, 6.0, 1_000_001), torch.randn(10_000) * 1e-3, torch.tensor(SPECIALS)]
    )
    got = _compiled(torch.erf, x, target)
    errors, _ = _ulps(got, x, torch.erf)
    assert errors.max().item() <= ERF_ULPS, x[errors.argmax()]
    beyond = x.abs() >= 3.92
    assert torch.equal(got[beyond], torch.sign(x[beyond]))
    assert torch.isnan(got[torch.isnan(x)]).all()
    # erf is odd: the sign of zero is kept.
    zeros = got[x == 0]
    assert torch.equal(torch.signbit(zeros), torch.signbit(x[x == 0]))
