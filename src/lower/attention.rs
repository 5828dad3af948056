//! Scaled dot-product attention, kept whole by the backend rather than decomposed (tracing
//! PyTorch's decomposition, and the ops it made, was more than half of aot_autograd's time on
//! BERT and GPT-2). It lowers to
//! what the decomposition would give: a batched `q @ kᵀ`, one elementwise pass for the scale,
//! the mask and causality, a softmax, and a batched product with `v`; the matrix products go
//! through the schedule like any other.

use super::normalization::{Normalise, softmax};
use super::{
    LowerCtx, Operand, Registry, Scalar, Tensor, data_movement, emit, fail, linear, reduction,
};
use crate::error::Result;
use crate::graph::{Arg, Node};
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add(
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        lower_flash_attention,
    );
}

/// `(output, logsumexp)` of attention over `q` `[B, H, L, E]`, `k` `[B, Hkv, S, E]` and `v`
/// `[B, Hkv, S, Ev]`, where `H` is a multiple of `Hkv` (grouped-query attention: query head
/// `h` attends with key and value head `h / (H / Hkv)`): `softmax(q @ kᵀ * scale + mask) @ v`, where `mask` is the additive
/// `attn_mask` (same dtype as `q`, broadcast to `[B, H, L, S]`) and, when `is_causal`, -inf
/// above the diagonal (query `i` sees keys `j <= i`). `logsumexp` `[B, H, L]` is that of the
/// masked, scaled scores. A row whose keys are all masked gives zeros and a logsumexp of 0,
/// as PyTorch's kernel does.
fn lower_flash_attention<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let (q, k, v) = (
        ctx.tensor(node, 0)?,
        ctx.tensor(node, 1)?,
        ctx.tensor(node, 2)?,
    );
    let dropout = ctx.float(node, 3)?;
    if dropout != 0.0 {
        return fail(format!(
            "attention with dropout_p={dropout} draws random numbers: it runs in eager PyTorch"
        ));
    }
    let causal = ctx.bool(node, 4)?;
    let mask = ctx.opt_tensor(node, 5)?;
    let out = ctx.out(0)?.clone();
    if !out.dtype.is_float() {
        return fail("attention needs a floating-point dtype");
    }
    let [batch, heads, l, e] = four(&q, "query")?;
    let [kb, kv_heads, s, ke] = four(&k, "key")?;
    let [vb, vh, vs, ev] = four(&v, "value")?;
    if [kb, ke] != [batch, e]
        || [vb, vh, vs] != [batch, kv_heads, s]
        || kv_heads == 0
        || heads % kv_heads != 0
    {
        return fail(format!(
            "query {:?}, key {:?} and value {:?} do not fit: expected [B, H, L, E], [B, Hkv, S, E] and [B, Hkv, S, Ev] with H a multiple of Hkv",
            q.shape, k.shape, v.shape
        ));
    }
    if let Some(m) = &mask
        && m.dtype != q.dtype
    {
        return fail(format!(
            "attn_mask must have the query's dtype {}, got {} (PyTorch's kernel refuses it too)",
            q.dtype.name(),
            m.dtype.name()
        ));
    }
    let scale = match ctx.arg(node, 6)? {
        Arg::None => 1.0 / (e as f64).sqrt(),
        _ => ctx.float(node, 6)?,
    };
    let acc = out.dtype.compute();
    let scores_shape = [batch, heads, l, s];
    if let Some(m) = &mask
        && emit::broadcast_shapes(&[&m.shape, &scores_shape])
            .ok()
            .as_deref()
            != Some(&scores_shape[..])
    {
        return fail(format!(
            "attn_mask of shape {:?} does not broadcast to the scores {scores_shape:?}",
            m.shape
        ));
    }

    // q @ kᵀ over the batch and key heads together. With grouped-query attention (fewer key
    // and value heads than query heads), query head h reads key head h / group: the group's
    // query rows stack into one product with their shared keys, so no key is copied.
    let bh = batch * kv_heads;
    let rows = heads / kv_heads * l;
    let q3 = ctx.reshape(&q, &[bh, rows, e])?;
    let k3 = ctx.reshape(&k, &[bh, s, e])?;
    let kt = Tensor {
        value: data_movement::permute(ctx, &k3, &[0, 2, 1])?,
        shape: vec![bh, e, s],
        dtype: k3.dtype,
    };
    let product = linear::contract(ctx, &q3, &kt, out.dtype)?;
    let product = ctx.reshape(&product, &scores_shape)?;

    // Scale, mask and causality in one pass.
    let mut operands = vec![Operand::Tensor(product)];
    operands.extend(mask.map(Operand::Tensor));
    let scores = ctx.elementwise(
        &operands,
        &vec![acc; operands.len()],
        acc,
        &scores_shape,
        acc,
        |b, x| {
            let mut score = b.same(
                "arith.mulf",
                &[x[0], b.constant(Scalar::Float(scale), acc)?],
            )?;
            if let Some(&m) = x.get(1) {
                score = b.same("arith.addf", &[score, m])?;
            }
            if causal {
                let (i, j) = (
                    reduction::linalg_index(b, 2)?,
                    reduction::linalg_index(b, 3)?,
                );
                let above = b.cmpi("ugt", j, i)?;
                let hidden = b.constant(Scalar::Float(f64::NEG_INFINITY), acc)?;
                score = b.select(above, hidden, score)?;
            }
            Ok(score)
        },
    )?;
    let scores = Tensor {
        value: scores,
        shape: scores_shape.to_vec(),
        dtype: acc,
    };

    // Probabilities in the input dtype (as PyTorch's kernel multiplies them with v), then @ v.
    let probabilities = softmax(ctx, &scores, &[3], out.dtype, Normalise::ExpMasked)?;
    let p3 = ctx.reshape(
        &Tensor {
            value: probabilities.result,
            shape: scores_shape.to_vec(),
            dtype: out.dtype,
        },
        &[bh, rows, s],
    )?;
    let v3 = ctx.reshape(&v, &[bh, s, ev])?;
    let attended = linear::contract(ctx, &p3, &v3, out.dtype)?;
    let attended = ctx.cast(&attended, out.dtype)?;
    let output = ctx.reshape(&attended, &[batch, heads, l, ev])?;

    // logsumexp = max + log(sum), 0 for a fully masked row (whose sum is 0).
    let stats_shape = probabilities.max.shape.clone();
    let logsumexp = ctx.elementwise(
        &[
            Operand::Tensor(probabilities.max),
            Operand::Tensor(probabilities.sum),
        ],
        &[acc, acc],
        acc,
        &stats_shape,
        acc,
        |b, x| {
            let zero = b.constant(Scalar::Float(0.0), acc)?;
            let empty = b.cmpf("oeq", x[1], zero)?;
            let log = b.same("math.log", &[x[1]])?;
            let sum = b.same("arith.addf", &[x[0], log])?;
            b.select(empty, zero, sum)
        },
    )?;
    Ok(vec![output.value, logsumexp])
}

/// The four sizes of a rank-4 attention operand.
fn four(t: &Tensor<'_, '_>, what: &str) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(t.shape.as_slice())
        .or_else(|_| fail(format!("{what} must have rank 4, got shape {:?}", t.shape)))
}
