//! Reductions: sum, prod, mean, amax/amin, var/var_mean with Bessel correction, any,
//! argmax/argmin and max/min along a dimension (values and first indices). Each reduces in
//! PyTorch's accumulator dtype and reshapes to the recorded (keepdim) shape. `histc` counts
//! the elements per bin in one scalar pass.

use super::elements::{extract, extreme, insert, linalg_index};
use super::loops::{loop_nest, nth, reuse};
use super::{Emit, Iter, LowerCtx, Registry, Scalar, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::{DType, Node, dims};
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Reduce {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
    Any,
    Var,
    VarMean,
    ArgMax,
    ArgMin,
    /// `max.dim` / `min.dim`: the values and the int64 index of the first extreme.
    MaxDim,
    MinDim,
}

/// How the reduced dimensions are given.
#[derive(Clone, Copy)]
enum Dims {
    /// All dimensions (the op has no `dim` argument).
    All,
    /// An optional int list at this argument; `None` or `[]` means all dimensions.
    List(usize),
    /// An optional int list at this argument; `None` means all dimensions and `[]` none
    /// (`any.dims`, unlike `sum.dim_IntList`).
    ExactList(usize),
    /// A single int at this argument.
    One(usize),
    /// An optional single int at this argument; `None` means all dimensions, flattened.
    OptOne(usize),
}

const REDUCTIONS: &[(&str, Reduce, Dims)] = &[
    ("aten.sum.default", Reduce::Sum, Dims::All),
    ("aten.sum.dim_IntList", Reduce::Sum, Dims::List(1)),
    ("aten.mean.default", Reduce::Mean, Dims::All),
    ("aten.mean.dim", Reduce::Mean, Dims::List(1)),
    ("aten.amax.default", Reduce::Max, Dims::List(1)),
    ("aten.amin.default", Reduce::Min, Dims::List(1)),
    ("aten.max.default", Reduce::Max, Dims::All),
    ("aten.min.default", Reduce::Min, Dims::All),
    ("aten.any.default", Reduce::Any, Dims::All),
    ("aten.any.dim", Reduce::Any, Dims::One(1)),
    ("aten.any.dims", Reduce::Any, Dims::ExactList(1)),
    ("aten.var.correction", Reduce::Var, Dims::List(1)),
    ("aten.var_mean.correction", Reduce::VarMean, Dims::List(1)),
    ("aten.argmax.default", Reduce::ArgMax, Dims::OptOne(1)),
    ("aten.argmin.default", Reduce::ArgMin, Dims::OptOne(1)),
    ("aten.prod.default", Reduce::Prod, Dims::All),
    ("aten.prod.dim_int", Reduce::Prod, Dims::One(1)),
    ("aten.max.dim", Reduce::MaxDim, Dims::One(1)),
    ("aten.min.dim", Reduce::MinDim, Dims::One(1)),
    // var.dim(self, dim, unbiased, keepdim): `unbiased` (a bool) reads as correction 1 or 0.
    ("aten.var.dim", Reduce::Var, Dims::List(1)),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, reduce, dims) in REDUCTIONS {
        r.add(op, move |ctx, node| {
            lower_reduction(ctx, node, reduce, dims)
        });
    }
    r.add("aten.histc.default", lower_histc);
}

fn reduced_dims(
    ctx: &LowerCtx,
    node: &Node,
    dims: Dims,
    rank: usize,
) -> Result<Option<Vec<usize>>> {
    let list = match dims {
        Dims::All => None,
        Dims::List(i) => ctx.opt_int_list(node, i)?,
        Dims::ExactList(i) => match node.args.get(i) {
            None | Some(crate::graph::Arg::None) => None,
            Some(_) => Some(ctx.int_list(node, i)?),
        },
        Dims::One(i) => Some(vec![ctx.int(node, i)?]),
        Dims::OptOne(i) => ctx.opt_int(node, i)?.map(|d| vec![d]),
    };
    let Some(list) = list else { return Ok(None) };
    let mut out: Vec<usize> = list
        .iter()
        .map(|&d| norm_dim(d, rank))
        .collect::<Result<_>>()?;
    out.sort_unstable();
    out.dedup();
    // Reducing over a dimension of a 0-d tensor is the identity.
    if rank == 0 {
        out.clear();
    }
    Ok(Some(out))
}

fn lower_reduction<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    reduce: Reduce,
    dims: Dims,
) -> Result<Vec<Value<'c, 'a>>> {
    let mut x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    let dims = match reduced_dims(ctx, node, dims, x.rank())? {
        // argmax without a dim indexes the flattened tensor; so does argmax of a 0-d tensor
        // (whose dim 0 / -1 names the tensor itself).
        d if matches!(
            reduce,
            Reduce::ArgMax | Reduce::ArgMin | Reduce::MaxDim | Reduce::MinDim
        ) && d.as_ref().is_none_or(|d| d.is_empty()) =>
        {
            x = ctx.reshape(&x, &[dims::product(&x.shape)?])?;
            vec![0]
        }
        Some(d) => d,
        None => (0..x.rank()).collect(),
    };
    let count = dims::product(&dims.iter().map(|&d| x.shape[d]).collect::<Vec<_>>())?;
    let results = match reduce {
        Reduce::Sum | Reduce::Mean => {
            let acc = out.dtype.accumulator();
            let float = acc.is_float();
            let sum = ctx.reduce(&x, &dims, acc, Scalar::Int(0), |b, a, v| {
                b.same(if float { "arith.addf" } else { "arith.addi" }, &[a, v])
            })?;
            let result = if matches!(reduce, Reduce::Mean) {
                scale(ctx, &sum, count, 0)?
            } else {
                sum
            };
            vec![result]
        }
        Reduce::Prod => {
            let acc = out.dtype.accumulator();
            let float = acc.is_float();
            vec![ctx.reduce(&x, &dims, acc, Scalar::Int(1), |b, a, v| {
                b.same(if float { "arith.mulf" } else { "arith.muli" }, &[a, v])
            })?]
        }
        Reduce::Max | Reduce::Min => {
            let max = matches!(reduce, Reduce::Max);
            let dtype = x.dtype;
            let init = extreme(dtype, max);
            vec![ctx.reduce(&x, &dims, dtype, init, |b, a, v| {
                b.same(min_max_op(dtype, max), &[a, v])
            })?]
        }
        Reduce::Any => {
            let any = ctx.reduce(&x, &dims, DType::Bool, Scalar::Bool(false), |b, a, v| {
                b.same("arith.ori", &[a, v])
            })?;
            vec![any]
        }
        Reduce::Var | Reduce::VarMean => {
            let correction = match node.args.get(2) {
                Some(crate::graph::Arg::None) | None => 1.0,
                Some(_) => ctx.float(node, 2)?,
            };
            let (var, mean) = variance(ctx, &x, &dims, out.dtype, correction)?;
            if matches!(reduce, Reduce::VarMean) {
                vec![var, mean]
            } else {
                vec![var]
            }
        }
        Reduce::ArgMax | Reduce::ArgMin => match dims.first() {
            Some(&dim) => vec![arg_extreme(ctx, &x, dim, matches!(reduce, Reduce::ArgMax))?.1],
            None => return fail("argmax/argmin needs a dimension to reduce"),
        },
        Reduce::MaxDim | Reduce::MinDim => match dims.first() {
            Some(&dim) => {
                let (values, indices) =
                    arg_extreme(ctx, &x, dim, matches!(reduce, Reduce::MaxDim))?;
                vec![values, indices]
            }
            None => return fail("max/min needs a dimension to reduce"),
        },
    };
    results
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let meta = ctx.out(i)?.clone();
            let t = ctx.cast(t, meta.dtype)?;
            Ok(ctx.reshape(&t, &meta.shape)?.value)
        })
        .collect()
}

/// `t / divisor` elementwise (a mean from a sum); `divisor` 0 gives NaN as in PyTorch.
fn scale<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: &Tensor<'c, 'a>,
    count: i64,
    correction: i64,
) -> Result<Tensor<'c, 'a>> {
    let dtype = t.dtype;
    if !dtype.is_float() {
        return fail("mean needs a floating-point dtype");
    }
    let divisor = divisor(ctx, count, correction as f64, dtype)?;
    let value = ctx.elementwise(
        &[super::Operand::Tensor(t.clone()), divisor],
        &[dtype, dtype],
        dtype,
        &t.shape,
        dtype,
        |b, v| b.same("arith.divf", &[v[0], v[1]]),
    )?;
    Ok(Tensor {
        value,
        shape: t.shape.clone(),
        dtype,
    })
}

/// `max(count - correction, 0)` as an operand of `dtype`: a constant, or for a symbolic count
/// (see [`dims`]) a 0-d tensor computed from the sizes.
fn divisor<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    count: i64,
    correction: f64,
    dtype: DType,
) -> Result<super::Operand<'c, 'a>> {
    if !dims::is_symbolic(count) {
        return Ok(super::Operand::Scalar(Scalar::Float(
            (count as f64 - correction).max(0.0),
        )));
    }
    let e = &ctx.e;
    let n = e.size_value(count, dtype)?;
    let less = e.same(
        "arith.subf",
        &[n, e.constant(Scalar::Float(correction), dtype)?],
    )?;
    let kept = e.same(
        "arith.maximumf",
        &[less, e.constant(Scalar::Float(0.0), dtype)?],
    )?;
    Ok(super::Operand::Tensor(ctx.scalar_tensor(kept, dtype)?))
}

/// Two-pass variance: the mean, then the mean squared deviation with `correction`.
fn variance<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dims: &[usize],
    out: DType,
    correction: f64,
) -> Result<(Tensor<'c, 'a>, Tensor<'c, 'a>)> {
    if !out.is_float() {
        return fail("variance needs a floating-point dtype");
    }
    let acc = out.compute();
    let count = dims::product(&dims.iter().map(|&d| x.shape[d]).collect::<Vec<_>>())?;
    let sum = ctx.reduce(x, dims, acc, Scalar::Int(0), |b, a, v| {
        b.same("arith.addf", &[a, v])
    })?;
    let mean = scale(ctx, &sum, count, 0)?;
    // Deviation: broadcast the mean back over the reduced dimensions.
    let rank = x.rank();
    let kept: Vec<Option<usize>> = (0..rank).filter(|d| !dims.contains(d)).map(Some).collect();
    let init = ctx.e.splat(&mean.shape, acc, Scalar::Int(0))?;
    let iters: Vec<Iter> = (0..rank)
        .map(|d| {
            if dims.contains(&d) {
                Iter::Reduction
            } else {
                Iter::Parallel
            }
        })
        .collect();
    let from = x.dtype;
    let squares = ctx.e.generic(
        &[
            (x.value, emit::identity_map(rank)),
            (mean.value, emit::affine_map(rank, &kept)),
        ],
        &[(init, emit::affine_map(rank, &kept))],
        &iters,
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let d = b.same("arith.subf", &[xv, v[1]])?;
            let sq = b.same("arith.mulf", &[d, d])?;
            Ok(vec![b.same("arith.addf", &[v[2], sq])?])
        },
    )?;
    let squares = Tensor {
        value: squares[0],
        shape: mean.shape.clone(),
        dtype: acc,
    };
    // A fractional correction is legal in PyTorch; divide by max(N - correction, 0).
    let value = ctx.elementwise(
        &[
            super::Operand::Tensor(squares),
            divisor(ctx, count, correction, acc)?,
        ],
        &[acc, acc],
        acc,
        &mean.shape,
        acc,
        |b, v| b.same("arith.divf", &[v[0], v[1]]),
    )?;
    let var = Tensor {
        value,
        shape: mean.shape.clone(),
        dtype: acc,
    };
    Ok((var, mean))
}

fn min_max_op(dtype: DType, max: bool) -> &'static str {
    match (dtype.is_float(), dtype.is_unsigned(), max) {
        // maximumf/minimumf propagate NaN, as torch.amax does.
        (true, _, true) => "arith.maximumf",
        (true, _, false) => "arith.minimumf",
        (false, true, true) => "arith.maxui",
        (false, true, false) => "arith.minui",
        (false, false, true) => "arith.maxsi",
        (false, false, false) => "arith.minsi",
    }
}

/// The maximum (or minimum) along `dim` and the index of its first occurrence; NaN counts as
/// the extreme (the first NaN wins).
fn arg_extreme<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dim: usize,
    max: bool,
) -> Result<(Tensor<'c, 'a>, Tensor<'c, 'a>)> {
    let rank = x.rank();
    let dtype = x.dtype;
    let kept: Vec<Option<usize>> = (0..rank).filter(|&d| d != dim).map(Some).collect();
    let shape: Vec<i64> = (0..rank)
        .filter(|&d| d != dim)
        .map(|d| x.shape[d])
        .collect();
    if x.shape.get(dim) == Some(&0) {
        return fail("argmax/argmin/max/min of an empty dimension is undefined");
    }
    let best = ctx.e.splat(&shape, dtype, extreme(dtype, max))?;
    let index = ctx.e.splat(&shape, DType::Int64, Scalar::Int(0))?;
    let iters: Vec<Iter> = (0..rank)
        .map(|d| {
            if d == dim {
                Iter::Reduction
            } else {
                Iter::Parallel
            }
        })
        .collect();
    let out_map = emit::affine_map(rank, &kept);
    let results = ctx.e.generic(
        &[(x.value, emit::identity_map(rank))],
        &[(best, out_map.clone()), (index, out_map)],
        &iters,
        |b, v| {
            let (value, current, current_index) = (v[0], v[1], v[2]);
            let better = if dtype.is_float() {
                let strict = b.cmpf(if max { "ogt" } else { "olt" }, value, current)?;
                let value_nan = b.cmpf("uno", value, value)?;
                let current_ok = b.cmpf("ord", current, current)?;
                let nan_wins = b.same("arith.andi", &[value_nan, current_ok])?;
                b.same("arith.ori", &[strict, nan_wins])?
            } else {
                b.compare(if max { "gt" } else { "lt" }, value, current, dtype)?
            };
            let position = linalg_index(b, dim)?;
            let position = b.op1(
                "arith.index_cast",
                &[position],
                b.elem_type(DType::Int64)?,
                &[],
            )?;
            Ok(vec![
                b.select(better, value, current)?,
                b.select(better, position, current_index)?,
            ])
        },
    )?;
    Ok((
        Tensor {
            value: results[0],
            shape: shape.clone(),
            dtype,
        },
        Tensor {
            value: results[1],
            shape,
            dtype: DType::Int64,
        },
    ))
}

/// `histc(x, bins, min, max)`: how many elements of `x` fall in each of `bins` equal-width
/// bins over `[min, max]`, binned as PyTorch's CPU kernel bins them: in `x`'s dtype (each
/// operation rounded to it, as the half types' operators round), bin
/// `trunc((x - min) * bins / (max - min))`, the last bin closed on the right, elements outside
/// the range and NaN left out. When `min == max` the range is the data's own, widened by one on
/// each side when that is a single value too; data holding NaN then counts nothing, where
/// PyTorch raises. One scalar pass over `x`; the counts are float32 for the half types (PyTorch
/// counts in the half type, per thread, which stops counting at 256 in bfloat16).
fn lower_histc<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    let bins = ctx.int(node, 1)?;
    let (min, max) = (ctx.float(node, 2)?, ctx.float(node, 3)?);
    let dtype = x.dtype;
    if !dtype.is_float() {
        return fail(format!(
            "histc needs a floating-point input, got {}",
            dtype.name()
        ));
    }
    if bins <= 0 {
        return fail(format!("histc needs at least one bin, got {bins}"));
    }
    if !(min.is_finite() && max.is_finite()) {
        return fail(format!("histc: range of [{min}, {max}] is not finite"));
    }
    if out.shape != [bins] || out.dtype != dtype {
        return fail(format!(
            "histc of {} into {bins} bins cannot give the recorded {}{:?}",
            dtype.name(),
            out.dtype.name(),
            out.shape
        ));
    }
    let n = dims::product(&x.shape)?;
    let acc = dtype.compute();
    let counts = ctx.e.splat(&[bins], acc, Scalar::Int(0))?;
    let flat = ctx.reshape(&x, &[n])?;
    let e = ctx.e;
    let (lo, hi) = if min == max {
        let extreme_of = |lowest: bool| -> Result<Value<'c, 'a>> {
            let name = if lowest {
                "arith.minimumf"
            } else {
                "arith.maximumf"
            };
            let t = ctx.reduce(&flat, &[0], dtype, extreme(dtype, !lowest), |b, a, v| {
                b.same(name, &[a, v])
            })?;
            extract(&e, t.value, &[], dtype)
        };
        let (lo, hi) = (extreme_of(true)?, extreme_of(false)?);
        let single = e.cmpf("oeq", lo, hi)?;
        let one = e.constant(Scalar::Float(1.0), dtype)?;
        (
            e.select(single, arith(&e, "arith.subf", lo, one, dtype)?, lo)?,
            e.select(single, arith(&e, "arith.addf", hi, one, dtype)?, hi)?,
        )
    } else {
        (
            e.constant(Scalar::Float(min), dtype)?,
            e.constant(Scalar::Float(max), dtype)?,
        )
    };
    let width = arith(&e, "arith.subf", hi, lo, dtype)?;
    let scale = e.constant(Scalar::Float(bins as f64), dtype)?;
    let input = flat.value;
    let results = loop_nest(&e, &[n], &[counts], &|b, ivs, carried| {
        let v = extract(b, reuse(input), &[nth(ivs, 0)?], dtype)?;
        let (lo, hi) = (reuse(lo), reuse(hi));
        let above = b.cmpf("oge", v, lo)?;
        let below = b.cmpf("ole", v, hi)?;
        let inside = b.same("arith.andi", &[above, below])?;
        let offset = arith(b, "arith.subf", v, lo, dtype)?;
        let scaled = arith(b, "arith.mulf", offset, reuse(scale), dtype)?;
        let bin = arith(b, "arith.divf", scaled, reuse(width), dtype)?;
        let bin = b.convert(bin, dtype, acc)?;
        let bin = b.op1("arith.fptosi", &[bin], b.elem_type(DType::Int64)?, &[])?;
        let last = b.constant(Scalar::Int(bins - 1), DType::Int64)?;
        let bin = b.same("arith.minsi", &[bin, last])?;
        let zero = b.constant(Scalar::Int(0), DType::Int64)?;
        let bin = b.select(inside, bin, zero)?;
        let at = b.op1("arith.index_cast", &[bin], b.ty("index")?, &[])?;
        let counts = nth(carried, 0)?;
        let count = extract(b, counts, &[at], acc)?;
        let one = b.constant(Scalar::Float(1.0), acc)?;
        let added = b.same("arith.addf", &[count, one])?;
        let count = b.select(inside, added, count)?;
        Ok(vec![insert(b, count, counts, &[at])?])
    })?;
    let counts = Tensor {
        value: nth(&results, 0)?,
        shape: vec![bins],
        dtype: acc,
    };
    Ok(vec![ctx.cast(&counts, dtype)?.value])
}

/// `name` (a binary float op) on two values of `dtype`, rounded as PyTorch's scalar type
/// rounds: the half types compute in float32 and round the result to the half type.
fn arith<'c, 'b>(
    b: &Emit<'c, 'b>,
    name: &str,
    l: Value<'c, 'b>,
    r: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let wide = dtype.compute();
    if wide == dtype {
        return b.same(name, &[l, r]);
    }
    let (l, r) = (b.convert(l, dtype, wide)?, b.convert(r, dtype, wide)?);
    let result = b.same(name, &[l, r])?;
    b.convert(result, wide, dtype)
}
