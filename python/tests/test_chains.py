"""Elementwise chains after a matrix product (bias, activation, residual sum, score scaling),
also behind the reshapes a `view` lowers to, become the product's one epilogue
(`pipeline::chains`): the results match eager, and the schedule stage leaves no elementwise
generic of its own for them."""

import pathlib
import re

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from op_harness import compiled_and_eager

# Products over 32 terms, accumulated in another order than eager's, then erf/tanh.
ATOL = RTOL = 1e-4


def _bias_gelu_residual(x, w, b, r):
    return F.gelu(x @ w + b) + r


def _scaled_scores(q, k):
    return (q @ k) / 8.0


def _bias_relu_scale(x, w, b):
    return torch.relu(x @ w + b) * 0.5


def _bias_tanh_gelu(x, w, b):
    return F.gelu(x @ w + b, approximate="tanh")


def _bias_math(x, w, b):
    return torch.sigmoid(torch.exp(-torch.tanh(torch.erf(x @ w + b))))


def _bias_pow_log1p(x, w, b):
    return torch.log1p(torch.pow((x @ w + b).abs() + 1.0, 1.5))


def _split_last_dim(x, w, s):
    return (x @ w).view(64, 8, 8) * s


def _view_output(x, w):
    return (x @ w).view(4, 16, 64)


def _two_uses(x, w, b):
    y = x @ w + b
    return F.gelu(y), y


# name: (function, input shapes, dtype, whether the whole chain folds into the epilogue). The
# weights come transposed already, so no transposing copy (a generic) precedes the product.
CASES = {
    # mm -> view -> add bias (broadcast) -> gelu -> add: behind a reshape, then direct.
    "bias_gelu_residual": (
        _bias_gelu_residual,
        [(4, 16, 32), (32, 64), (64,), (4, 16, 64)],
        torch.float32,
        True,
    ),
    # bmm -> view -> div: the scaling joins the batched product.
    "scaled_scores": (_scaled_scores, [(2, 4, 16, 32), (2, 4, 32, 16)], torch.float32, True),
    # mm -> add bias -> relu -> mul: a direct chain of three.
    "bias_relu_scale": (_bias_relu_scale, [(64, 32), (32, 64), (64,)], torch.float32, True),
    "bias_tanh_gelu_f64": (
        _bias_tanh_gelu,
        [(2, 8, 32), (32, 64), (64,)],
        torch.float64,
        True,
    ),
    # Math functions in the epilogue: libmvec's vector functions on the register tile.
    "bias_math": (_bias_math, [(64, 32), (32, 64), (64,)], torch.float32, True),
    "bias_pow_log1p_f64": (_bias_pow_log1p, [(64, 32), (32, 64), (64,)], torch.float64, True),
    # The view splits the last dimension, which the broadcast operand reads: not taken.
    "split_last_dim": (_split_last_dim, [(64, 32), (32, 64), (8,)], torch.float32, False),
    # A view as the last op: the product is written through a view of the output buffer.
    "view_output": (_view_output, [(64, 32), (32, 64)], torch.float32, True),
    # The product's value is also an output: nothing after it folds.
    "two_uses": (_two_uses, [(64, 32), (32, 48), (48,)], torch.float32, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_chain_matches_eager(name, threads, tmp_path):
    fn, shapes, dtype, folds = CASES[name]
    actual, expected = compiled_and_eager(fn, shapes, dtype, tmp_path, fallback="error")
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    scheduled = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.02-schedule.mlir"))
    assert "vector.contract" in scheduled, "the product was not scheduled"
    if folds:
        assert "linalg.generic" not in scheduled, "an elementwise op stayed out of the epilogue"
    else:
        assert "linalg.generic" in scheduled


@pytest.mark.parametrize("name", ["bias_gelu_residual", "bias_math", "bias_pow_log1p_f64"])
def test_epilogue_math_is_inline_or_calls_vector_functions(name, tmp_path):
    """The epilogue's math on a whole register tile is, in the loops stage, inline arithmetic
    for f32 exp and erf (`pipeline::polynomials`) and calls of libmvec's vector functions for
    the rest (`pipeline::vmath`), never one libm call per element."""
    fn, shapes, dtype, _ = CASES[name]
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype) for s in shapes]
    torch._dynamo.reset()
    with torch.no_grad():
        with fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error"):
            torch.compile(fn, backend="fxmlir")(*args)
    loops = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.07-loops.mlir"))
    suffix = "f" if dtype == torch.float32 else ""
    called = set(re.findall(rf"call @_ZGV[bde]N\d+v+_([a-z0-9]+){suffix}\(", loops))
    expected_calls, inlined = {
        "bias_gelu_residual": (set(), {"erf"}),
        "bias_math": ({"tanh"}, {"erf", "exp"}),
        "bias_pow_log1p_f64": ({"pow", "log1p"}, set()),
    }[name]
    assert expected_calls <= called and not called & inlined, f"vector calls of {sorted(called)}"
    if inlined:
        assert re.search(r"math\.fma .*: vector<", loops), "no polynomial on vectors"
    ops = "|".join("powf" if f == "pow" else f for f in expected_calls | inlined)
    left = re.findall(rf"math\.(?:{ops}) [^:]*: vector<", loops)
    assert not left, f"math left on vectors: {left}"


@pytest.mark.parametrize("name", ["bias_gelu_residual", "scaled_scores"])
def test_chain_over_a_dynamic_batch_folds(name, threads, tmp_path):
    """With the batch dimension symbolic, the chain still folds into the product's epilogue
    (its views' sizes come from the graph or the residual's own sizes): one kernel serves every
    batch, matching eager at each."""
    fn, shapes, dtype, _ = CASES[name]
    torch.manual_seed(0)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxmlir")
    with (
        torch.no_grad(),
        fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error", specializations=0),
    ):
        for batch in (3, 5, 2, 7):
            # The batched inputs (of three dimensions or more) take the batch.
            args = [torch.randn((batch, *s[1:]) if len(s) > 2 else s, dtype=dtype) for s in shapes]
            for a in args:
                if a.dim() > 2:
                    torch._dynamo.mark_dynamic(a, 0)
            torch.testing.assert_close(compiled(*args), fn(*args), atol=ATOL, rtol=RTOL)
    schedules = list(pathlib.Path(tmp_path).glob("*.02-schedule.mlir"))
    assert len(schedules) == 1, f"kernels: {[p.name for p in schedules]}"
    scheduled = schedules[0].read_text()
    assert "tensor<?x" in scheduled, "the kernel was compiled for one batch"
    assert "vector.contract" in scheduled, "the product was not scheduled"
    assert "linalg.generic" not in scheduled, "an elementwise op stayed out of the epilogue"
