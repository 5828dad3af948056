"""The fused attention forward (``src/lower/flash.rs``): scaled dot-product attention over fixed
sizes in f32, bf16 and f16 (at least 8 query rows and 8,192 scores per head) is one kernel of
query blocks walking key blocks with an online softmax. Sizes here cross the blocks (rows, keys
and head sizes that no tile divides), with masks of every broadcast shape, causality with more
or fewer queries than keys, grouped-query attention, strided operands and training (the
backward reads the fused forward's logsumexp), against eager, on the host's vectors and on
AVX2's. Each compile is strict (nothing falls back to eager) and its dump must show the fused
kernel, not the unfused products."""

import math
import pathlib

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from strict import compile_strict

# f32: sums over a few hundred keys in another order than eager's (blocks of 32-128 keys,
# rescaled as the maximum grows). Half precision: eager rounds the probabilities to the
# dtype before the product with v, the fused kernel keeps them in f32.
TOL = {
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

#: The vectors compiled for: the host's (AVX-512 where it has it) and AVX2's 8-lane tiles,
#: which every x86-64 host this project supports runs.
TARGETS = ["host", "x86-64-v3"]


def _inputs(shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


def _padding_mask(batch, keys):
    """An additive mask `[B, 1, 1, S]` hiding each sequence's padded tail."""
    mask = torch.zeros(batch, 1, 1, keys)
    for b in range(batch):
        mask[b, ..., keys - 7 * (b + 1) :] = -math.inf
    return mask


def _sparse_mask(queries, keys):
    """An additive mask `[L, S]`: random -inf entries, one row wholly hidden (its output is
    zeros), finite biases elsewhere."""
    gen = torch.Generator().manual_seed(1)
    mask = torch.randn(queries, keys, generator=gen)
    mask[torch.rand(queries, keys, generator=gen) < 0.3] = -math.inf
    mask[queries // 2] = -math.inf
    return mask


# name: (q shape, k shape, v shape, keyword arguments of scaled_dot_product_attention)
CASES = {
    # 70 rows, 150 keys, a head size of 40: every size padded.
    "ragged": ((2, 3, 70, 40), (2, 3, 150, 40), (2, 3, 150, 40), {}),
    "causal": ((1, 2, 200, 64), (1, 2, 200, 64), (1, 2, 200, 64), {"is_causal": True}),
    # Rows past the last key see every key; rows before the first key block's end see fewer.
    "causal_long_query": ((1, 2, 260, 16), (1, 2, 40, 16), (1, 2, 40, 16), {"is_causal": True}),
    "causal_short_query": ((1, 2, 40, 16), (1, 2, 300, 16), (1, 2, 300, 16), {"is_causal": True}),
    "scale": ((1, 4, 64, 32), (1, 4, 160, 32), (1, 4, 160, 32), {"scale": 0.3}),
    "grouped": ((2, 8, 100, 64), (2, 2, 100, 64), (2, 2, 100, 64), {"enable_gqa": True}),
    # Fewer keys than one block of 32: the rest of the block hidden.
    "few_keys": ((3, 2, 300, 64), (3, 2, 30, 64), (3, 2, 30, 64), {}),
    "large_head": ((1, 2, 33, 128), (1, 2, 257, 128), (1, 2, 257, 128), {}),
}

MASKS = {
    "padding": lambda b, h, rows, keys: _padding_mask(b, keys),
    "sparse": lambda b, h, rows, keys: _sparse_mask(rows, keys),
    "full": lambda b, h, rows, keys: torch.randn(b, h, rows, keys),
    "per_head_column": lambda b, h, rows, keys: torch.randn(1, h, rows, 1),
}


def _assert_fused(tmp_path, backward=False):
    """The lowered module has the fused kernel's loop and, without a backward (whose products
    stay batched), no batched product."""
    lowered = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.00-input.mlir"))
    products = ("vector.fma" in lowered) or ("x86vector.avx512.dot" in lowered)
    assert "scf.forall" in lowered and products, lowered[:2000]
    assert backward or "linalg.batch_matmul" not in lowered


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_forward_matches_eager(name, dtype, target, tmp_path):
    q_shape, k_shape, v_shape, kwargs = CASES[name]
    args = _inputs([q_shape, k_shape, v_shape], dtype)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    actual = compile_strict(fn, args, tmp_path, target)
    _assert_fused(tmp_path)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual, fn(*args), atol=atol, rtol=rtol)


FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("mask", sorted(MASKS))
def test_fused_forward_with_masks(mask, causal, target, tmp_path):
    """The mask added after the scale, then causality: both outputs of the op (the output and
    the logsumexp, which a backward reads) match eager's."""
    b, h, rows, keys = 2, 3, 100, 90
    q, k, v = _inputs([(b, h, rows, 32), (b, h, keys, 32), (b, h, keys, 32)], torch.float32)
    m = MASKS[mask](b, h, rows, keys)

    def fn(q, k, v, m):
        return FLASH(q, k, v, is_causal=causal, attn_mask=m)

    actual = compile_strict(fn, [q, k, v, m], tmp_path, target)
    _assert_fused(tmp_path)
    for got, want in zip(actual, fn(q, k, v, m)):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    "shapes",
    [[(3, 2, 1, 64), (3, 2, 700, 64)], [(8, 12, 64, 64), (8, 12, 64, 64)]],
    ids=["decode_step", "small_scores"],
)
def test_small_attention_stays_unfused(shapes, tmp_path):
    """A decode step's single query row, and score matrices that stay in cache, take the
    unfused forward (batched products), which is faster there."""
    q_shape, kv_shape = shapes
    args = _inputs([q_shape, kv_shape, kv_shape], torch.float32)
    actual = compile_strict(F.scaled_dot_product_attention, args, tmp_path, "host")
    lowered = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.00-input.mlir"))
    assert "linalg.batch_matmul" in lowered and "vector.fma" not in lowered
    torch.testing.assert_close(actual, F.scaled_dot_product_attention(*args), atol=2e-5, rtol=2e-5)


def test_boolean_mask_and_nan_rows(tmp_path):
    """A boolean mask (PyTorch makes it additive before the kernel) and a query row holding a
    NaN: that row's output is NaN, as eager's, and no other row is touched."""
    q, k, v = _inputs([(1, 2, 120, 16), (1, 2, 70, 16), (1, 2, 70, 16)], torch.float32)
    q[0, 1, 7, 3] = math.nan
    keep = torch.rand(1, 1, 120, 70, generator=torch.Generator().manual_seed(2)) > 0.4
    keep[..., 0] = True

    def fn(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    actual = compile_strict(fn, [q, k, v, keep], tmp_path, "host")
    _assert_fused(tmp_path)
    expected = fn(q, k, v, keep)
    assert torch.isnan(actual[0, 1, 7]).all()
    torch.testing.assert_close(actual, expected, atol=2e-5, rtol=2e-5, equal_nan=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_training_step_reads_the_fused_logsumexp(causal, tmp_path):
    """A training step: the forward is the fused kernel, the backward recomputes the
    probabilities from its logsumexp; the gradients match eager's."""
    shapes = [(2, 4, 100, 32), (2, 2, 90, 32), (2, 2, 90, 32)]
    leaves = [t.requires_grad_() for t in _inputs(shapes, torch.float32)]
    eager = [t.detach().clone().requires_grad_() for t in leaves]

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return (out * out).sum()

    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        loss = torch.compile(step, backend="fxmlir")(*leaves)
        loss.backward()
    _assert_fused(tmp_path, backward=True)
    expected = step(*eager)
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-5)
    for got, want in zip(leaves, eager):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-4, rtol=1e-4)


def test_strided_operands_and_an_expanded_mask(tmp_path):
    """Operands as a model makes them: heads split off a projection by a view and a transpose
    (non-contiguous), and a padding mask expanded over the heads and rows (stride 0)."""
    b, rows, heads, e = 2, 96, 4, 32
    x = _inputs([(b, rows, 3 * heads * e)], torch.float32)[0]
    keys = torch.zeros(b, rows)
    keys[1, 80:] = -math.inf

    def fn(x, keys):
        q, k, v = x.view(b, rows, 3, heads, e).permute(2, 0, 3, 1, 4)
        mask = keys[:, None, None, :].expand(b, heads, rows, rows)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, rows, heads * e)

    actual = compile_strict(fn, [x, keys], tmp_path, "host")
    _assert_fused(tmp_path)
    torch.testing.assert_close(actual, fn(x, keys), atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(
    not fxmlir._fxmlir.target_info("host")["bf16_dot"],
    reason="the bf16 pair products need AVX512-BF16 to run; lit-tests/lower/attention.json checks "
    "their IR on every host",
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_runs_on_pair_products(causal, tmp_path):
    """On AVX512-BF16, bf16 attention multiplies bf16 pairs (``vdpbf16ps``) and rounds the
    probabilities to bf16, as eager does: its error against an f32 reference is eager's own."""
    shapes = [(1, 4, 100, 64), (1, 4, 150, 64), (1, 4, 150, 64)]
    q, k, v = _inputs(shapes, torch.float32)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    halves = [t.bfloat16() for t in (q, k, v)]
    actual = compile_strict(fn, halves, tmp_path, "host")
    lowered = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.00-input.mlir"))
    assert "x86vector.avx512.dot" in lowered and "vector.fma" not in lowered
    reference = fn(q, k, v)
    eager_error = (fn(*halves).float() - reference).abs().max().item()
    error = (actual.float() - reference).abs().max().item()
    assert error <= 1.5 * eager_error + 1e-3, (error, eager_error)
