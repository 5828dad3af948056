//! Softmax, log-softmax and layer normalisation, written as a few fused generics each (a
//! reduction pass and a normalising pass), computing halves in f32.

use super::{Iter, LowerCtx, Registry, Scalar, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::{DType, Node};
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add("aten._softmax.default", |ctx, node| {
        lower_softmax(ctx, node, false)
    });
    r.add("aten._log_softmax.default", |ctx, node| {
        lower_softmax(ctx, node, true)
    });
    r.add("aten.native_layer_norm.default", lower_layer_norm);
}

/// The map of a tensor that lost `dims` (a reduction result) read inside a loop nest over
/// all `rank` dimensions.
fn reduced_map(rank: usize, dims: &[usize]) -> String {
    let kept: Vec<Option<usize>> = (0..rank).filter(|d| !dims.contains(d)).map(Some).collect();
    emit::affine_map(rank, &kept)
}

fn iterators(rank: usize, dims: &[usize]) -> Vec<Iter> {
    (0..rank)
        .map(|d| {
            if dims.contains(&d) {
                Iter::Reduction
            } else {
                Iter::Parallel
            }
        })
        .collect()
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
    let acc = out.dtype.compute();
    let from = x.dtype;
    let max = ctx.reduce(
        &x,
        &dims,
        acc,
        Scalar::Float(f64::NEG_INFINITY),
        |b, a, v| b.same("arith.maximumf", &[a, v]),
    )?;
    let zero = ctx.e.splat(&max.shape, acc, Scalar::Float(0.0))?;
    let identity = emit::identity_map(rank);
    let reduced = reduced_map(rank, &dims);
    let sum = ctx.e.generic(
        &[(x.value, identity.clone()), (max.value, reduced.clone())],
        &[(zero, reduced.clone())],
        &iterators(rank, &dims),
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let shifted = b.same("arith.subf", &[xv, v[1]])?;
            let e = b.same("math.exp", &[shifted])?;
            Ok(vec![b.same("arith.addf", &[v[2], e])?])
        },
    )?[0];
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let out_dtype = out.dtype;
    let result = ctx.e.generic(
        &[
            (x.value, identity.clone()),
            (max.value, reduced.clone()),
            (sum, reduced),
        ],
        &[(init, identity)],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let shifted = b.same("arith.subf", &[xv, v[1]])?;
            let r = if log {
                let l = b.same("math.log", &[v[2]])?;
                b.same("arith.subf", &[shifted, l])?
            } else {
                let e = b.same("math.exp", &[shifted])?;
                b.same("arith.divf", &[e, v[2]])?
            };
            Ok(vec![b.convert(r, acc, out_dtype)?])
        },
    )?;
    Ok(result)
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
