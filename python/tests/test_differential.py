"""Differential testing: random small programs over the supported ops, compiled with fxmlir
and compared with eager PyTorch. They vary dtypes (and so promotion), broadcasting, size-0
and size-1 dimensions, non-contiguous and channels-last inputs, views, and in-place ops
(functionalised, as aot_autograd does). Each compiles whole, in strict mode.
Each program is built from its seed alone, so a failure names the seed that reproduces it
(``FXMLIR_DIFF_SEED=<seed> pytest -k differential``); ``FXMLIR_DIFF_PROGRAMS`` sets how many
run (the suite runs 2,000)."""

import os
import random

import fxmlir
import pytest
import torch
from fxmlir import backend
from torch.fx.experimental.proxy_tensor import make_fx

PROGRAMS = int(os.environ.get("FXMLIR_DIFF_PROGRAMS", "2000"))
BATCH = 100
DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16]
TOL = {torch.float16: (2e-3, 2e-3), torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10)}


def _shape(rng: random.Random) -> list[int]:
    return [rng.choice([0, 1, 1, 2, 3, 4, 5]) for _ in range(rng.randint(0, 4))]


def _input(rng: random.Random, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        t = torch.randint(-5, 6, shape, generator=generator, dtype=dtype)
    layout = rng.random()
    if layout < 0.2 and t.dim() >= 2:
        # Non-contiguous: the transpose of a contiguous tensor, transposed back.
        t = t.transpose(0, -1).contiguous().transpose(0, -1)
    elif layout < 0.3 and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.float32)


UNARY = [
    lambda x: -x if x.dtype != torch.bool else ~x,
    lambda x: x.abs() if x.dtype != torch.bool else x,
    lambda x: torch.tanh(_float(x)),
    lambda x: torch.exp(_float(x).clamp(-5, 5)),
    lambda x: torch.relu(x) if x.dtype != torch.bool else x,
    lambda x: torch.sigmoid(_float(x)),
    lambda x: x * 2 + 1 if x.dtype != torch.bool else x,
    lambda x: x.to(torch.float32),
    lambda x: x.to(torch.int64),
    lambda x: torch.clamp(x, -1, 2) if x.dtype != torch.bool else x,
    lambda x: x.t() if x.dim() == 2 else x,
    lambda x: x.unsqueeze(0),
    lambda x: x.reshape(-1),
    lambda x: x[..., ::2] if x.dim() >= 1 else x,
    lambda x: x.sum(-1) if x.dim() >= 1 else x,
    lambda x: x.amax(-1, keepdim=True) if x.dim() >= 1 and x.shape[-1] > 0 else x,
    lambda x: _float(x).mean(0) if x.dim() >= 1 else x,
    lambda x: x > 0,
]


def _binary(rng: random.Random):
    ops = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum]
    op = rng.choice(ops)

    def apply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.dtype == torch.bool and b.dtype == torch.bool and op is torch.sub:
            return a ^ b
        return op(a, b)

    return apply


def _program(seed: int):
    """A program of the seed: inputs and a function of them."""
    rng = random.Random(seed)
    base = _shape(rng)
    inputs = []
    for _ in range(rng.randint(1, 3)):
        # Broadcastable against the base shape: a suffix of it, some dimensions 1.
        shape = base[rng.randint(0, len(base)) :]
        shape = [d if rng.random() < 0.7 else 1 for d in shape]
        inputs.append(_input(rng, shape, rng.choice(DTYPES)))
    steps = []
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.4:
            steps.append(("binary", _binary(rng), rng.randrange(len(inputs))))
        else:
            steps.append(("unary", rng.choice(UNARY), None))
    in_place = rng.random() < 0.2

    def fn(*xs):
        value = xs[0]
        for kind, op, other in steps:
            value = op(value, xs[other]) if kind == "binary" else op(value)
        if in_place and value.is_floating_point() and value.numel() > 0:
            value = value.clone()
            value.mul_(0.5)
        return value

    return inputs, fn


def _check(seed: int) -> None:
    inputs, fn = _program(seed)
    try:
        expected = fn(*inputs)
    except RuntimeError:
        return  # not a valid program (a broadcast or a promotion eager refuses)
    with torch.no_grad():
        gm = make_fx(
            torch.func.functionalize(fn),
            decomposition_table=backend.decompositions(),
            tracing_mode="fake",
        )(*inputs)
    # Strict: a program that ran any op eagerly fails, so nothing passes by falling back.
    with fxmlir.config.patch(fallback="error", background=False):
        got = fxmlir.compile_graph(gm, list(inputs))(list(inputs))
    if isinstance(got, (list, tuple)):
        (got,) = got
    assert got.dtype == expected.dtype and got.shape == expected.shape, (seed, got, expected)
    rtol, atol = TOL.get(expected.dtype, (0, 0))
    torch.testing.assert_close(
        got, expected, rtol=rtol, atol=atol, equal_nan=True, msg=f"seed {seed}"
    )


SEED = os.environ.get("FXMLIR_DIFF_SEED")


@pytest.mark.parametrize("batch", range((PROGRAMS + BATCH - 1) // BATCH) if SEED is None else [0])
def test_random_programs_match_eager(batch):
    seeds = [int(SEED)] if SEED is not None else range(batch * BATCH, (batch + 1) * BATCH)
    for seed in seeds:
        _check(seed)
