//! Reordering a tensor's dimensions ([`permute`]) and copies through an indexing map
//! ([`copy_through`]), for data movement's permutes and
//! transposes, attention's transposed operands and the sorted dimension that scans move last.

use super::{Iter, LowerCtx, Tensor, emit, fail};
use crate::error::Result;
use melior::ir::Value;

/// Output dimension `i` is input dimension `perm[i]`.
pub(super) fn permute<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    perm: &[usize],
) -> Result<Value<'c, 'a>> {
    let rank = x.rank();
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    if sorted != (0..rank).collect::<Vec<_>>() {
        return fail(format!(
            "{perm:?} is not a permutation of {rank} dimensions"
        ));
    }
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.value);
    }
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let shape: Vec<i64> = perm.iter().map(|&p| x.shape[p]).collect();
    let read = emit::affine_map(rank, &inverse.iter().map(|&d| Some(d)).collect::<Vec<_>>());
    copy_through(ctx, x, &shape, read)
}

/// A fresh tensor of `shape` whose element at `(d0, d1, ..)` is `x` read through the indexing
/// map `read` (over the output's dimensions): a copy that moves elements.
pub(super) fn copy_through<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    shape: &[i64],
    read: String,
) -> Result<Value<'c, 'a>> {
    let rank = shape.len();
    let init = ctx.e.empty(shape, x.dtype)?;
    let results = ctx.e.generic(
        &[(x.value, read)],
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |_, v| Ok(vec![v[0]]),
    )?;
    Ok(results[0])
}
