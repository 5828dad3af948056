//! Softmax, log-softmax, layer, batch and group normalisation, written as a few fused generics
//! each (a reduction pass and a normalising pass), computing halves in f32. The softmax itself
//! is built in `softmax`, which attention shares.

use super::emit::{iterators, reduced_map};
use super::loops::reuse;
use super::softmax::{Normalise, softmax};
use super::{Emit, Iter, LowerCtx, Registry, Scalar, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::{DType, Node, dims};
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add("aten._softmax.default", |ctx, node| {
        lower_softmax(ctx, node, false)
    });
    r.add("aten._log_softmax.default", |ctx, node| {
        lower_softmax(ctx, node, true)
    });
    r.add("aten.native_layer_norm.default", lower_layer_norm);
    r.add(
        "aten._native_batch_norm_legit_no_training.default",
        |ctx, node| lower_batch_norm(ctx, node, BatchNorm::NoTraining),
    );
    r.add("aten._native_batch_norm_legit.default", |ctx, node| {
        lower_batch_norm(ctx, node, BatchNorm::Legit)
    });
    r.add("aten._native_batch_norm_legit.no_stats", |ctx, node| {
        lower_batch_norm(ctx, node, BatchNorm::NoStats)
    });
    r.add(
        "aten._native_batch_norm_legit_functional.default",
        |ctx, node| lower_batch_norm(ctx, node, BatchNorm::Functional),
    );
    r.add("aten.native_group_norm.default", lower_group_norm);
}

fn lower_softmax<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    log: bool,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if !out.dtype.is_float() {
        return fail("softmax needs a floating-point dtype");
    }
    let rank = x.rank();
    let dims = if rank == 0 {
        vec![]
    } else {
        vec![norm_dim(ctx.int(node, 1)?, rank)?]
    };
    let normalise = if log { Normalise::Log } else { Normalise::Exp };
    let parts = softmax(ctx, &x, &dims, out.dtype, normalise)?;
    Ok(vec![parts.result])
}

fn lower_layer_norm<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let normalized = ctx.int_list(node, 1)?;
    let weight = ctx.opt_tensor(node, 2)?;
    let bias = ctx.opt_tensor(node, 3)?;
    let eps = ctx.float(node, 4)?;
    let rank = x.rank();
    if normalized.len() > rank || x.shape[rank - normalized.len()..] != normalized[..] {
        return fail(format!(
            "normalized_shape {normalized:?} does not end shape {:?}",
            x.shape
        ));
    }
    let out = ctx.out(0)?.clone();
    if !out.dtype.is_float() {
        return fail("layer norm needs a floating-point dtype");
    }
    let axis = rank - normalized.len();
    let dims: Vec<usize> = (axis..rank).collect();
    if normalized.iter().any(|&d| dims::is_symbolic(d)) {
        return fail("a symbolic normalized size is not supported");
    }
    let count: i64 = normalized.iter().product();
    let acc = out.dtype.compute();
    let from = x.dtype;

    let sum = ctx.reduce(&x, &dims, acc, Scalar::Float(0.0), |b, a, v| {
        b.same("arith.addf", &[a, v])
    })?;
    let identity = emit::identity_map(rank);
    let reduced = reduced_map(rank, &dims);
    let inv_count = 1.0 / count.max(1) as f64;
    // mean = sum / n, then sum of squared deviations in one pass over x.
    let zero = ctx.e.splat(&sum.shape, acc, Scalar::Float(0.0))?;
    let squares = ctx.e.generic(
        &[(x.value, identity.clone()), (sum.value, reduced.clone())],
        &[(zero, reduced.clone())],
        &iterators(rank, &dims),
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let mean = b.same(
                "arith.mulf",
                &[v[1], b.constant(Scalar::Float(inv_count), acc)?],
            )?;
            let d = b.same("arith.subf", &[xv, mean])?;
            let sq = b.same("arith.mulf", &[d, d])?;
            Ok(vec![b.same("arith.addf", &[v[2], sq])?])
        },
    )?[0];
    // mean and rstd, as their own small tensors (they are outputs 1 and 2).
    let stats_init = [ctx.e.empty(&sum.shape, acc)?, ctx.e.empty(&sum.shape, acc)?];
    let flat = emit::identity_map(sum.shape.len());
    let stats = ctx.e.generic(
        &[(sum.value, flat.clone()), (squares, flat.clone())],
        &[(stats_init[0], flat.clone()), (stats_init[1], flat.clone())],
        &vec![Iter::Parallel; sum.shape.len()],
        |b, v| {
            let k = b.constant(Scalar::Float(inv_count), acc)?;
            let mean = b.same("arith.mulf", &[v[0], k])?;
            let var = b.same("arith.mulf", &[v[1], k])?;
            let var = b.same("arith.addf", &[var, b.constant(Scalar::Float(eps), acc)?])?;
            Ok(vec![mean, b.same("math.rsqrt", &[var])?])
        },
    )?;
    let (mean, rstd) = (stats[0], stats[1]);

    let affine_map = emit::affine_map(rank, &(axis..rank).map(Some).collect::<Vec<_>>());
    let mut inputs = vec![
        (x.value, identity.clone()),
        (mean, reduced.clone()),
        (rstd, reduced),
    ];
    let mut slots: Vec<DType> = Vec::new();
    for t in [&weight, &bias].into_iter().flatten() {
        inputs.push((t.value, affine_map.clone()));
        slots.push(t.dtype);
    }
    let (has_weight, has_bias) = (weight.is_some(), bias.is_some());
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let out_dtype = out.dtype;
    let normalized_value = ctx.e.generic(
        &inputs,
        &[(init, identity)],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let centered = b.same("arith.subf", &[xv, v[1]])?;
            let mut y = b.same("arith.mulf", &[centered, v[2]])?;
            let mut next = 3;
            if has_weight {
                let w = b.convert(v[next], slots[0], acc)?;
                y = b.same("arith.mulf", &[y, w])?;
                next += 1;
            }
            if has_bias {
                let bv = b.convert(v[next], slots[next - 3], acc)?;
                y = b.same("arith.addf", &[y, bv])?;
            }
            Ok(vec![b.convert(y, acc, out_dtype)?])
        },
    )?[0];

    let mut results = vec![normalized_value];
    for (i, stat) in [mean, rstd].into_iter().enumerate() {
        let meta = ctx.out(i + 1)?.clone();
        let t = Tensor {
            value: stat,
            shape: sum.shape.clone(),
            dtype: acc,
        };
        let t = ctx.cast(&t, meta.dtype)?;
        results.push(ctx.reshape(&t, &meta.shape)?.value);
    }
    Ok(results)
}

// ---- batch and group normalisation ----------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum BatchNorm {
    /// `(input, weight, bias, running_mean, running_var, momentum, eps)`: inference.
    NoTraining,
    /// `(input, weight, bias, running_mean, running_var, training, momentum, eps)`.
    Legit,
    /// `(input, weight, bias, training, momentum, eps)`: no running statistics.
    NoStats,
    /// `Legit`'s arguments; the updated running statistics are outputs 3 and 4.
    Functional,
}

/// A per-channel tensor of `count` elements, flattened to 1-D.
fn per_channel<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: Option<Tensor<'c, 'a>>,
    count: i64,
    what: &str,
) -> Result<Option<Tensor<'c, 'a>>> {
    let Some(t) = t else { return Ok(None) };
    if t.shape.iter().product::<i64>() != count {
        return fail(format!(
            "{what} of shape {:?} does not have {count} elements",
            t.shape
        ));
    }
    Ok(Some(ctx.reshape(&t, &[count])?))
}

/// Batch statistics: the mean and the sum of squared deviations of `x` over every dimension
/// but `keep` (mean = sum / n, as PyTorch's two-pass CPU kernel).
/// How many elements a statistic averages: fixed, or computed when the kernel runs from
/// symbolic sizes (a batch norm's over a symbolic batch).
#[derive(Clone, Copy)]
struct Count<'c, 'a> {
    fixed: i64,
    computed: Option<Value<'c, 'a>>,
}

impl<'c, 'a> Count<'c, 'a> {
    /// The product of `sizes` (symbolic ones included), as a float of `acc` when symbolic.
    fn of(ctx: &LowerCtx<'c, 'a>, sizes: &[i64], acc: DType) -> Result<Self> {
        let fixed = dims::product(sizes)?;
        let computed = if dims::is_symbolic(fixed) {
            Some(ctx.e.size_value(fixed, acc)?)
        } else {
            None
        };
        Ok(Count { fixed, computed })
    }

    /// The count less `k`, a float of `acc` in `b` (a region body).
    fn less<'b>(&self, b: &Emit<'c, 'b>, k: i64, acc: DType) -> Result<Value<'c, 'b>> {
        match self.computed {
            Some(n) if k == 0 => Ok(reuse(n)),
            Some(n) => {
                let k = b.constant(Scalar::Float(k as f64), acc)?;
                b.same("arith.subf", &[reuse(n), k])
            }
            None => b.constant(Scalar::Float((self.fixed - k) as f64), acc),
        }
    }
}

fn moments<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dims: &[usize],
    count: Count<'c, 'a>,
    acc: DType,
) -> Result<(Tensor<'c, 'a>, Value<'c, 'a>)> {
    let rank = x.rank();
    let sum = ctx.reduce(x, dims, acc, Scalar::Float(0.0), |b, a, v| {
        b.same("arith.addf", &[a, v])
    })?;
    let flat = emit::identity_map(sum.shape.len());
    let init = ctx.e.empty(&sum.shape, acc)?;
    let mean = ctx.e.generic(
        &[(sum.value, flat.clone())],
        &[(init, flat)],
        &vec![Iter::Parallel; sum.shape.len()],
        |b, v| Ok(vec![b.same("arith.divf", &[v[0], count.less(b, 0, acc)?])?]),
    )?[0];
    let reduced = reduced_map(rank, dims);
    let zero = ctx.e.splat(&sum.shape, acc, Scalar::Float(0.0))?;
    let from = x.dtype;
    let squares = ctx.e.generic(
        &[(x.value, emit::identity_map(rank)), (mean, reduced.clone())],
        &[(zero, reduced)],
        &iterators(rank, dims),
        |b, v| {
            let d = b.same("arith.subf", &[b.convert(v[0], from, acc)?, v[1]])?;
            let sq = b.same("arith.mulf", &[d, d])?;
            Ok(vec![b.same("arith.addf", &[v[2], sq])?])
        },
    )?[0];
    let mean = Tensor {
        value: mean,
        shape: sum.shape,
        dtype: acc,
    };
    Ok((mean, squares))
}

/// A statistic as the node's output `index`: cast to the recorded dtype, reshaped to the
/// recorded shape.
fn stat_output<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: Tensor<'c, 'a>,
    index: usize,
) -> Result<Value<'c, 'a>> {
    let meta = ctx.out(index)?.clone();
    if dims::product(&meta.shape)? != dims::product(&t.shape)? {
        return fail(format!(
            "output {index} is recorded with shape {:?}, the statistic has shape {:?}",
            meta.shape, t.shape
        ));
    }
    let t = ctx.cast(&t, meta.dtype)?;
    Ok(ctx.reshape(&t, &meta.shape)?.value)
}

/// Batch normalisation as PyTorch's CPU kernel computes it: per channel, `alpha = invstd *
/// weight` and `beta = bias - mean * alpha`, then `x * alpha + beta`. In training the mean and
/// `invstd = 1 / sqrt(var + eps)` (biased variance) come from the batch and are outputs 1
/// and 2; otherwise from the running statistics, and outputs 1 and 2 are empty. The in-place
/// running-statistics update of `_native_batch_norm_legit` is not done (functionalised graphs
/// carry `_native_batch_norm_legit_functional` instead, whose outputs 3 and 4 are the updated
/// statistics: `momentum * batch + (1 - momentum) * running`, with the unbiased variance).
fn lower_batch_norm<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    variant: BatchNorm,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if x.rank() < 2 {
        return fail(format!(
            "batch norm needs an input of rank 2 or more, got shape {:?}",
            x.shape
        ));
    }
    if !out.dtype.is_float() {
        return fail("batch norm needs a floating-point dtype");
    }
    let channels = x.shape[1];
    let weight = per_channel(ctx, ctx.opt_tensor(node, 1)?, channels, "weight")?;
    let bias = per_channel(ctx, ctx.opt_tensor(node, 2)?, channels, "bias")?;
    let (running, training, eps) = match variant {
        BatchNorm::NoTraining => {
            let stats = (ctx.tensor(node, 3)?, ctx.tensor(node, 4)?);
            (Some(stats), false, ctx.float(node, 6)?)
        }
        BatchNorm::Legit | BatchNorm::Functional => {
            let stats = (ctx.tensor(node, 3)?, ctx.tensor(node, 4)?);
            (Some(stats), ctx.bool(node, 5)?, ctx.float(node, 7)?)
        }
        BatchNorm::NoStats => (None, ctx.bool(node, 3)?, ctx.float(node, 5)?),
    };
    let acc = out.dtype.compute();
    let rank = x.rank();
    let channel_map = emit::identity_map(1);
    // mean and invstd per channel, in the accumulator dtype.
    let dims: Vec<usize> = (0..rank).filter(|&d| d != 1).collect();
    let others: Vec<i64> = dims.iter().map(|&d| x.shape[d]).collect();
    let mut deviations = None;
    let (mean, invstd) = if training {
        let count = Count::of(ctx, &others, acc)?;
        let (mean, squares) = moments(ctx, &x, &dims, count, acc)?;
        deviations = Some((squares, count));
        let init = ctx.e.empty(&[channels], acc)?;
        let invstd = ctx.e.generic(
            &[(squares, channel_map.clone())],
            &[(init, channel_map.clone())],
            &[Iter::Parallel],
            |b, v| {
                let var = b.same("arith.divf", &[v[0], count.less(b, 0, acc)?])?;
                Ok(vec![inverse_std(b, var, eps, acc)?])
            },
        )?[0];
        (mean, invstd)
    } else {
        let Some((rm, rv)) = running.clone() else {
            return fail("batch norm in evaluation mode needs running_mean and running_var");
        };
        let rm = per_channel(ctx, Some(rm), channels, "running_mean")?;
        let rv = per_channel(ctx, Some(rv), channels, "running_var")?;
        let (Some(rm), Some(rv)) = (rm, rv) else {
            return fail("internal: missing running statistics");
        };
        let mean = ctx.cast(&rm, acc)?;
        let init = ctx.e.empty(&[channels], acc)?;
        let from = rv.dtype;
        let invstd = ctx.e.generic(
            &[(rv.value, channel_map.clone())],
            &[(init, channel_map.clone())],
            &[Iter::Parallel],
            |b, v| {
                let var = b.convert(v[0], from, acc)?;
                let shifted = b.same("arith.addf", &[var, b.constant(Scalar::Float(eps), acc)?])?;
                let root = b.same("math.sqrt", &[shifted])?;
                let one = b.constant(Scalar::Float(1.0), acc)?;
                Ok(vec![b.same("arith.divf", &[one, root])?])
            },
        )?[0];
        (mean, invstd)
    };

    // alpha and beta per channel.
    let mut inputs = vec![
        (mean.value, channel_map.clone()),
        (invstd, channel_map.clone()),
    ];
    let mut slots = Vec::new();
    for t in [&weight, &bias].into_iter().flatten() {
        inputs.push((t.value, channel_map.clone()));
        slots.push(t.dtype);
    }
    let (has_weight, has_bias) = (weight.is_some(), bias.is_some());
    // In training PyTorch stores the batch statistics in the parameters' dtype (the input's
    // without parameters: a half type for half inputs) and normalises with those rounded
    // values.
    let params_dtype = [&weight, &bias]
        .into_iter()
        .flatten()
        .map(|t| t.dtype)
        .chain(running.as_ref().map(|(m, _)| m.dtype))
        .next()
        .unwrap_or(x.dtype);
    let stats_dtype = if training { params_dtype } else { acc };
    let inits = [
        ctx.e.empty(&[channels], acc)?,
        ctx.e.empty(&[channels], acc)?,
    ];
    let coefficients = ctx.e.generic(
        &inputs,
        &[
            (inits[0], channel_map.clone()),
            (inits[1], channel_map.clone()),
        ],
        &[Iter::Parallel],
        |b, v| {
            let round = |x| b.convert(b.convert(x, acc, stats_dtype)?, stats_dtype, acc);
            let (mean, invstd) = (round(v[0])?, round(v[1])?);
            let mut next = 2;
            let mut alpha = invstd;
            if has_weight {
                let w = b.convert(v[next], slots[0], acc)?;
                alpha = b.same("arith.mulf", &[alpha, w])?;
                next += 1;
            }
            let bias = if has_bias {
                b.convert(v[next], slots[next - 2], acc)?
            } else {
                b.constant(Scalar::Float(0.0), acc)?
            };
            let shift = b.same("arith.mulf", &[mean, alpha])?;
            Ok(vec![alpha, b.same("arith.subf", &[bias, shift])?])
        },
    )?;
    let identity = emit::identity_map(rank);
    let channel = emit::affine_map(rank, &[Some(1)]);
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let (from, out_dtype) = (x.dtype, out.dtype);
    let y = ctx.e.generic(
        &[
            (x.value, identity.clone()),
            (coefficients[0], channel.clone()),
            (coefficients[1], channel),
        ],
        &[(init, identity)],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let scaled = b.same("arith.mulf", &[xv, v[1]])?;
            let y = b.same("arith.addf", &[scaled, v[2]])?;
            Ok(vec![b.convert(y, acc, out_dtype)?])
        },
    )?[0];

    let mut results = vec![y];
    if training {
        results.push(stat_output(ctx, mean.clone(), 1)?);
        let invstd = Tensor {
            value: invstd,
            shape: vec![channels],
            dtype: acc,
        };
        results.push(stat_output(ctx, invstd, 2)?);
    } else {
        for index in [1, 2] {
            let meta = ctx.out(index)?.clone();
            results.push(ctx.e.empty(&meta.shape, meta.dtype)?);
        }
    }
    if variant == BatchNorm::Functional {
        let Some((rm, rv)) = running else {
            return fail("internal: missing running statistics");
        };
        let (Some(rm), Some(rv)) = (
            per_channel(ctx, Some(rm), channels, "running_mean")?,
            per_channel(ctx, Some(rv), channels, "running_var")?,
        ) else {
            return fail("internal: missing running statistics");
        };
        let (new_mean, new_var) = match deviations {
            None => (rm, rv),
            Some((squares, count)) => {
                let momentum = ctx.float(node, 6)?;
                let (rmd, rvd) = (rm.dtype, rv.dtype);
                let inits = [
                    ctx.e.empty(&[channels], acc)?,
                    ctx.e.empty(&[channels], acc)?,
                ];
                let updated = ctx.e.generic(
                    &[
                        (mean.value, channel_map.clone()),
                        (squares, channel_map.clone()),
                        (rm.value, channel_map.clone()),
                        (rv.value, channel_map.clone()),
                    ],
                    &[
                        (inits[0], channel_map.clone()),
                        (inits[1], channel_map.clone()),
                    ],
                    &[Iter::Parallel],
                    |b, v| {
                        let m = b.constant(Scalar::Float(momentum), acc)?;
                        let keep = b.constant(Scalar::Float(1.0 - momentum), acc)?;
                        let round =
                            |x| b.convert(b.convert(x, acc, stats_dtype)?, stats_dtype, acc);
                        let blend = |batch, running| -> Result<Value<'c, '_>> {
                            let fresh = b.same("arith.mulf", &[m, batch])?;
                            let old = b.same("arith.mulf", &[keep, running])?;
                            b.same("arith.addf", &[fresh, old])
                        };
                        let running_mean = b.convert(v[2], rmd, acc)?;
                        let running_var = b.convert(v[3], rvd, acc)?;
                        let unbiased = b.same("arith.divf", &[v[1], count.less(b, 1, acc)?])?;
                        Ok(vec![
                            blend(round(v[0])?, running_mean)?,
                            blend(unbiased, running_var)?,
                        ])
                    },
                )?;
                let as_tensor = |value| Tensor {
                    value,
                    shape: vec![channels],
                    dtype: acc,
                };
                (as_tensor(updated[0]), as_tensor(updated[1]))
            }
        };
        results.push(stat_output(ctx, new_mean, 3)?);
        results.push(stat_output(ctx, new_var, 4)?);
    }
    Ok(results)
}

/// `1 / sqrt(var + eps)`, and 0 where both are 0 (PyTorch's `InvStd` transform).
fn inverse_std<'c, 'b>(
    b: &Emit<'c, 'b>,
    var: Value<'c, 'b>,
    eps: f64,
    acc: DType,
) -> Result<Value<'c, 'b>> {
    let shifted = b.same("arith.addf", &[var, b.constant(Scalar::Float(eps), acc)?])?;
    let root = b.same("math.sqrt", &[shifted])?;
    let one = b.constant(Scalar::Float(1.0), acc)?;
    let inv = b.same("arith.divf", &[one, root])?;
    if eps != 0.0 {
        return Ok(inv);
    }
    let zero = b.constant(Scalar::Float(0.0), acc)?;
    let degenerate = b.cmpf("oeq", var, zero)?;
    b.select(degenerate, zero, inv)
}

/// Group normalisation as PyTorch's CPU kernel: per (sample, group) mean and
/// `rstd = 1 / sqrt(max(var, 0) + eps)`; with an affine weight or bias, per channel
/// `scale = rstd * weight`, `shift = bias - scale * mean` and `y = x * scale + shift`,
/// otherwise `y = (x - mean) * rstd`.
fn lower_group_norm<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let (n, c, hxw) = (ctx.int(node, 3)?, ctx.int(node, 4)?, ctx.int(node, 5)?);
    let groups = ctx.int(node, 6)?;
    let eps = ctx.float(node, 7)?;
    let out = ctx.out(0)?.clone();
    if !out.dtype.is_float() {
        return fail("group norm needs a floating-point dtype");
    }
    if x.rank() < 2
        || x.shape[0] != n
        || x.shape[1] != c
        || dims::product(&[n, c, hxw])? != dims::product(&x.shape)?
    {
        return fail(format!(
            "input of shape {} does not match N={}, C={}, HxW={}",
            dims::shown(&x.shape),
            dims::poly_of(n),
            dims::poly_of(c),
            dims::poly_of(hxw)
        ));
    }
    if dims::is_symbolic(c) {
        return fail("group norm over a symbolic number of channels is not supported");
    }
    if groups <= 0 || c % groups != 0 {
        return fail(format!("{c} channels do not split into {groups} groups"));
    }
    let weight = per_channel(ctx, ctx.opt_tensor(node, 1)?, c, "weight")?;
    let bias = per_channel(ctx, ctx.opt_tensor(node, 2)?, c, "bias")?;
    let per_group = c / groups;
    let acc = out.dtype.compute();
    if x.shape.contains(&0)
        && ![n, hxw].into_iter().any(dims::is_symbolic)
        && n * groups > 0
        && per_group * hxw > 0
    {
        return fail("internal: inconsistent group norm sizes");
    }
    // [N, G, D, HxW]: statistics over the last two.
    let grouped = ctx.reshape(&x, &[n, groups, per_group, hxw])?;
    let count = Count::of(ctx, &[per_group, hxw], acc)?;
    let (mean, squares) = moments(ctx, &grouped, &[2, 3], count, acc)?;
    let stats_map = emit::identity_map(2);
    let init = ctx.e.empty(&[n, groups], acc)?;
    let rstd = ctx.e.generic(
        &[(squares, stats_map.clone())],
        &[(init, stats_map)],
        &[Iter::Parallel; 2],
        |b, v| {
            let var = b.same("arith.divf", &[v[0], count.less(b, 0, acc)?])?;
            let var = b.same(
                "arith.maximumf",
                &[var, b.constant(Scalar::Float(0.0), acc)?],
            )?;
            let shifted = b.same("arith.addf", &[var, b.constant(Scalar::Float(eps), acc)?])?;
            let root = b.same("math.sqrt", &[shifted])?;
            let one = b.constant(Scalar::Float(1.0), acc)?;
            Ok(vec![b.same("arith.divf", &[one, root])?])
        },
    )?[0];

    let identity = emit::identity_map(4);
    let stat = emit::affine_map(4, &[Some(0), Some(1)]);
    let param = emit::affine_map(4, &[Some(1), Some(2)]);
    let mut inputs = vec![
        (grouped.value, identity.clone()),
        (mean.value, stat.clone()),
        (rstd, stat),
    ];
    let mut slots = Vec::new();
    for t in [&weight, &bias].into_iter().flatten() {
        let t = ctx.reshape(t, &[groups, per_group])?;
        slots.push(t.dtype);
        inputs.push((t.value, param.clone()));
    }
    let (has_weight, has_bias) = (weight.is_some(), bias.is_some());
    let init = ctx.e.empty(&grouped.shape, out.dtype)?;
    let (from, out_dtype) = (x.dtype, out.dtype);
    let y = ctx.e.generic(
        &inputs,
        &[(init, identity)],
        &[Iter::Parallel; 4],
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let y = if has_weight || has_bias {
                let mut next = 3;
                let mut scale = v[2];
                if has_weight {
                    let w = b.convert(v[next], slots[0], acc)?;
                    scale = b.same("arith.mulf", &[scale, w])?;
                    next += 1;
                }
                // -scale * mean + (bias or 0), in that order (the sign of a zero shift).
                let shift = b.same("arith.mulf", &[scale, v[1]])?;
                let shift = b.same("arith.negf", &[shift])?;
                let bv = if has_bias {
                    b.convert(v[next], slots[next - 3], acc)?
                } else {
                    b.constant(Scalar::Float(0.0), acc)?
                };
                let shift = b.same("arith.addf", &[shift, bv])?;
                let scaled = b.same("arith.mulf", &[xv, scale])?;
                b.same("arith.addf", &[scaled, shift])?
            } else {
                let centered = b.same("arith.subf", &[xv, v[1]])?;
                b.same("arith.mulf", &[centered, v[2]])?
            };
            Ok(vec![b.convert(y, acc, out_dtype)?])
        },
    )?[0];
    let y = Tensor {
        value: y,
        shape: grouped.shape.clone(),
        dtype: out.dtype,
    };
    let y = ctx.reshape(&y, &out.shape)?;
    let rstd = Tensor {
        value: rstd,
        shape: vec![n, groups],
        dtype: acc,
    };
    Ok(vec![
        y.value,
        stat_output(ctx, mean, 1)?,
        stat_output(ctx, rstd, 2)?,
    ])
}
