//! Shape and layout ops: views (reshape-like ops lower to the recorded output shape),
//! permutations, broadcasts, slices, concatenation and splits. Tensors are values here, so
//! aliasing ops (`alias`, `clone`, `detach`) are the identity.

use super::{Iter, LowerCtx, Operand, Registry, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::Node;
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Movement {
    /// Any op whose result is its input with the recorded output shape.
    Reshape,
    Identity,
    Permute,
    Transpose,
    /// `t`: transpose of a rank ≤ 2 tensor.
    Transpose2d,
    Expand,
    Slice,
    Select,
    Cat,
    SplitWithSizes,
    Split,
    Copy,
}

const MOVEMENT: &[(&str, Movement)] = &[
    ("aten.view.default", Movement::Reshape),
    ("aten._unsafe_view.default", Movement::Reshape),
    ("aten.reshape.default", Movement::Reshape),
    ("aten.unsqueeze.default", Movement::Reshape),
    ("aten.squeeze.default", Movement::Reshape),
    ("aten.squeeze.dim", Movement::Reshape),
    ("aten.squeeze.dims", Movement::Reshape),
    ("aten.flatten.using_ints", Movement::Reshape),
    ("aten.clone.default", Movement::Identity),
    ("aten.alias.default", Movement::Identity),
    ("aten.detach.default", Movement::Identity),
    ("aten.lift_fresh_copy.default", Movement::Identity),
    ("aten.permute.default", Movement::Permute),
    ("aten.transpose.int", Movement::Transpose),
    ("aten.t.default", Movement::Transpose2d),
    ("aten.expand.default", Movement::Expand),
    ("aten.slice.Tensor", Movement::Slice),
    ("aten.select.int", Movement::Select),
    ("aten.cat.default", Movement::Cat),
    ("aten.split_with_sizes.default", Movement::SplitWithSizes),
    ("aten.split.Tensor", Movement::Split),
    ("aten.copy.default", Movement::Copy),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, movement) in MOVEMENT {
        r.add(op, move |ctx, node| lower_movement(ctx, node, movement));
    }
}

fn lower_movement<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    movement: Movement,
) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    if let Movement::Cat = movement {
        return Ok(vec![concatenate(ctx, node)?]);
    }
    let x = ctx.tensor(node, 0)?;
    let rank = x.rank();
    let value = match movement {
        Movement::Reshape => {
            if x.shape.iter().product::<i64>() != out.numel() {
                return fail(format!(
                    "cannot view shape {:?} as {:?}",
                    x.shape, out.shape
                ));
            }
            ctx.reshape(&x, &out.shape)?.value
        }
        Movement::Identity => x.value,
        Movement::Permute => {
            let dims = ctx.int_list(node, 1)?;
            let perm: Vec<usize> = dims
                .iter()
                .map(|&d| norm_dim(d, rank))
                .collect::<Result<_>>()?;
            permute(ctx, &x, &perm)?
        }
        Movement::Transpose | Movement::Transpose2d => {
            let (a, b) = if let Movement::Transpose = movement {
                (
                    norm_dim(ctx.int(node, 1)?, rank)?,
                    norm_dim(ctx.int(node, 2)?, rank)?,
                )
            } else if rank == 2 {
                (0, 1)
            } else {
                (0, 0)
            };
            let mut perm: Vec<usize> = (0..rank).collect();
            if rank > 0 {
                perm.swap(a, b);
            }
            permute(ctx, &x, &perm)?
        }
        Movement::Expand => {
            let dtype = x.dtype;
            ctx.elementwise(
                &[Operand::Tensor(x)],
                &[dtype],
                dtype,
                &out.shape,
                dtype,
                |_, v| Ok(v[0]),
            )?
        }
        Movement::Slice => {
            let dim = sized_dim(ctx.int(node, 1)?, rank)?;
            let size = x.shape[dim];
            let start = ctx.opt_int(node, 2)?.unwrap_or(0);
            let end = ctx.opt_int(node, 3)?.unwrap_or(size);
            let step = ctx.int(node, 4)?;
            if step <= 0 {
                return fail(format!("slice step must be positive, got {step}"));
            }
            let clamp = |i: i64| (if i < 0 { i + size } else { i }).clamp(0, size);
            let (start, end) = (clamp(start), clamp(end));
            let len = if end > start {
                (end - start + step - 1) / step
            } else {
                0
            };
            let mut offsets = vec![0; rank];
            let mut sizes = x.shape.clone();
            let mut strides = vec![1; rank];
            offsets[dim] = start;
            sizes[dim] = len;
            strides[dim] = step;
            ctx.e
                .extract_slice(x.value, &offsets, &sizes, &strides, &sizes, x.dtype)?
        }
        Movement::Select => {
            let dim = sized_dim(ctx.int(node, 1)?, rank)?;
            let size = x.shape[dim];
            let index = ctx.int(node, 2)?;
            let index = if index < 0 { index + size } else { index };
            if index < 0 || index >= size {
                return fail(format!(
                    "index {} is out of range for dimension {dim} of size {size}",
                    ctx.int(node, 2)?
                ));
            }
            let mut offsets = vec![0; rank];
            let mut sizes = x.shape.clone();
            offsets[dim] = index;
            sizes[dim] = 1;
            ctx.e.extract_slice(
                x.value,
                &offsets,
                &sizes,
                &vec![1; rank],
                &out.shape,
                x.dtype,
            )?
        }
        Movement::SplitWithSizes | Movement::Split => return split(ctx, node, &x, movement),
        Movement::Copy => {
            let src = ctx.operand(node, 1)?;
            let dtype = out.dtype;
            let src_dtype = match &src {
                Operand::Tensor(t) => t.dtype,
                Operand::Scalar(_) => dtype,
            };
            ctx.elementwise(
                &[src],
                &[src_dtype],
                src_dtype,
                &out.shape,
                dtype,
                |_, v| Ok(v[0]),
            )?
        }
        Movement::Cat => return fail("internal: cat is lowered before its operands are read"),
    };
    Ok(vec![value])
}

/// A dimension that indexes the shape (slice, select, cat, split): unlike `norm_dim`, which
/// lets dim 0 / -1 name a 0-d tensor itself, a 0-d tensor has none (PyTorch raises too).
fn sized_dim(dim: i64, rank: usize) -> Result<usize> {
    if rank == 0 {
        return fail(format!("dimension {dim} does not exist: the tensor is 0-d"));
    }
    norm_dim(dim, rank)
}

/// Output dimension `i` is input dimension `perm[i]`.
fn permute<'c, 'a>(
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
    let init = ctx.e.empty(&shape, x.dtype)?;
    let read = emit::affine_map(rank, &inverse.iter().map(|&d| Some(d)).collect::<Vec<_>>());
    let results = ctx.e.generic(
        &[(x.value, read)],
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |_, v| Ok(vec![v[0]]),
    )?;
    Ok(results[0])
}

fn concatenate<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let out = ctx.out(0)?.clone();
    let parts = ctx.tensor_list(node, 0)?;
    let rank = out.rank();
    let dim = sized_dim(ctx.int(node, 1)?, rank)?;
    let mut acc = ctx.e.empty(&out.shape, out.dtype)?;
    let mut offset = 0;
    for part in parts {
        // PyTorch skips 1-D empty tensors in cat regardless of the other shapes.
        if part.shape == [0] && rank != 1 {
            continue;
        }
        if part.rank() != rank {
            return fail(format!(
                "cannot concatenate shape {:?} into {:?}",
                part.shape, out.shape
            ));
        }
        let part = ctx.cast(&part, out.dtype)?;
        let mut offsets = vec![0; rank];
        offsets[dim] = offset;
        acc = ctx.e.insert_slice(part.value, acc, &offsets, &part.shape)?;
        offset += part.shape[dim];
    }
    if offset != out.shape[dim] {
        return fail(format!(
            "concatenated size {offset} does not match the recorded {}",
            out.shape[dim]
        ));
    }
    Ok(acc)
}

fn split<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    node: &Node,
    x: &Tensor<'c, 'a>,
    movement: Movement,
) -> Result<Vec<Value<'c, 'a>>> {
    let rank = x.rank();
    let dim = sized_dim(ctx.int(node, 2)?, rank)?;
    let total = x.shape[dim];
    let sizes = match movement {
        Movement::SplitWithSizes => ctx.int_list(node, 1)?,
        _ => {
            let chunk = ctx.int(node, 1)?;
            if chunk <= 0 && total > 0 {
                return fail(format!("split size must be positive, got {chunk}"));
            }
            let n = if total == 0 {
                1
            } else {
                (total + chunk - 1) / chunk
            };
            (0..n).map(|i| chunk.min(total - i * chunk)).collect()
        }
    };
    if sizes.iter().sum::<i64>() != total || sizes.len() != node.outputs.len() {
        return fail(format!(
            "split sizes {sizes:?} do not cover dimension {dim} of size {total}"
        ));
    }
    let mut offset = 0;
    let mut results = Vec::new();
    for size in sizes {
        let mut offsets = vec![0; rank];
        let mut shape = x.shape.clone();
        offsets[dim] = offset;
        shape[dim] = size;
        results.push(ctx.e.extract_slice(
            x.value,
            &offsets,
            &shape,
            &vec![1; rank],
            &shape,
            x.dtype,
        )?);
        offset += size;
    }
    Ok(results)
}
