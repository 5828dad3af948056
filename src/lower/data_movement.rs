//! Shape and layout ops: views (reshape-like ops lower to the recorded output shape),
//! permutations, broadcasts, slices, concatenation and splits, flips, repeats, diagonals and
//! strided views. Tensors are values here, so aliasing ops (`alias`, `clone`, `detach`) are the
//! identity; views that read elements at new positions are `linalg.generic`s whose input map
//! says where (`d0 mod 3`, `-d0 + 4`, `d0 * 3 + d1 + 2`).

use super::elements::{extract, linalg_index};
use super::layout::{self, permute};
use super::loops::{nth, reuse};
use super::{Iter, LowerCtx, Operand, Registry, Scalar, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::{Node, dims};
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Movement {
    /// Any op whose result is its input with the recorded output shape.
    Reshape,
    Identity,
    /// `native_dropout` outside training: the input and an all-true mask. In training it draws
    /// random numbers, so it fails to lower and runs eagerly.
    DropoutEval,
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
    Flip,
    Repeat,
    Diagonal,
    AsStrided,
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
    ("aten.native_dropout.default", Movement::DropoutEval),
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
    ("aten.flip.default", Movement::Flip),
    ("aten.repeat.default", Movement::Repeat),
    ("aten.diagonal.default", Movement::Diagonal),
    ("aten.as_strided.default", Movement::AsStrided),
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
            if !dims::may_be_equal(dims::product(&x.shape)?, dims::product(&out.shape)?) {
                return fail(format!(
                    "cannot view shape {} as {}",
                    dims::shown(&x.shape),
                    dims::shown(&out.shape)
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
            if dims::is_symbolic(size) || dims::is_symbolic(start) || dims::is_symbolic(end) {
                let offset = window(size, (start, end, step), out.shape[dim])?;
                let mut offsets = vec![0; rank];
                let mut strides = vec![1; rank];
                offsets[dim] = offset;
                strides[dim] = step;
                return Ok(vec![ctx.e.extract_slice(
                    x.value, &offsets, &out.shape, &strides, &out.shape, x.dtype,
                )?]);
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
            let at = selected(ctx.int(node, 2)?, dim, size)?;
            let mut offsets = vec![0; rank];
            let mut sizes = x.shape.clone();
            offsets[dim] = at;
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
        Movement::DropoutEval => {
            if !matches!(ctx.arg(node, 2)?, crate::graph::Arg::Bool(false)) {
                return fail(
                    "native_dropout in training mode draws random numbers: it runs in eager PyTorch",
                );
            }
            let mask = ctx.out(1)?.clone();
            let ones = ctx
                .e
                .splat(&mask.shape, mask.dtype, super::Scalar::Bool(true))?;
            return Ok(vec![x.value, ones]);
        }
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
        Movement::Flip => {
            let dims = ctx.int_list(node, 1)?;
            let mut flipped = vec![false; rank];
            for &d in &dims {
                let d = norm_dim(d, rank)?;
                if rank > 0 && std::mem::replace(&mut flipped[d], true) {
                    return fail(format!("dimension {d} appears twice in flip dims {dims:?}"));
                }
            }
            if (0..rank).any(|d| flipped[d] && dims::is_symbolic(x.shape[d])) {
                let how = Position::Mirror(&flipped);
                return Ok(vec![read_computed(ctx, &x, &x.shape, how)?]);
            }
            let exprs: Vec<String> = (0..rank)
                .map(|d| match (flipped[d], x.shape[d]) {
                    (true, size) if size > 1 => format!("-d{d} + {}", size - 1),
                    _ => format!("d{d}"),
                })
                .collect();
            read_through(ctx, &x, &x.shape, &exprs)?
        }
        Movement::Repeat => {
            let repeats = ctx.int_list(node, 1)?;
            if repeats.len() < rank || repeats.iter().any(|&r| r < 0) {
                return fail(format!(
                    "repeats {repeats:?} must be non-negative, one per dimension of {:?} at least",
                    x.shape
                ));
            }
            let lead = repeats.len() - rank;
            let padded: Vec<i64> = std::iter::repeat_n(1, lead)
                .chain(x.shape.clone())
                .collect();
            if padded.iter().any(|&d| dims::is_symbolic(d)) {
                let shape = repeats
                    .iter()
                    .zip(&padded)
                    .map(|(&r, &s)| dims::product(&[r, s]))
                    .collect::<Result<Vec<_>>>()?;
                return Ok(vec![read_computed(ctx, &x, &shape, Position::Wrap)?]);
            }
            let shape: Vec<i64> = repeats
                .iter()
                .zip(&padded)
                .map(|(r, s)| r.saturating_mul(*s))
                .collect();
            // Output dimension lead + j reads input dimension j at its position modulo the size.
            let exprs: Vec<String> = (0..rank)
                .map(|j| match x.shape[j] {
                    1 => "0".to_string(),
                    size => format!("d{} mod {size}", lead + j),
                })
                .collect();
            read_through(ctx, &x, &shape, &exprs)?
        }
        Movement::Diagonal => {
            if rank < 2 {
                return fail("diagonal needs a tensor of rank 2 at least");
            }
            let offset = ctx.int(node, 1)?;
            let (d1, d2) = (
                norm_dim(ctx.int(node, 2)?, rank)?,
                norm_dim(ctx.int(node, 3)?, rank)?,
            );
            if d1 == d2 {
                return fail(format!(
                    "diagonal dimensions must differ, got {d1} and {d2}"
                ));
            }
            // Element k of the diagonal is x[.., k + row, .., k + col, ..].
            let (row, col) = (offset.saturating_neg().max(0), offset.max(0));
            let len = (x.shape[d1].saturating_sub(row))
                .min(x.shape[d2].saturating_sub(col))
                .max(0);
            let kept: Vec<usize> = (0..rank).filter(|&d| d != d1 && d != d2).collect();
            let mut shape: Vec<i64> = kept.iter().map(|&d| x.shape[d]).collect();
            shape.push(len);
            if shape.contains(&0) {
                return Ok(vec![ctx.e.empty(&shape, x.dtype)?]);
            }
            // The len x len square the diagonal runs through, then its main diagonal (linalg
            // wants a dimension read at a plain loop index to match the loop's size).
            let mut offsets = vec![0; rank];
            let mut sizes = x.shape.clone();
            (offsets[d1], offsets[d2], sizes[d1], sizes[d2]) = (row, col, len, len);
            let square = Tensor {
                value: ctx.e.extract_slice(
                    x.value,
                    &offsets,
                    &sizes,
                    &vec![1; rank],
                    &sizes,
                    x.dtype,
                )?,
                shape: sizes,
                dtype: x.dtype,
            };
            let last = rank - 2;
            let exprs: Vec<String> = (0..rank)
                .map(|d| match kept.iter().position(|&k| k == d) {
                    Some(i) => format!("d{i}"),
                    None => format!("d{last}"),
                })
                .collect();
            read_through(ctx, &square, &shape, &exprs)?
        }
        Movement::AsStrided => as_strided(ctx, node, &x)?,
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

/// A fresh tensor of `shape` whose element at `(d0, d1, ..)` is `x` read at the affine
/// expressions `exprs` (one per dimension of `x`, over the output's dimensions). The caller
/// keeps every read in bounds.
fn read_through<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    shape: &[i64],
    exprs: &[String],
) -> Result<Value<'c, 'a>> {
    let rank = shape.len();
    if shape.contains(&0) {
        return ctx.e.empty(shape, x.dtype);
    }
    let read = crate::pipeline::ir::maps::affine_map(rank, exprs);
    layout::copy_through(ctx, x, shape, read)
}

/// Ops whose result may start inside their input's storage (a nonzero storage offset).
const OFFSET_VIEWS: &[&str] = &[
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.diagonal.default",
    "aten.as_strided.default",
    "aten.narrow.default",
    "aten.unbind.int",
    "aten.chunk.default",
];

/// `as_strided(x, size, stride, storage_offset)` read from `x`'s elements as its storage. The
/// interchange records no storage offsets, so this needs `x` contiguous and not produced by a
/// view with an offset of its own in the graph; `storage_offset` then counts from `x`'s first
/// element, which is PyTorch's meaning whenever `x` starts its storage (a graph input is
/// assumed to). Reads outside `x` (legal in PyTorch, into the rest of the storage) fail.
fn as_strided<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    node: &Node,
    x: &Tensor<'c, 'a>,
) -> Result<Value<'c, 'a>> {
    let sizes = ctx.int_list(node, 1)?;
    let strides = ctx.int_list(node, 2)?;
    let offset = ctx.opt_int(node, 3)?.unwrap_or(0);
    // Only unit dimensions restrided (an adaptive pooling to 1 x 1 of a channels-last input
    // restrides its output so): the input's elements in its order, the input itself. The
    // one form that takes symbolic sizes.
    if let Some(crate::graph::Arg::Ref(r)) = node.args.first() {
        let meta = ctx.meta_of(r)?;
        let unit_restride = offset == 0
            && sizes == x.shape
            && strides.len() == sizes.len()
            && (0..sizes.len()).all(|d| sizes[d] == 1 || strides[d] == meta.strides[d]);
        if unit_restride {
            return Ok(x.value);
        }
    }
    if sizes
        .iter()
        .chain(&strides)
        .chain(&x.shape)
        .any(|&d| dims::is_symbolic(d))
    {
        return fail(
            "as_strided with symbolic sizes is supported only where it restrides unit dimensions",
        );
    }
    if sizes.len() != strides.len() || sizes.iter().chain(&strides).any(|&v| v < 0) || offset < 0 {
        return fail(format!(
            "as_strided needs one non-negative stride per size, got sizes {sizes:?} strides \
             {strides:?} offset {offset}"
        ));
    }
    if let Some(crate::graph::Arg::Ref(r)) = node.args.first() {
        let meta = ctx.meta_of(r)?;
        if !meta.is_contiguous() {
            return fail(format!(
                "as_strided of a non-contiguous input (strides {:?}) cannot be expressed on its \
                 storage",
                meta.strides
            ));
        }
        let producer = ctx.graph.nodes.iter().find(|n| n.name == r.node);
        if let Some(view) = producer.filter(|p| OFFSET_VIEWS.contains(&p.target.as_str())) {
            return fail(format!(
                "as_strided of the view `{}` ({}): its storage offset is not recorded",
                view.name, view.target
            ));
        }
    }
    if sizes.contains(&0) {
        return ctx.e.empty(&sizes, x.dtype);
    }
    let numel: i64 = x.shape.iter().product();
    let furthest = sizes
        .iter()
        .zip(&strides)
        .try_fold(offset, |acc, (&n, &s)| {
            acc.checked_add((n - 1).checked_mul(s)?)
        });
    if furthest.is_none_or(|f| f >= numel) {
        return fail(format!(
            "as_strided(sizes {sizes:?}, strides {strides:?}, offset {offset}) reads beyond the \
             input's {numel} elements"
        ));
    }
    let flat = ctx.reshape(x, &[numel])?;
    // The elements from the offset to the furthest read (linalg wants a dimension read at a
    // plain loop index to match the loop's size, which this span then does).
    let span = furthest.unwrap_or(offset) - offset + 1;
    let window = Tensor {
        value: ctx
            .e
            .extract_slice(flat.value, &[offset], &[span], &[1], &[span], x.dtype)?,
        shape: vec![span],
        dtype: x.dtype,
    };
    let terms: Vec<String> = sizes
        .iter()
        .zip(&strides)
        .enumerate()
        .filter(|(_, (n, s))| **n > 1 && **s != 0)
        .map(|(d, (_, s))| format!("d{d} * {s}"))
        .collect();
    let expr = if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    };
    read_through(ctx, &window, &sizes, &[expr])
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
                "cannot concatenate shape {} into {}",
                dims::shown(&part.shape),
                dims::shown(&out.shape)
            ));
        }
        let part = ctx.cast(&part, out.dtype)?;
        let mut offsets = vec![0; rank];
        offsets[dim] = offset;
        acc = ctx.e.insert_slice(part.value, acc, &offsets, &part.shape)?;
        offset = dims::sum(offset, part.shape[dim])?;
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
            if !dims::is_symbolic(chunk) && chunk <= 0 && total != 0 {
                return fail(format!("split size must be positive, got {chunk}"));
            }
            if dims::is_symbolic(chunk) {
                // `chunk(2)` of a symbolic size: the chunks tracing computed (and guards);
                // that they cover the dimension is checked below.
                match node
                    .outputs
                    .iter()
                    .map(|o| o.shape.get(dim).copied())
                    .collect::<Option<Vec<_>>>()
                {
                    Some(sizes) => sizes,
                    None => return fail(format!("a split output has no dimension {dim}")),
                }
            } else if dims::is_symbolic(total) {
                // As many chunks as tracing counted (and guards): whole ones, then the rest.
                let n = node.outputs.len() as i64;
                let mut sizes = vec![chunk; node.outputs.len().saturating_sub(1)];
                sizes.push(dims::sum(total, -(n - 1) * chunk)?);
                sizes
            } else {
                let n = if total == 0 {
                    1
                } else {
                    (total + chunk - 1) / chunk
                };
                (0..n).map(|i| chunk.min(total - i * chunk)).collect()
            }
        }
    };
    let covered = sizes
        .iter()
        .try_fold(0, |sum, &size| dims::sum(sum, size))?;
    if covered != total || sizes.len() != node.outputs.len() {
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
        offset = dims::sum(offset, size)?;
    }
    Ok(results)
}

/// Where [`read_computed`] reads each input dimension.
pub(super) enum Position<'f> {
    /// At the mirrored position `size - 1 - i` where flipped (`flip`).
    Mirror(&'f [bool]),
    /// At the position modulo its size (`repeat`).
    Wrap,
    /// At `i - before` where that lies inside the input, else `fill` (constant padding by
    /// amounts that are sizes, whose sign only the run decides); the read is clamped, so
    /// nothing is read out of bounds.
    Shifted { before: &'f [i64], fill: Scalar },
}

/// `x` read at positions computed in the loop body, for reads whose indexing map would need
/// a symbolic size (a `flip` or `repeat` of a symbolic dimension, a padding by sizes): input
/// dimension `d` is read at a position computed from output dimension `offset + d`, `offset`
/// being how many leading output dimensions the input lacks.
pub(super) fn read_computed<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    shape: &[i64],
    how: Position,
) -> Result<Value<'c, 'a>> {
    let (rank, offset) = (shape.len(), shape.len() - x.rank());
    let init = ctx.e.empty(shape, x.dtype)?;
    let (input, sizes, dtype) = (x.value, x.shape.clone(), x.dtype);
    let results = ctx.e.generic(
        &[],
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, _| {
            let mut at = Vec::with_capacity(sizes.len());
            // Whether every position lies inside the input (`Position::Shifted`).
            let mut inside = None;
            for (d, &size) in sizes.iter().enumerate() {
                let i = linalg_index(b, offset + d)?;
                at.push(match &how {
                    Position::Mirror(flipped) if flipped[d] => {
                        let last = b.same("arith.subi", &[b.size(size)?, b.index(1)?])?;
                        b.same("arith.subi", &[last, i])?
                    }
                    Position::Wrap if size == 1 => b.index(0)?,
                    Position::Wrap => b.same("arith.remui", &[i, b.size(size)?])?,
                    Position::Mirror(_) => i,
                    Position::Shifted { before, .. } => {
                        let (zero, size) = (b.index(0)?, b.size(size)?);
                        let position = b.same("arith.subi", &[i, b.size(before[d])?])?;
                        let above = b.cmpi("sge", position, zero)?;
                        let below = b.cmpi("slt", position, size)?;
                        let here = b.same("arith.andi", &[above, below])?;
                        inside = Some(match inside {
                            Some(all) => b.same("arith.andi", &[all, here])?,
                            None => here,
                        });
                        let last = b.same("arith.subi", &[size, b.index(1)?])?;
                        let clamped = b.same("arith.minsi", &[position, last])?;
                        b.same("arith.maxsi", &[clamped, zero])?
                    }
                });
            }
            let read = extract(b, reuse(input), &at, dtype)?;
            match (&how, inside) {
                (Position::Shifted { fill, .. }, Some(inside)) => {
                    Ok(vec![b.select(inside, read, b.constant(*fill, dtype)?)?])
                }
                _ => Ok(vec![read]),
            }
        },
    )?;
    nth(&results, 0)
}

/// The offset of `[start:end:step]` in a dimension of `size` where some are symbolic, checked
/// against the `recorded` length the graph gives the slice: from a fixed start to the end
/// (`x[:, 2:]`, `x[:, -1:]`, `x[:, :n]` of its `n` columns), between fixed indices, either
/// negative (from the end; clamped as eager clamps them), or between sizes (`x[:, :n]` of a longer buffer,
/// `x[:, past:past + n]`); tracing guards the dimension to hold them.
pub(super) fn window(size: i64, (start, end, step): (i64, i64, i64), recorded: i64) -> Result<i64> {
    let to_end = end == size || end >= i64::MAX / 2;
    let is_size = |i: i64| dims::is_symbolic(i) || i >= 0;
    // Where the slice starts and how many elements it spans before the step.
    let (offset, span) = match to_end {
        true if !dims::is_symbolic(start) && start < 0 => (dims::sum(size, start)?, -start),
        true if !dims::is_symbolic(start) => (start, dims::sum(size, -start)?),
        // Between fixed indices that the graph records inside the dimension.
        false
            if !dims::is_symbolic(start)
                && !dims::is_symbolic(end)
                && start >= 0
                && step == 1
                && end - start == recorded =>
        {
            (start, end - start)
        }
        // Between fixed indices of a symbolic dimension (`x[:, 10:20]`, `x[:, -7:-3]`, from
        // the end `x[:, -100:2]`), each resolved (a negative one from the end) and clamped
        // to the dimension, as eager does; empty if they cross (`x[:, 3:1]`).
        false if !dims::is_symbolic(start) && !dims::is_symbolic(end) => {
            let resolved = |i: i64| -> Result<i64> {
                let (largest, bound) = match i < 0 {
                    true => (true, dims::poly_of(dims::sum(size, i)?)),
                    false => (false, dims::poly_of(size)),
                };
                let limit = dims::Poly::constant(if i < 0 { 0 } else { i });
                Ok(dims::size_of(dims::Poly::extreme(
                    largest,
                    vec![limit, bound],
                )))
            };
            let (offset, stop) = (resolved(start)?, resolved(end)?);
            let span = dims::Poly::extreme(
                true,
                vec![
                    dims::Poly::constant(0),
                    dims::poly_of(dims::difference(stop, offset)?),
                ],
            );
            (offset, dims::size_of(span))
        }
        false if is_size(start) && is_size(end) => (start, dims::difference(end, start)?),
        _ => {
            return fail(format!(
                "a slice [{}:{}:{step}] of a dimension of size {} is not supported",
                dims::poly_of(start),
                dims::poly_of(end),
                dims::poly_of(size)
            ));
        }
    };
    // Every `step`-th element: ceil(span / step) of them.
    let len = dims::size_of(
        dims::poly_of(span)
            .add(&dims::Poly::constant(step - 1))?
            .floor_div(step)?,
    );
    if !dims::may_be_equal(len, recorded) {
        return fail(format!(
            "slice [{}:{}:{step}] gives {} elements, the graph records {}",
            dims::poly_of(start),
            dims::poly_of(end),
            dims::poly_of(len),
            dims::poly_of(recorded)
        ));
    }
    Ok(offset)
}

/// The offset of index `index` (negative: from the end) in dimension `dim` of `size`: of a
/// symbolic size a polynomial (tracing guards the size to hold the index); an error if a fixed
/// size does not hold it.
pub(super) fn selected(index: i64, dim: usize, size: i64) -> Result<i64> {
    if dims::is_symbolic(index) {
        return fail("select at a symbolic index is not supported");
    }
    let at = match (index < 0, dims::is_symbolic(size)) {
        (true, true) => dims::sum(size, index)?,
        (true, false) => index + size,
        (false, _) => index,
    };
    if !dims::is_symbolic(size) && (at < 0 || at >= size) {
        return fail(format!(
            "index {index} is out of range for dimension {dim} of size {size}"
        ));
    }
    Ok(at)
}
