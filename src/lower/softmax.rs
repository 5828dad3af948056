//! Softmax as the normalization family's softmax rows and attention compute it: a maximum, the
//! exponentials (computed once) and their sum, and a normalising pass, with the two reductions
//! kept for a caller that needs them (attention's logsumexp).

use super::emit::{iterators, reduced_map};
use super::{Iter, LowerCtx, Operand, Scalar, Tensor, emit};
use crate::error::Result;
use crate::graph::DType;
use melior::ir::Value;

/// How [`softmax`] turns `x - max` and the sum of exponentials into its result.
#[derive(Clone, Copy)]
pub(super) enum Normalise {
    /// `exp(x - max) / sum`.
    Exp,
    /// `x - max - log(sum)`.
    Log,
    /// `exp(x - max) / sum`, with `max` taken as 0 where it is -inf (a row that is all -inf,
    /// such as a fully masked row of attention scores, gives zeros rather than NaN).
    ExpMasked,
}

/// A softmax's result and its two reductions (the maximum over `dims` and the sum of
/// `exp(x - max)`, both in the compute dtype of `out_dtype`, the maximum as `Normalise`
/// used it).
pub(super) struct Softmax<'c, 'a> {
    pub result: Value<'c, 'a>,
    pub max: Tensor<'c, 'a>,
    pub sum: Tensor<'c, 'a>,
}

/// Softmax (or log-softmax) of `x` over `dims`, computed in the compute dtype of `out_dtype`
/// and converted to it: a maximum, a sum of exponentials, and a normalising pass (softmax
/// multiplies the exponentials by the sum's reciprocal; log-softmax subtracts the sum's log).
pub(super) fn softmax<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dims: &[usize],
    out_dtype: DType,
    normalise: Normalise,
) -> Result<Softmax<'c, 'a>> {
    let rank = x.rank();
    let acc = out_dtype.compute();
    let from = x.dtype;
    // `maxnumf` (a NaN is skipped) rather than `maximumf` (a NaN wins): a row holding a NaN
    // still gives NaNs throughout, through its sum of exponentials, and `maxnumf` is one
    // instruction fewer in a loop that reads the rows from memory (`maximumf` lowers to a
    // chain of blends and compares on x86).
    let mut max = ctx.reduce(x, dims, acc, Scalar::Float(f64::NEG_INFINITY), |b, a, v| {
        b.same("arith.maxnumf", &[a, v])
    })?;
    if matches!(normalise, Normalise::ExpMasked) {
        max.value = ctx.elementwise(
            &[Operand::Tensor(max.clone())],
            &[acc],
            acc,
            &max.shape,
            acc,
            |b, v| {
                let masked = b.cmpf(
                    "oeq",
                    v[0],
                    b.constant(Scalar::Float(f64::NEG_INFINITY), acc)?,
                )?;
                b.select(masked, b.constant(Scalar::Float(0.0), acc)?, v[0])
            },
        )?;
    }
    let identity = emit::identity_map(rank);
    let reduced = reduced_map(rank, dims);
    if matches!(normalise, Normalise::Log) {
        let zero = ctx.e.splat(&max.shape, acc, Scalar::Float(0.0))?;
        let sum = ctx.e.generic(
            &[(x.value, identity.clone()), (max.value, reduced.clone())],
            &[(zero, reduced.clone())],
            &iterators(rank, dims),
            |b, v| {
                let xv = b.convert(v[0], from, acc)?;
                let shifted = b.same("arith.subf", &[xv, v[1]])?;
                let e = b.exp_shifted(shifted, acc)?;
                Ok(vec![b.same("arith.addf", &[v[2], e])?])
            },
        )?[0];
        let init = ctx.e.empty(&x.shape, out_dtype)?;
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
                let l = b.same("math.log", &[v[2]])?;
                let r = b.same("arith.subf", &[shifted, l])?;
                Ok(vec![b.convert(r, acc, out_dtype)?])
            },
        )?[0];
        let sum = Tensor {
            value: sum,
            shape: max.shape.clone(),
            dtype: acc,
        };
        return Ok(Softmax { result, max, sum });
    }
    // The exponentials once, summed, then scaled by the sum's reciprocal. The row group the
    // `parallel` stage makes of these ops keeps a block of exponentials in L1 between the two.
    let exps = ctx.e.empty(&x.shape, acc)?;
    let exps = ctx.e.generic(
        &[(x.value, identity.clone()), (max.value, reduced.clone())],
        &[(exps, identity.clone())],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let shifted = b.same("arith.subf", &[xv, v[1]])?;
            Ok(vec![b.exp_shifted(shifted, acc)?])
        },
    )?[0];
    let exps = Tensor {
        value: exps,
        shape: x.shape.clone(),
        dtype: acc,
    };
    let sum = ctx.reduce(&exps, dims, acc, Scalar::Float(0.0), |b, a, v| {
        b.same("arith.addf", &[a, v])
    })?;
    let masked = matches!(normalise, Normalise::ExpMasked);
    let reciprocal = ctx.elementwise(
        &[Operand::Tensor(sum.clone())],
        &[acc],
        acc,
        &sum.shape,
        acc,
        |b, v| {
            let one = b.constant(Scalar::Float(1.0), acc)?;
            let r = b.same("arith.divf", &[one, v[0]])?;
            if !masked {
                return Ok(r);
            }
            // A fully masked row sums to 0: its probabilities are zeros, not NaN.
            let zero = b.constant(Scalar::Float(0.0), acc)?;
            let empty = b.cmpf("oeq", v[0], zero)?;
            b.select(empty, zero, r)
        },
    )?;
    let init = ctx.e.empty(&x.shape, out_dtype)?;
    let result = ctx.e.generic(
        &[(exps.value, identity.clone()), (reciprocal, reduced)],
        &[(init, identity)],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let p = b.same("arith.mulf", &[v[0], v[1]])?;
            Ok(vec![b.convert(p, acc, out_dtype)?])
        },
    )?[0];
    Ok(Softmax { result, max, sum })
}
