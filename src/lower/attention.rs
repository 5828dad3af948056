//! Scaled dot-product attention, kept whole by the backend rather than decomposed (tracing
//! PyTorch's decomposition, and the ops it made, was more than half of aot_autograd's time on
//! BERT and GPT-2). The forward over fixed sizes in f32 or half precision is one fused kernel
//! ([`flash`]) that never writes the score matrix. Otherwise (f64, symbolic sizes, a decode
//! step's few query rows, score matrices that stay in cache) it lowers to
//! what the decomposition would give: a batched `q @ kᵀ`, one elementwise pass for the scale,
//! the mask and causality, a softmax, and a batched product with `v`. The backward recomputes
//! the probabilities from the forward's logsumexp and takes four batched products. The matrix
//! products go through the schedule like any other.

use super::softmax::{Normalise, softmax};
use super::{
    Checked, Emit, LowerCtx, Operand, Registry, Scalar, Tensor, elements, emit, fail, flash,
    layout, products,
};
use crate::error::{Check, Result};
use crate::graph::{Arg, DType, Node, dims};
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add_checked(
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        Checked {
            check: Check::SIZE_MISMATCH,
            applies: |_| true,
        },
        lower_flash_attention,
    );
    r.add(
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
        lower_flash_attention_backward,
    );
}

/// Where the forward and the backward op keep the arguments they share.
struct Slots {
    query: usize,
    dropout: usize,
    causal: usize,
    mask: usize,
    scale: usize,
}

/// The factor of the scores: given, or `1 / sqrt(E)` of a symbolic head size `E`, computed in
/// the kernel.
#[derive(Clone, Copy)]
enum Scale {
    Fixed(f64),
    HeadSize(i64),
}

impl Scale {
    /// The factor as a value of `dtype` in a body `b` builds.
    fn value<'c, 'b>(self, b: &Emit<'c, 'b>, dtype: DType) -> Result<Value<'c, 'b>> {
        match self {
            Scale::Fixed(v) => b.constant(Scalar::Float(v), dtype),
            Scale::HeadSize(e) => b.same("math.rsqrt", &[b.size_value(e, dtype)?]),
        }
    }
}

/// `q` `[B, H, L, E]`, `k` `[B, Hkv, S, E]` and `v` `[B, Hkv, S, Ev]`, where `H` is a multiple
/// of `Hkv` (grouped-query attention: query head `h` attends with key and value head
/// `h / (H / Hkv)`), the additive `mask` (the query's dtype, broadcast to `[B, H, L, S]`),
/// causality and the scale of the scores.
struct Attention<'c, 'a> {
    q: Tensor<'c, 'a>,
    k: Tensor<'c, 'a>,
    v: Tensor<'c, 'a>,
    mask: Option<Tensor<'c, 'a>>,
    causal: bool,
    scale: Scale,
    at: flash::Sizes,
}

impl<'c, 'a> Attention<'c, 'a> {
    fn read(ctx: &LowerCtx<'c, 'a>, node: &Node, at: &Slots) -> Result<Self> {
        let (q, k, v) = (
            ctx.tensor(node, at.query)?,
            ctx.tensor(node, at.query + 1)?,
            ctx.tensor(node, at.query + 2)?,
        );
        let dropout = ctx.float(node, at.dropout)?;
        if dropout != 0.0 {
            return fail(format!(
                "attention with dropout_p={dropout} draws random numbers: it runs in eager PyTorch"
            ));
        }
        if !q.dtype.is_float() {
            return fail("attention needs a floating-point dtype");
        }
        let [batch, heads, l, e] = four(&q, "query")?;
        let [kb, kv_heads, s, ke] = four(&k, "key")?;
        let [vb, vh, vs, ev] = four(&v, "value")?;
        // Keys and values traced with lengths of their own symbols (a cache per tensor) are
        // checked to be as long when the kernel runs, and read as the keys' length.
        let (v, vs) = if vs != s && (dims::is_symbolic(vs) || dims::is_symbolic(s)) {
            let differ = ctx.e.cmpi("ne", ctx.e.size(s)?, ctx.e.size(vs)?)?;
            ctx.report(differ)?;
            let mut shape = v.shape.clone();
            shape[2] = s;
            (Tensor { shape, ..v }, s)
        } else {
            (v, vs)
        };
        if heads != kv_heads && (dims::is_symbolic(heads) || dims::is_symbolic(kv_heads)) {
            return fail(format!(
                "grouped-query attention over symbolic numbers of query and key heads is not supported (query {:?}, key {:?})",
                q.shape, k.shape
            ));
        }
        if [kb, ke] != [batch, e]
            || [vb, vh, vs] != [batch, kv_heads, s]
            || kv_heads == 0
            || (heads != kv_heads && heads % kv_heads != 0)
        {
            return fail(format!(
                "query {:?}, key {:?} and value {:?} do not fit: expected [B, H, L, E], [B, Hkv, S, E] and [B, Hkv, S, Ev] with H a multiple of Hkv",
                q.shape, k.shape, v.shape
            ));
        }
        let mask = ctx.opt_tensor(node, at.mask)?;
        if let Some(m) = &mask {
            if m.dtype != q.dtype {
                return fail(format!(
                    "attn_mask must have the query's dtype {}, got {} (PyTorch's kernel refuses it too)",
                    q.dtype.name(),
                    m.dtype.name()
                ));
            }
            let scores = [batch, heads, l, s];
            if emit::broadcast_shapes(&[&m.shape, &scores]).ok().as_deref() != Some(&scores[..]) {
                return fail(format!(
                    "attn_mask of shape {} does not broadcast to the scores {}",
                    dims::shown(&m.shape),
                    dims::shown(&scores)
                ));
            }
        }
        let scale = match ctx.arg(node, at.scale)? {
            Arg::None if dims::is_symbolic(e) => Scale::HeadSize(e),
            Arg::None => Scale::Fixed(1.0 / (e as f64).sqrt()),
            _ => Scale::Fixed(ctx.float(node, at.scale)?),
        };
        Ok(Attention {
            causal: ctx.bool(node, at.causal)?,
            q,
            k,
            v,
            mask,
            scale,
            at: flash::Sizes {
                batch,
                heads,
                kv_heads,
                l,
                s,
                e,
                ev,
            },
        })
    }

    /// The forward as one fused kernel (see [`flash`]), when it takes these operands.
    fn fused(&self, dtype: DType) -> Option<flash::Problem<'c, 'a>> {
        let Scale::Fixed(scale) = self.scale else {
            return None;
        };
        let problem = flash::Problem {
            q: self.q.clone(),
            k: self.k.clone(),
            v: self.v.clone(),
            mask: self.mask.clone(),
            causal: self.causal,
            scale,
            at: self.at,
            dtype,
        };
        flash::applies(&problem).then_some(problem)
    }

    /// The accumulator dtype.
    fn acc(&self) -> DType {
        self.q.dtype.compute()
    }

    fn scores_shape(&self) -> [i64; 4] {
        [self.at.batch, self.at.heads, self.at.l, self.at.s]
    }

    /// Products run over the batch and key heads together; the query rows of the heads that
    /// share a key head stack into one product with it, so no key or value is copied per
    /// query head.
    fn bh(&self) -> Result<i64> {
        dims::product(&[self.at.batch, self.at.kv_heads])
    }

    fn rows(&self) -> Result<i64> {
        dims::product(&[self.ratio(), self.at.l])
    }

    /// `t` `[B, H, L, X]` as `[B·Hkv, (H / Hkv)·L, X]`, through `[B, Hkv, H / Hkv, L, X]`
    /// (each step a reshape whose groups are products of whole sizes, also when `L` is
    /// symbolic).
    fn stacked(&self, ctx: &LowerCtx<'c, 'a>, t: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
        let ratio = self.ratio();
        if ratio == 1 {
            return self.batched(ctx, t, self.rows()?);
        }
        let [b, _, l, x] = four(t, "a stacked operand")?;
        let split = ctx.reshape(t, &[b, self.at.kv_heads, ratio, l, x])?;
        self.batched(ctx, &split, self.rows()?)
    }

    /// `t` `[B·Hkv, (H / Hkv)·L, X]` back as `[B, H, L, X]`, through `[B, Hkv, H / Hkv, L, X]`.
    fn unstacked(&self, ctx: &LowerCtx<'c, 'a>, t: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
        let x = *t.shape.last().unwrap_or(&1);
        let whole = [self.at.batch, self.at.heads, self.at.l, x];
        let ratio = self.ratio();
        if ratio == 1 {
            return ctx.reshape(t, &whole);
        }
        let split = ctx.reshape(t, &[self.at.batch, self.at.kv_heads, ratio, self.at.l, x])?;
        ctx.reshape(&split, &whole)
    }

    /// Query heads per key head.
    fn ratio(&self) -> i64 {
        if self.at.heads == self.at.kv_heads {
            1
        } else {
            self.at.heads / self.at.kv_heads
        }
    }

    /// `t` `[B, Hkv, S, X]` as `[B·Hkv, S, X]`.
    fn per_key_head(&self, ctx: &LowerCtx<'c, 'a>, t: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
        self.batched(ctx, t, self.at.s)
    }

    /// `t` as `[B·Hkv, rows, X]` (`X` its last size).
    fn batched(
        &self,
        ctx: &LowerCtx<'c, 'a>,
        t: &Tensor<'c, 'a>,
        rows: i64,
    ) -> Result<Tensor<'c, 'a>> {
        let last = *t.shape.last().unwrap_or(&1);
        ctx.reshape(t, &[self.bh()?, rows, last])
    }

    /// The masked, scaled scores `q @ kᵀ * scale + mask` `[B, H, L, S]` in the accumulator
    /// dtype, -inf above the diagonal (query `i` sees keys `j <= i`) when causal.
    fn scores(&self, ctx: &LowerCtx<'c, 'a>) -> Result<Tensor<'c, 'a>> {
        let acc = self.acc();
        let q3 = self.stacked(ctx, &self.q)?;
        let kt = transposed(ctx, &self.per_key_head(ctx, &self.k)?)?;
        let product = products::contract(ctx, &q3, &kt, self.q.dtype)?;
        let shape = self.scores_shape();
        let product = self.unstacked(ctx, &product)?;
        let mut operands = vec![Operand::Tensor(product)];
        operands.extend(self.mask.clone().map(Operand::Tensor));
        let (scale, causal) = (self.scale, self.causal);
        let value = ctx.elementwise(
            &operands,
            &vec![acc; operands.len()],
            acc,
            &shape,
            acc,
            |b, x| {
                let mut score = b.same("arith.mulf", &[x[0], scale.value(b, acc)?])?;
                if let Some(&m) = x.get(1) {
                    score = b.same("arith.addf", &[score, m])?;
                }
                if causal {
                    let (i, j) = (elements::linalg_index(b, 2)?, elements::linalg_index(b, 3)?);
                    let above = b.cmpi("ugt", j, i)?;
                    let hidden = b.constant(Scalar::Float(f64::NEG_INFINITY), acc)?;
                    score = b.select(above, hidden, score)?;
                }
                Ok(score)
            },
        )?;
        Ok(Tensor {
            value,
            shape: shape.to_vec(),
            dtype: acc,
        })
    }
}

/// `(output, logsumexp)`: `softmax(q @ kᵀ * scale + mask) @ v` and the logsumexp `[B, H, L]`
/// of the masked, scaled scores. A row whose keys are all masked gives zeros and a logsumexp
/// of 0, as PyTorch's kernel does.
fn lower_flash_attention<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let slots = Slots {
        query: 0,
        dropout: 3,
        causal: 4,
        mask: 5,
        scale: 6,
    };
    let a = Attention::read(ctx, node, &slots)?;
    let dtype = ctx.out(0)?.dtype;
    if let Some(problem) = a.fused(dtype) {
        let (output, logsumexp) = flash::forward(ctx, &problem)?;
        return Ok(vec![output, logsumexp]);
    }
    let acc = a.acc();
    let scores = a.scores(ctx)?;

    // Probabilities in the input dtype (as PyTorch's kernel multiplies them with v), then @ v.
    let probabilities = softmax(ctx, &scores, &[3], dtype, Normalise::ExpMasked)?;
    let p = Tensor {
        value: probabilities.result,
        shape: scores.shape.clone(),
        dtype,
    };
    let attended = products::contract(
        ctx,
        &a.stacked(ctx, &p)?,
        &a.per_key_head(ctx, &a.v)?,
        dtype,
    )?;
    let attended = ctx.cast(&attended, dtype)?;
    let output = a.unstacked(ctx, &attended)?;

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

/// `(grad_query, grad_key, grad_value)` from `grad_out` and the forward's `out` and
/// `logsumexp`. With the probabilities `p = exp(scores - logsumexp)` recomputed (0 where the
/// scores are masked), `dv = pᵀ @ dout`, `dp = dout @ vᵀ`, `ds = p * (dp - rowsum(dout *
/// out)) * scale`, `dq = ds @ k` and `dk = dsᵀ @ q`; with grouped-query attention the
/// products over the stacked query rows sum each key head's gradient over its query heads.
/// Everything is computed in the accumulator dtype.
fn lower_flash_attention_backward<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let slots = Slots {
        query: 1,
        dropout: 6,
        causal: 7,
        mask: 8,
        scale: 9,
    };
    let a = Attention::read(ctx, node, &slots)?;
    let (grad, out, logsumexp) = (
        ctx.tensor(node, 0)?,
        ctx.tensor(node, 4)?,
        ctx.tensor(node, 5)?,
    );
    let out_shape = [a.at.batch, a.at.heads, a.at.l, a.at.ev];
    if grad.shape != out_shape || out.shape != out_shape {
        return fail(format!(
            "grad_out {} and out {} must have the output's shape {}",
            dims::shown(&grad.shape),
            dims::shown(&out.shape),
            dims::shown(&out_shape)
        ));
    }
    if logsumexp.shape != [a.at.batch, a.at.heads, a.at.l] {
        return fail(format!(
            "logsumexp {} must have the shape {}",
            dims::shown(&logsumexp.shape),
            dims::shown(&[a.at.batch, a.at.heads, a.at.l])
        ));
    }
    let acc = a.acc();
    let scores = a.scores(ctx)?;
    let shape = a.scores_shape();
    let per_row = ctx.reshape(&logsumexp, &[a.at.batch, a.at.heads, a.at.l, 1])?;
    let p = Tensor {
        value: ctx.elementwise(
            &[Operand::Tensor(scores), Operand::Tensor(per_row)],
            &[acc, acc],
            acc,
            &shape,
            acc,
            |b, x| {
                let shifted = b.same("arith.subf", &[x[0], x[1]])?;
                b.exp_shifted(shifted, acc)
            },
        )?,
        shape: shape.to_vec(),
        dtype: acc,
    };
    let grad3 = a.stacked(ctx, &grad)?;
    let p3 = a.stacked(ctx, &p)?;

    // dv = pᵀ @ dout, summed over each key head's query rows.
    let dv = products::contract(ctx, &transposed(ctx, &p3)?, &grad3, acc)?;

    // rowsum(dout * out): the probability-weighted mean of dp along each row.
    let weighted = Tensor {
        value: ctx.elementwise(
            &[Operand::Tensor(grad.clone()), Operand::Tensor(out)],
            &[acc, acc],
            acc,
            &out_shape,
            acc,
            |b, x| b.same("arith.mulf", &[x[0], x[1]]),
        )?,
        shape: out_shape.to_vec(),
        dtype: acc,
    };
    let mean = ctx.reduce(&weighted, &[3], acc, Scalar::Float(0.0), |b, sum, x| {
        b.same("arith.addf", &[sum, x])
    })?;
    let mean = ctx.reshape(&mean, &[a.at.batch, a.at.heads, a.at.l, 1])?;

    let vt = transposed(ctx, &a.per_key_head(ctx, &a.v)?)?;
    let dp = products::contract(ctx, &grad3, &vt, acc)?;
    let dp = a.unstacked(ctx, &dp)?;
    let scale = a.scale;
    let ds = Tensor {
        value: ctx.elementwise(
            &[
                Operand::Tensor(p),
                Operand::Tensor(dp),
                Operand::Tensor(mean),
            ],
            &[acc, acc, acc],
            acc,
            &shape,
            acc,
            |b, x| {
                let centred = b.same("arith.subf", &[x[1], x[2]])?;
                let ds = b.same("arith.mulf", &[x[0], centred])?;
                b.same("arith.mulf", &[ds, scale.value(b, acc)?])
            },
        )?,
        shape: shape.to_vec(),
        dtype: acc,
    };
    let ds3 = a.stacked(ctx, &ds)?;
    let dq = products::contract(ctx, &ds3, &a.per_key_head(ctx, &a.k)?, acc)?;
    let dk = products::contract(ctx, &transposed(ctx, &ds3)?, &a.stacked(ctx, &a.q)?, acc)?;

    let mut grads = vec![a.unstacked(ctx, &ctx.cast(&dq, ctx.out(0)?.dtype)?)?.value];
    for (g, index, shape) in [
        (dk, 1, [a.at.batch, a.at.kv_heads, a.at.s, a.at.e]),
        (dv, 2, [a.at.batch, a.at.kv_heads, a.at.s, a.at.ev]),
    ] {
        let g = ctx.cast(&g, ctx.out(index)?.dtype)?;
        grads.push(ctx.reshape(&g, &shape)?.value);
    }
    Ok(grads)
}

/// `t` `[N, X, Y]` as `[N, Y, X]`.
fn transposed<'c, 'a>(ctx: &LowerCtx<'c, 'a>, t: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
    Ok(Tensor {
        value: layout::permute(ctx, t, &[0, 2, 1])?,
        shape: vec![t.shape[0], t.shape[2], t.shape[1]],
        dtype: t.dtype,
    })
}

/// The four sizes of a rank-4 attention operand.
fn four(t: &Tensor<'_, '_>, what: &str) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(t.shape.as_slice()).or_else(|_| {
        fail(format!(
            "{what} must have rank 4, got shape {}",
            dims::shown(&t.shape)
        ))
    })
}
