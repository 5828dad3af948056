//! Indexing: gathers (embedding, index_select, gather, advanced indexing) are `linalg.generic`s
//! over the result that read the source with `tensor.extract`; embedding bags are a loop over
//! the bags, each a loop over its indices adding weight rows; scatters (scatter, scatter_add,
//! scatter_reduce, index_put) are `scf.for` nests over the updates that carry the destination
//! tensor, so updates apply one after the other in row-major order, as on PyTorch's CPU (the
//! last of duplicate indices wins an assignment; accumulation sums them all). select_scatter
//! and slice_scatter are `tensor.insert_slice`s.
//!
//! An index out of range raises where PyTorch's does: each index tensor is checked once,
//! before its op, by one reduction over it ([`check_range`]), which reports the node to the
//! call path (`IndexError`, see [`LowerCtx::report`]). The kernel itself stays within bounds
//! whatever the check finds: a negative index wraps once (`-1` is the last element, as
//! advanced indexing allows); an index still out of range reads the nearest element (clamped)
//! in a gather and is dropped in a scatter.

use super::elements::{extract, extreme, insert, linalg_index, to_index};
use super::emit::internal;
use super::loops::{fill_rows, for_loop, loop_nest, nth, reuse};
use super::window::check_shape;
use super::{
    Checked, Emit, Iter, LowerCtx, Operand, Registry, Scalar, Tensor, emit, fail, norm_dim,
};
use crate::error::{Check, Result};
use crate::graph::{Arg, DType, Node, dims};
use melior::ir::{Value, ValueLike};

#[derive(Clone, Copy)]
enum Indexing {
    Embedding,
    IndexSelect,
    Gather,
    Index,
    Scatter(Update),
    IndexPut,
    SelectScatter,
    SliceScatter,
}

/// How a scatter combines its updates with the destination.
#[derive(Clone, Copy)]
enum Update {
    /// `scatter.src`: assign the source tensor's elements.
    Src,
    /// `scatter.value`: assign a Python scalar.
    Value,
    /// `scatter_add`: sum.
    Add,
    /// `scatter_reduce.two`: the reduction named by its `reduce` argument.
    Reduce,
}

const INDEXING: &[(&str, Indexing)] = &[
    ("aten.embedding.default", Indexing::Embedding),
    ("aten.index_select.default", Indexing::IndexSelect),
    ("aten.gather.default", Indexing::Gather),
    ("aten.index.Tensor", Indexing::Index),
    ("aten.scatter.src", Indexing::Scatter(Update::Src)),
    ("aten.scatter.value", Indexing::Scatter(Update::Value)),
    ("aten.scatter_add.default", Indexing::Scatter(Update::Add)),
    ("aten.scatter_reduce.two", Indexing::Scatter(Update::Reduce)),
    ("aten.index_put.default", Indexing::IndexPut),
    ("aten.select_scatter.default", Indexing::SelectScatter),
    ("aten.slice_scatter.default", Indexing::SliceScatter),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, indexing) in INDEXING {
        // What PyTorch raises for an index out of range, per op.
        let check = match indexing {
            Indexing::SelectScatter | Indexing::SliceScatter => None,
            Indexing::Embedding | Indexing::IndexSelect | Indexing::Index | Indexing::IndexPut => {
                Some(Check::INDEX_ERROR)
            }
            Indexing::Gather | Indexing::Scatter(_) => Some(Check::INDEX_RUNTIME_ERROR),
        };
        match check {
            None => r.add(op, move |ctx, node| lower_indexing(ctx, node, indexing)),
            Some(check) => r.add_checked(op, always(check), move |ctx, node| {
                lower_indexing(ctx, node, indexing)
            }),
        }
    }
    r.add_checked(
        "aten._embedding_bag.default",
        always(Check::INDEX_RUNTIME_ERROR),
        embedding_bag,
    );
}

/// `check` on every node of the op.
fn always(check: Check) -> Checked {
    Checked {
        check,
        applies: |_| true,
    }
}

fn lower_indexing<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    indexing: Indexing,
) -> Result<Vec<Value<'c, 'a>>> {
    let value = match indexing {
        Indexing::Embedding => embedding(ctx, node)?,
        Indexing::IndexSelect => index_select(ctx, node)?,
        Indexing::Gather => gather_op(ctx, node)?,
        Indexing::Index => index(ctx, node)?,
        Indexing::Scatter(update) => scatter(ctx, node, update)?,
        Indexing::IndexPut => index_put(ctx, node)?,
        Indexing::SelectScatter => select_scatter(ctx, node)?,
        Indexing::SliceScatter => slice_scatter(ctx, node)?,
    };
    let out = ctx.out(0)?;
    let ty = ctx.e.tensor_type(&out.shape, out.dtype)?;
    if value.r#type() != ty {
        return fail(format!(
            "computed {} but the graph records {ty}",
            value.r#type()
        ));
    }
    Ok(vec![value])
}

/// An index into a dimension of `size` (at least 1): wrapped once if negative, then clamped
/// into range, with whether it was in range after wrapping.
fn bound<'c, 'b>(
    b: &Emit<'c, 'b>,
    i: Value<'c, 'b>,
    size: i64,
) -> Result<(Value<'c, 'b>, Value<'c, 'b>)> {
    let zero = b.index(0)?;
    let n = b.size(size)?;
    let negative = b.cmpi("slt", i, zero)?;
    let shifted = b.same("arith.addi", &[i, n])?;
    let wrapped = b.select(negative, shifted, i)?;
    let above = b.cmpi("sge", wrapped, zero)?;
    let below = b.cmpi("slt", wrapped, n)?;
    let in_range = b.same("arith.andi", &[above, below])?;
    let last = if dims::is_symbolic(size) {
        b.same("arith.subi", &[n, b.index(1)?])?
    } else {
        b.index(size - 1)?
    };
    let clamped = b.same("arith.minsi", &[wrapped, last])?;
    let clamped = b.same("arith.maxsi", &[clamped, zero])?;
    Ok((clamped, in_range))
}

/// Where one coordinate of the indexed tensor comes from, at a point of the iteration domain.
#[derive(Clone, Copy, Debug)]
enum Coord {
    /// A dimension of the iteration domain.
    Loop(usize),
    /// The value of index tensor `k` (wrapped and bounded against the dimension's size).
    Index(usize),
    /// Always 0 (a broadcast dimension of size 1).
    Zero,
}

/// A tensor read at a point of the iteration domain: its dimension `j` is read at domain
/// dimension `map[j]`, or at 0 where that is `None` (a broadcast).
#[derive(Clone)]
struct Read<'c, 'a> {
    tensor: Tensor<'c, 'a>,
    map: Vec<Option<usize>>,
}

impl<'c, 'a> Read<'c, 'a> {
    fn identity(tensor: Tensor<'c, 'a>) -> Self {
        let map = (0..tensor.rank()).map(Some).collect();
        Read { tensor, map }
    }

    /// Read with numpy broadcasting against `target`, whose dimensions are the domain's
    /// dimensions `start..start + target.len()`.
    fn broadcast(tensor: Tensor<'c, 'a>, target: &[i64], start: usize) -> Result<Self> {
        let Some(lead) = target.len().checked_sub(tensor.rank()) else {
            return fail(format!(
                "shape {} does not broadcast to {}",
                dims::shown(&tensor.shape),
                dims::shown(target)
            ));
        };
        let mut map = Vec::new();
        for (j, &d) in tensor.shape.iter().enumerate() {
            let t = target[lead + j];
            if d != 1 && d != t {
                return fail(format!(
                    "shape {} does not broadcast to {}",
                    dims::shown(&tensor.shape),
                    dims::shown(target)
                ));
            }
            map.push((d != 1 || t == 1).then_some(start + lead + j));
        }
        Ok(Read { tensor, map })
    }

    fn at<'b>(&self, b: &Emit<'c, 'b>, ivs: &[Value<'c, 'b>]) -> Result<Value<'c, 'b>> {
        let mut at = Vec::new();
        for m in &self.map {
            at.push(match *m {
                Some(d) => nth(ivs, d)?,
                None => b.index(0)?,
            });
        }
        extract(b, reuse(self.tensor.value), &at, self.tensor.dtype)
    }
}

/// Index tensors must hold integers (bool and uint8 masks are handled by the callers that
/// support them).
fn check_index(t: &Tensor, what: &str) -> Result<()> {
    if !t.dtype.is_int() || t.dtype == DType::Uint8 {
        return fail(format!(
            "{what} must be an int64 or int32 tensor, got {:?}",
            t.dtype
        ));
    }
    Ok(())
}

/// Reports (see [`LowerCtx::report`]) whether an element of `indices` lies outside
/// `[0, size)`, or `[-size, size)` when `wrapping` (`size` may be symbolic).
fn check_range(ctx: &LowerCtx, indices: &Tensor, wrapping: bool, size: i64) -> Result<()> {
    let dtype = indices.dtype;
    ctx.report_any(indices, |b, i| {
        let high = b.op1(
            "arith.index_cast",
            &[b.size(size)?],
            b.elem_type(dtype)?,
            &[],
        )?;
        let zero = b.constant(Scalar::Int(0), dtype)?;
        let low = if wrapping {
            b.same("arith.subi", &[zero, high])?
        } else {
            zero
        };
        let below = b.cmpi("slt", i, low)?;
        let above = b.cmpi("sge", i, high)?;
        b.same("arith.ori", &[below, above])
    })
}

// ---- gathers -------------------------------------------------------------------------------

/// `out[p] = src[coords(p)]` over the points `p` of `out_shape`.
/// Which values a gather's index tensors may hold; the others fail its node's check.
#[derive(Clone, Copy, PartialEq)]
enum Valid {
    /// `0..n` (embedding, index_select, gather).
    NonNegative,
    /// `-n..n`, a negative index counting from the end (advanced indexing).
    Wrapping,
    /// Indices fxmlir computed itself (a masked selection's order): not checked.
    Computed,
}

/// Checks the index tensors behind `coords` (coordinates into a tensor of `shape`) against the
/// sizes of the dimensions they index.
fn check_coords(
    ctx: &LowerCtx,
    shape: &[i64],
    indices: &[Read],
    coords: &[Coord],
    valid: Valid,
) -> Result<()> {
    if valid == Valid::Computed {
        return Ok(());
    }
    for (&size, c) in shape.iter().zip(coords) {
        if let Coord::Index(k) = *c {
            let read = indices
                .get(k)
                .ok_or_else(|| internal("a coordinate names no index tensor"))?;
            check_range(ctx, &read.tensor, valid == Valid::Wrapping, size)?;
        }
    }
    Ok(())
}

fn gather<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    src: &Tensor<'c, 'a>,
    out_shape: &[i64],
    indices: &[Read<'c, 'a>],
    coords: &[Coord],
    valid: Valid,
) -> Result<Value<'c, 'a>> {
    if coords.len() != src.rank() {
        return fail("internal: one coordinate per source dimension is required");
    }
    check_coords(ctx, &src.shape, indices, coords, valid)?;
    if out_shape.contains(&0) {
        return ctx.e.empty(out_shape, src.dtype);
    }
    for (d, c) in coords.iter().enumerate() {
        if matches!(c, Coord::Index(_) | Coord::Zero) && src.shape[d] == 0 {
            return fail(format!(
                "index out of range: dimension {d} of the indexed tensor has size 0"
            ));
        }
    }
    let rank = out_shape.len();
    let inputs: Vec<(Value<'c, 'a>, String)> = indices
        .iter()
        .map(|r| (r.tensor.value, emit::affine_map(rank, &r.map)))
        .collect();
    let init = ctx.e.empty(out_shape, src.dtype)?;
    let index_dtypes: Vec<DType> = indices.iter().map(|r| r.tensor.dtype).collect();
    let (table, dtype, shape) = (src.value, src.dtype, src.shape.clone());
    let results = ctx.e.generic(
        &inputs,
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, args| {
            let mut at = Vec::new();
            for (d, c) in coords.iter().enumerate() {
                at.push(match *c {
                    Coord::Loop(l) => linalg_index(b, l)?,
                    Coord::Index(k) => {
                        let i = to_index(b, nth(args, k)?, nth(&index_dtypes, k)?)?;
                        bound(b, i, shape[d])?.0
                    }
                    Coord::Zero => b.index(0)?,
                });
            }
            Ok(vec![extract(b, reuse(table), &at, dtype)?])
        },
    )?;
    nth(&results, 0)
}

fn embedding<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let weight = ctx.tensor(node, 0)?;
    let indices = ctx.tensor(node, 1)?;
    check_index(&indices, "embedding indices")?;
    if weight.rank() != 2 {
        return fail(format!(
            "embedding weight must be 2-D, got shape {:?}",
            weight.shape
        ));
    }
    let r = indices.rank();
    let mut out_shape = indices.shape.clone();
    out_shape.push(weight.shape[1]);
    gather(
        ctx,
        &weight,
        &out_shape,
        &[Read::identity(indices)],
        &[Coord::Index(0), Coord::Loop(r)],
        Valid::NonNegative,
    )
}

/// How `_embedding_bag` combines a bag's rows (its `mode` argument).
#[derive(Clone, Copy, PartialEq)]
enum Bag {
    Sum,
    Mean,
    Max,
}

/// What one bag's loop needs.
struct Bags<'c, 'a> {
    weight: Tensor<'c, 'a>,
    indices: Tensor<'c, 'a>,
    offsets: Tensor<'c, 'a>,
    per_sample: Option<Tensor<'c, 'a>>,
    bag: Bag,
    include_last_offset: bool,
    /// The row whose index is left out (`padding_idx`), if any.
    padding: Option<i64>,
    acc: DType,
}

/// `_embedding_bag(weight, indices, offsets, …, mode, …, per_sample_weights,
/// include_last_offset, padding_idx)`: bag `b` is `indices[offsets[b]:offsets[b + 1]]` (the last
/// bag runs to the end unless `include_last_offset`), and its output row is the sum (weighted
/// by `per_sample_weights`), mean or maximum of the weight rows it names, the padding row left
/// out; an empty bag gives zeros. Each bag is a loop over its indices accumulating one row
/// (in f32 for half types), the bags an `scf.forall` when the work is large. Only the output
/// itself is computed: the bookkeeping outputs (offset2bag, bag sizes, max indices) that the
/// backward reads are refused when anything reads them, so a training graph leaves the op to
/// eager PyTorch.
fn embedding_bag<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let weight = ctx.tensor(node, 0)?;
    let indices = ctx.tensor(node, 1)?;
    let offsets = ctx.tensor(node, 2)?;
    let bag = match ctx.opt_int(node, 4)?.unwrap_or(0) {
        0 => Bag::Sum,
        1 => Bag::Mean,
        2 => Bag::Max,
        m => return fail(format!("mode {m} is not one of 0 (sum), 1 (mean), 2 (max)")),
    };
    let per_sample = ctx.opt_tensor(node, 6)?;
    let include_last_offset = node.args.len() > 7 && ctx.bool(node, 7)?;
    let padding = ctx.opt_int(node, 8)?.filter(|&p| p >= 0);
    if let Some(k) = (1..4).find(|&k| ctx.used(node, k)) {
        return fail(format!(
            "output {k} (offset2bag, bag sizes or max indices, read by the backward) is not \
             computed; only the bags' rows are"
        ));
    }
    check_index(&indices, "embedding_bag indices")?;
    check_index(&offsets, "embedding_bag offsets")?;
    if weight.rank() != 2 || !weight.dtype.is_float() || indices.rank() != 1 || offsets.rank() != 1
    {
        return fail(format!(
            "expected a 2-D floating-point weight and 1-D indices and offsets, got {} {:?}, \
             {:?} and {:?}",
            weight.dtype.name(),
            weight.shape,
            indices.shape,
            offsets.shape
        ));
    }
    if let Some(w) = &per_sample
        && (bag != Bag::Sum || w.shape != indices.shape || w.dtype != weight.dtype)
    {
        return fail(format!(
            "per_sample_weights must be given with mode sum, of the indices' shape {:?} and \
             the weight's dtype, got {} {:?}",
            indices.shape,
            w.dtype.name(),
            w.shape
        ));
    }
    let (rows, width) = (weight.shape[0], weight.shape[1]);
    check_range(ctx, &indices, false, rows)?;
    let bags = offsets.shape[0] - i64::from(include_last_offset);
    let out = ctx.out(0)?.clone();
    check_shape(&out.shape, &[bags.max(0), width])?;
    let mut results = Vec::new();
    for k in 1..4 {
        let unused = ctx.out(k)?.clone();
        results.push(ctx.e.empty(&unused.shape, unused.dtype)?);
    }
    let dtype = weight.dtype;
    let value = if out.shape.contains(&0) {
        ctx.e.empty(&out.shape, dtype)?
    } else if rows == 0 {
        return fail("the weight has no rows to read");
    } else {
        let p = Bags {
            acc: dtype.compute(),
            weight,
            indices,
            offsets,
            per_sample,
            bag,
            include_last_offset,
            padding,
        };
        let init = ctx.e.empty(&out.shape, dtype)?;
        let work = p.indices.shape[0].saturating_mul(width);
        let parallel = bags > 1 && work >= crate::tuning::MIN_PARALLEL_WORK;
        fill_rows(
            &ctx.e,
            init,
            &out.shape,
            (bags, None),
            parallel,
            &|b, at| Ok((bag_row(b, &p, at)?, at)),
        )?
    };
    results.insert(0, value);
    Ok(results)
}

/// Indices of a bag added to its row in one pass over the row: the accumulator row goes
/// through memory once per group instead of once per index.
const BAG_STEP: i64 = 4;

/// Adds the `count` indices from `first` to a bag's `carried` (row, indices seen).
fn add_to_bag<'c, 'b>(
    c: &Emit<'c, 'b>,
    p: &Bags<'c, '_>,
    first: Value<'c, 'b>,
    count: i64,
    carried: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>> {
    let (rows, width) = (p.weight.shape[0], p.weight.shape[1]);
    let (dtype, acc, bag) = (p.weight.dtype, p.acc, p.bag);
    let row_map = emit::identity_map(1);
    let mut reads = Vec::new();
    let mut valid = Vec::new();
    let mut scales = Vec::new();
    let mut seen = nth(carried, 1)?;
    for k in 0..count {
        let i = c.same("arith.addi", &[first, c.index(k)?])?;
        let id = extract(c, reuse(p.indices.value), &[i], p.indices.dtype)?;
        let id = c.convert(id, p.indices.dtype, DType::Int64)?;
        let kept = match p.padding {
            Some(pad) => c.cmpi("ne", id, c.constant(Scalar::Int(pad), DType::Int64)?)?,
            None => c.constant(Scalar::Bool(true), DType::Bool)?,
        };
        let (id, _) = bound(c, to_index(c, id, DType::Int64)?, rows)?;
        let read = c.extract_at(reuse(p.weight.value), &[rows, width], 0, id, None, dtype)?;
        reads.push((read, row_map.clone()));
        if let Some(w) = &p.per_sample {
            let s = extract(c, reuse(w.value), &[i], w.dtype)?;
            scales.push(c.convert(s, w.dtype, acc)?);
        }
        let one = c.convert(kept, DType::Bool, DType::Int64)?;
        seen = c.same("arith.addi", &[seen, one])?;
        valid.push(kept);
    }
    let reads_count = reads.len();
    let row = c.generic(
        &reads,
        &[(nth(carried, 0)?, row_map.clone())],
        &[Iter::Parallel],
        |d, v| {
            let mut total = nth(v, reads_count)?;
            for (k, &kept) in valid.iter().enumerate() {
                let mut w = d.convert(v[k], dtype, acc)?;
                if let Some(&s) = scales.get(k) {
                    w = d.same("arith.mulf", &[w, reuse(s)])?;
                }
                let combined = match bag {
                    Bag::Max => d.same("arith.maximumf", &[total, w])?,
                    Bag::Sum | Bag::Mean => d.same("arith.addf", &[total, w])?,
                };
                total = d.select(reuse(kept), combined, total)?;
            }
            Ok(vec![total])
        },
    )?;
    Ok(vec![nth(&row, 0)?, seen])
}

/// The output row of bag `at`.
fn bag_row<'c, 'b>(b: &Emit<'c, 'b>, p: &Bags<'c, '_>, at: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
    let width = p.weight.shape[1];
    let count = p.indices.shape[0];
    let offset = |i| -> Result<Value<'c, 'b>> {
        let v = extract(b, reuse(p.offsets.value), &[i], p.offsets.dtype)?;
        to_index(b, v, p.offsets.dtype)
    };
    let zero = b.index(0)?;
    let end_all = b.index(count)?;
    let clamp = |v, low| -> Result<Value<'c, 'b>> {
        let v = b.same("arith.maxsi", &[v, low])?;
        b.same("arith.minsi", &[v, end_all])
    };
    let start = clamp(offset(at)?, zero)?;
    // The next offset, or for the last bag without include_last_offset the indices' end.
    let next = b.same("arith.addi", &[at, b.index(1)?])?;
    let last = b.index(p.offsets.shape[0] - 1)?;
    let end = offset(b.same("arith.minsi", &[next, last])?)?;
    let end = if p.include_last_offset {
        end
    } else {
        let has_next = b.cmpi("slt", next, b.index(p.offsets.shape[0])?)?;
        b.select(has_next, end, end_all)?
    };
    let end = clamp(end, start)?;
    let fill = match p.bag {
        Bag::Max => Scalar::Float(f64::NEG_INFINITY),
        Bag::Sum | Bag::Mean => Scalar::Float(0.0),
    };
    let empty_row = b.splat(&[width], p.acc, fill)?;
    let none = b.constant(Scalar::Int(0), DType::Int64)?;
    let row_map = emit::identity_map(1);
    // Indices in groups of BAG_STEP, each group added to the row in one pass over it, then the
    // rest one by one.
    let step = b.index(BAG_STEP)?;
    let length = b.same("arith.subi", &[end, start])?;
    let grouped = b.same("arith.remsi", &[length, step])?;
    let grouped_end = b.same("arith.subi", &[end, grouped])?;
    let groups = for_loop(
        b,
        start,
        grouped_end,
        step,
        &[empty_row, none],
        |c, i, carried| add_to_bag(c, p, i, BAG_STEP, carried),
    )?;
    let done = for_loop(
        b,
        grouped_end,
        end,
        b.index(1)?,
        &groups,
        |c, i, carried| add_to_bag(c, p, i, 1, carried),
    )?;
    let (row, seen) = (nth(&done, 0)?, nth(&done, 1)?);
    let (dtype, acc, bag) = (p.weight.dtype, p.acc, p.bag);
    let init = b.empty(&[width], dtype)?;
    let finished = b.generic(
        &[(row, row_map.clone())],
        &[(init, row_map)],
        &[Iter::Parallel],
        |d, v| {
            let seen = reuse(seen);
            let value = match bag {
                Bag::Sum => v[0],
                // An empty bag's row holds zeros: dividing by at least one keeps them.
                Bag::Mean => {
                    let one = d.constant(Scalar::Int(1), DType::Int64)?;
                    let n = d.same("arith.maxsi", &[seen, one])?;
                    let n = d.convert(n, DType::Int64, acc)?;
                    d.same("arith.divf", &[v[0], n])?
                }
                Bag::Max => {
                    let nothing = d.cmpi("eq", seen, d.constant(Scalar::Int(0), DType::Int64)?)?;
                    d.select(nothing, d.constant(Scalar::Float(0.0), acc)?, v[0])?
                }
            };
            Ok(vec![d.convert(value, acc, dtype)?])
        },
    )?;
    nth(&finished, 0)
}

fn index_select<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let dim = norm_dim(ctx.int(node, 1)?, x.rank())?;
    let index = ctx.tensor(node, 2)?;
    check_index(&index, "index_select index")?;
    if index.rank() > 1 {
        return fail(format!(
            "index_select index must be 0-d or 1-D, got shape {:?}",
            index.shape
        ));
    }
    let out = ctx.out(0)?.clone();
    if x.rank() == 0 {
        // The whole (one-element) tensor; its only valid index is 0 (or -1).
        let flat = ctx.reshape(&x, &[1])?;
        let index = ctx.reshape(&index, &[index.shape.iter().product()])?;
        let v = gather(
            ctx,
            &flat,
            &index.shape.clone(),
            &[Read::identity(index)],
            &[Coord::Index(0)],
            Valid::NonNegative,
        )?;
        let t = Tensor {
            value: v,
            shape: vec![out.numel()],
            dtype: x.dtype,
        };
        return Ok(ctx.reshape(&t, &out.shape)?.value);
    }
    let mut out_shape = x.shape.clone();
    out_shape[dim] = index.shape.iter().product();
    let map = if index.rank() == 1 {
        vec![Some(dim)]
    } else {
        vec![]
    };
    let coords: Vec<Coord> = (0..x.rank())
        .map(|d| {
            if d == dim {
                Coord::Index(0)
            } else {
                Coord::Loop(d)
            }
        })
        .collect();
    gather(
        ctx,
        &x,
        &out_shape,
        &[Read { tensor: index, map }],
        &coords,
        Valid::NonNegative,
    )
}

/// A tensor and an index of the same rank for gather/scatter; 0-d ones are read as 1-D.
fn as_vector<'c, 'a>(ctx: &LowerCtx<'c, 'a>, t: Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
    if t.rank() == 0 {
        ctx.reshape(&t, &[1])
    } else {
        Ok(t)
    }
}

fn gather_op<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = as_vector(ctx, ctx.tensor(node, 0)?)?;
    let dim = norm_dim(ctx.int(node, 1)?, x.rank())?;
    let index = as_vector(ctx, ctx.tensor(node, 2)?)?;
    check_index(&index, "gather index")?;
    if index.rank() != x.rank() {
        return fail(format!(
            "gather index of shape {} must have the rank of the input {}",
            dims::shown(&index.shape),
            dims::shown(&x.shape)
        ));
    }
    let text = |shape: &[i64]| {
        let sizes: Vec<String> = shape
            .iter()
            .map(|&d| dims::poly_of(d).to_string())
            .collect();
        format!("[{}]", sizes.join(", "))
    };
    for d in (0..x.rank()).filter(|&d| d != dim) {
        let (i, n) = (index.shape[d], x.shape[d]);
        // A symbolic size is only known to fit the input's when it is the same size.
        let fits = i == n || !(dims::is_symbolic(i) || dims::is_symbolic(n)) && i <= n;
        if !fits {
            return fail(format!(
                "gather index of shape {} may be larger than the input {} in dimension {d}",
                text(&index.shape),
                text(&x.shape)
            ));
        }
    }
    let coords: Vec<Coord> = (0..x.rank())
        .map(|d| {
            if d == dim {
                Coord::Index(0)
            } else {
                Coord::Loop(d)
            }
        })
        .collect();
    let shape = index.shape.clone();
    let v = gather(
        ctx,
        &x,
        &shape,
        &[Read::identity(index)],
        &coords,
        Valid::NonNegative,
    )?;
    let out = ctx.out(0)?.clone();
    let t = Tensor {
        value: v,
        shape,
        dtype: x.dtype,
    };
    Ok(ctx.reshape(&t, &out.shape)?.value)
}

/// An entry of an index list: none (a full slice), integer indices, or a boolean mask.
enum Entry<'c, 'a> {
    Full,
    Indices(Tensor<'c, 'a>),
    Mask(Tensor<'c, 'a>),
}

fn index_list<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    node: &Node,
    arg: usize,
    rank: usize,
) -> Result<Vec<Entry<'c, 'a>>> {
    let Arg::List(items) = ctx.arg(node, arg)? else {
        return fail("indices must be a list of tensors or None");
    };
    let mut entries = Vec::new();
    for item in items {
        entries.push(match ctx.tensor_of(item)? {
            None if matches!(item, Arg::None) => Entry::Full,
            None => return fail("indices must be a list of tensors or None"),
            Some(t) if t.dtype.is_bool() || t.dtype == DType::Uint8 => Entry::Mask(t),
            Some(t) if t.dtype.is_int() => Entry::Indices(t),
            Some(t) => {
                return fail(format!(
                    "tensors used as indices must be integer or boolean, got {:?}",
                    t.dtype
                ));
            }
        });
    }
    let used: usize = entries
        .iter()
        .map(|e| match e {
            Entry::Mask(m) => m.rank(),
            _ => 1,
        })
        .sum();
    if used > rank {
        return fail(format!(
            "too many indices ({used}) for a tensor of rank {rank}"
        ));
    }
    Ok(entries)
}

/// Advanced indexing `x[indices]` with integer index tensors: the result shape, the index
/// reads (over the result's dimensions) and the coordinate of each dimension of `x`.
struct Advanced<'c, 'a> {
    shape: Vec<i64>,
    indices: Vec<Read<'c, 'a>>,
    coords: Vec<Coord>,
}

fn advanced<'c, 'a>(x: &Tensor<'c, 'a>, entries: Vec<Entry<'c, 'a>>) -> Result<Advanced<'c, 'a>> {
    let rank = x.rank();
    let mut positions = Vec::new();
    let mut tensors = Vec::new();
    for (d, entry) in entries.into_iter().enumerate() {
        match entry {
            Entry::Full => {}
            Entry::Indices(t) => {
                positions.push(d);
                tensors.push(t);
            }
            Entry::Mask(_) => {
                return fail(
                    "boolean mask indices give a data-dependent shape; only index_put supports \
                     a single mask",
                );
            }
        }
    }
    if positions.is_empty() {
        return Ok(Advanced {
            shape: x.shape.clone(),
            indices: vec![],
            coords: (0..rank).map(Coord::Loop).collect(),
        });
    }
    let shapes: Vec<&[i64]> = tensors.iter().map(|t| t.shape.as_slice()).collect();
    let broadcast = emit::broadcast_shapes(&shapes)?;
    // Indexed dimensions next to each other keep their place in the result; separated ones
    // (PyTorch follows numpy) put the broadcast index dimensions first.
    let adjacent = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let (first, last) = (positions[0], positions[positions.len() - 1]);
    let start = if adjacent { first } else { 0 };
    let mut shape = Vec::new();
    let mut coords = vec![Coord::Zero; rank];
    let mut keep = |d: usize, shape: &mut Vec<i64>| {
        coords[d] = Coord::Loop(shape.len());
        shape.push(x.shape[d]);
    };
    if adjacent {
        (0..first).for_each(|d| keep(d, &mut shape));
        shape.extend_from_slice(&broadcast);
        (last + 1..rank).for_each(|d| keep(d, &mut shape));
    } else {
        shape.extend_from_slice(&broadcast);
        (0..rank)
            .filter(|d| !positions.contains(d))
            .for_each(|d| keep(d, &mut shape));
    }
    for (k, &p) in positions.iter().enumerate() {
        coords[p] = Coord::Index(k);
    }
    let indices = tensors
        .into_iter()
        .map(|t| Read::broadcast(t, &broadcast, start))
        .collect::<Result<_>>()?;
    Ok(Advanced {
        shape,
        indices,
        coords,
    })
}

fn index<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let entries = index_list(ctx, node, 1, x.rank())?;
    let plan = advanced(&x, entries)?;
    let out = ctx.out(0)?.clone();
    if plan.shape != out.shape {
        return fail(format!(
            "indexing gives shape {} but the graph records {}",
            dims::shown(&plan.shape),
            dims::shown(&out.shape)
        ));
    }
    gather(
        ctx,
        &x,
        &plan.shape,
        &plan.indices,
        &plan.coords,
        Valid::Wrapping,
    )
}

// ---- scatters ------------------------------------------------------------------------------

/// How an update combines with the destination element.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Combine {
    Assign,
    Add,
    Mul,
    /// PyTorch's scatter maximum: a NaN update wins, otherwise `max(old, new)` keeping the old
    /// element on ties (so `-0.0` and `0.0` keep whichever came first).
    Max,
    Min,
}

fn combine<'c, 'b>(
    b: &Emit<'c, 'b>,
    how: Combine,
    old: Value<'c, 'b>,
    new: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let float = dtype.is_float();
    match how {
        Combine::Assign => Ok(new),
        Combine::Add => b.same(if float { "arith.addf" } else { "arith.addi" }, &[old, new]),
        Combine::Mul => b.same(if float { "arith.mulf" } else { "arith.muli" }, &[old, new]),
        Combine::Max | Combine::Min => {
            let max = how == Combine::Max;
            let better = if max {
                b.compare("lt", old, new, dtype)?
            } else {
                b.compare("lt", new, old, dtype)?
            };
            let picked = b.select(better, new, old)?;
            if float {
                let nan = b.cmpf("uno", new, new)?;
                b.select(nan, new, picked)
            } else {
                Ok(picked)
            }
        }
    }
}

/// The update of a scatter: a tensor read at the domain's points, or a scalar.
enum Source<'c, 'a> {
    Read(Read<'c, 'a>),
    Scalar(Scalar),
}

/// `dest` (of `shape` and dtype `acc`) updated at every point of `domain`, in row-major
/// order: the element at `coords(point)` becomes `how(old, update)`, the update converted from
/// `source_dtype` to `acc`. Updates whose index is out of range are dropped.
#[allow(clippy::too_many_arguments)]
fn scatter_loop<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    dest: Value<'c, 'a>,
    shape: &[i64],
    acc: DType,
    domain: &[i64],
    indices: &[Read<'c, 'a>],
    coords: &[Coord],
    source: &Source<'c, 'a>,
    source_dtype: DType,
    how: Combine,
) -> Result<Value<'c, 'a>> {
    if coords.len() != shape.len() {
        return fail("internal: one coordinate per destination dimension is required");
    }
    if domain.contains(&0) || shape.contains(&0) {
        return Ok(dest);
    }
    let results = loop_nest(&ctx.e, domain, &[dest], &|b, ivs, carried| {
        let dest = nth(carried, 0)?;
        let mut at = Vec::new();
        let mut ok: Option<Value> = None;
        for (d, c) in coords.iter().enumerate() {
            at.push(match *c {
                Coord::Loop(l) => nth(ivs, l)?,
                Coord::Zero => b.index(0)?,
                Coord::Index(k) => {
                    let read = indices
                        .get(k)
                        .ok_or_else(|| internal(format!("no index tensor {k}")))?;
                    let i = to_index(b, read.at(b, ivs)?, read.tensor.dtype)?;
                    let (i, in_range) = bound(b, i, shape[d])?;
                    ok = Some(match ok {
                        Some(prev) => b.same("arith.andi", &[prev, in_range])?,
                        None => in_range,
                    });
                    i
                }
            });
        }
        let update = match source {
            Source::Read(r) => r.at(b, ivs)?,
            Source::Scalar(s) => b.constant(*s, source_dtype)?,
        };
        let update = b.convert(update, source_dtype, acc)?;
        let old = extract(b, dest, &at, acc)?;
        let mut new = combine(b, how, old, update, acc)?;
        if let Some(ok) = ok {
            new = b.select(ok, new, old)?;
        }
        Ok(vec![insert(b, new, dest, &at)?])
    })?;
    nth(&results, 0)
}

fn scatter<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node, update: Update) -> Result<Value<'c, 'a>> {
    let x = as_vector(ctx, ctx.tensor(node, 0)?)?;
    let dim = norm_dim(ctx.int(node, 1)?, x.rank())?;
    let index = as_vector(ctx, ctx.tensor(node, 2)?)?;
    check_index(&index, "scatter index")?;
    let out = ctx.out(0)?.clone();
    if dims::is_empty(&index.shape)? {
        // No updates.
        let x = ctx.cast(&x, out.dtype)?;
        return Ok(ctx.reshape(&x, &out.shape)?.value);
    }
    if index.rank() != x.rank() {
        return fail(format!(
            "scatter index of shape {:?} must have the rank of the input {:?}",
            index.shape, x.shape
        ));
    }
    check_range(ctx, &index, false, x.shape[dim])?;
    // Sizes that are symbolic are the graph's tracing's to relate (it guards them).
    let within = |i: i64, s: i64| dims::is_symbolic(i) || dims::is_symbolic(s) || i <= s;
    for d in (0..x.rank()).filter(|&d| d != dim) {
        if !within(index.shape[d], x.shape[d]) {
            return fail(format!(
                "scatter index of shape {:?} is larger than the input {:?} in dimension {d}",
                index.shape, x.shape
            ));
        }
    }
    let (source, source_dtype) = match update {
        Update::Value => (Source::Scalar(ctx.scalar(node, 3)?), x.dtype),
        _ => {
            let src = as_vector(ctx, ctx.tensor(node, 3)?)?;
            let fits = src.rank() == index.rank()
                && index
                    .shape
                    .iter()
                    .zip(&src.shape)
                    .all(|(&i, &s)| within(i, s));
            if !fits {
                return fail(format!(
                    "scatter index of shape {:?} does not fit the source {:?}",
                    index.shape, src.shape
                ));
            }
            let dtype = src.dtype;
            (Source::Read(Read::identity(src)), dtype)
        }
    };
    let (how, reduce, include_self) = match update {
        Update::Src | Update::Value => (Combine::Assign, String::new(), true),
        Update::Add => (Combine::Add, "sum".to_string(), true),
        Update::Reduce => {
            let reduce = ctx.str(node, 4)?.unwrap_or_default();
            let how = match reduce.as_str() {
                "sum" | "mean" => Combine::Add,
                "prod" => Combine::Mul,
                "amax" => Combine::Max,
                "amin" => Combine::Min,
                other => return fail(format!("unknown scatter reduction `{other}`")),
            };
            let include_self = match node.args.get(5) {
                None | Some(Arg::None) => true,
                Some(_) => ctx.bool(node, 5)?,
            };
            (how, reduce, include_self)
        }
    };
    let mean = reduce == "mean";
    // Sums and products accumulate in PyTorch's accumulator type (f32 for halves, int64 for
    // integers, which wraps to the same result); max/min and assignment work in the dtype.
    let acc = match how {
        Combine::Add | Combine::Mul => x.dtype.accumulator(),
        _ => x.dtype,
    };
    if mean && x.dtype.is_bool() {
        return fail("scatter_reduce mean is not defined for bool");
    }
    let domain = index.shape.clone();
    let coords: Vec<Coord> = (0..x.rank())
        .map(|d| {
            if d == dim {
                Coord::Index(0)
            } else {
                Coord::Loop(d)
            }
        })
        .collect();
    let indices = [Read::identity(index)];
    let mut dest = ctx.cast(&x, acc)?.value;
    if !include_self {
        // PyTorch first sets every destination of an update to the reduction's identity.
        let identity = match how {
            Combine::Add => Scalar::Int(0),
            Combine::Mul => Scalar::Int(1),
            Combine::Max => extreme(acc, true),
            Combine::Min => extreme(acc, false),
            Combine::Assign => return fail("internal: assignment has no identity"),
        };
        dest = scatter_loop(
            ctx,
            dest,
            &x.shape,
            acc,
            &domain,
            &indices,
            &coords,
            &Source::Scalar(identity),
            acc,
            Combine::Assign,
        )?;
    }
    dest = scatter_loop(
        ctx,
        dest,
        &x.shape,
        acc,
        &domain,
        &indices,
        &coords,
        &source,
        source_dtype,
        how,
    )?;
    let mut result = Tensor {
        value: dest,
        shape: x.shape.clone(),
        dtype: acc,
    };
    if mean {
        result = scatter_mean(
            ctx,
            result,
            x.dtype,
            include_self,
            &domain,
            &indices,
            &coords,
        )?;
    }
    let result = ctx.cast(&result, out.dtype)?;
    Ok(ctx.reshape(&result, &out.shape)?.value)
}

/// The mean of a scatter_reduce: the sum divided by the number of contributions (the element
/// itself counts when `include_self`); elements nothing was scattered to are kept. Integers
/// divide with floor, after the sum wraps to the dtype, as PyTorch computes them.
fn scatter_mean<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    sum: Tensor<'c, 'a>,
    dtype: DType,
    include_self: bool,
    domain: &[i64],
    indices: &[Read<'c, 'a>],
    coords: &[Coord],
) -> Result<Tensor<'c, 'a>> {
    let acc = sum.dtype;
    let count_dtype = if acc.is_float() { acc } else { DType::Int64 };
    let count = ctx
        .e
        .splat(&sum.shape, count_dtype, Scalar::Int(include_self as i64))?;
    let count = scatter_loop(
        ctx,
        count,
        &sum.shape,
        count_dtype,
        domain,
        indices,
        coords,
        &Source::Scalar(Scalar::Int(1)),
        count_dtype,
        Combine::Add,
    )?;
    let count = Tensor {
        value: count,
        shape: sum.shape.clone(),
        dtype: count_dtype,
    };
    let shape = sum.shape.clone();
    let value = ctx.elementwise(
        &[Operand::Tensor(sum), Operand::Tensor(count)],
        &[acc, count_dtype],
        acc,
        &shape,
        acc,
        |b, v| {
            let zero = b.constant(Scalar::Int(0), count_dtype)?;
            let one = b.constant(Scalar::Int(1), count_dtype)?;
            let empty = b.compare("eq", v[1], zero, count_dtype)?;
            let n = b.select(empty, one, v[1])?;
            if acc.is_float() {
                b.same("arith.divf", &[v[0], n])
            } else {
                let wrapped = b.convert(v[0], acc, dtype)?;
                let wrapped = b.convert(wrapped, dtype, DType::Int64)?;
                b.floor_div_si(wrapped, n, DType::Int64)
            }
        },
    )?;
    Ok(Tensor {
        value,
        shape,
        dtype: acc,
    })
}

fn index_put<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let entries = index_list(ctx, node, 1, x.rank())?;
    let values = ctx.tensor(node, 2)?;
    let accumulate = match node.args.get(3) {
        None | Some(Arg::None) => false,
        Some(_) => ctx.bool(node, 3)?,
    };
    let out = ctx.out(0)?.clone();
    if entries.iter().any(|e| matches!(e, Entry::Mask(_))) {
        return masked_put(ctx, &x, entries, values, accumulate);
    }
    let plan = advanced(&x, entries)?;
    check_coords(ctx, &x.shape, &plan.indices, &plan.coords, Valid::Wrapping)?;
    let source = Read::broadcast(values.clone(), &plan.shape, 0)?;
    let (how, acc) = if accumulate {
        (Combine::Add, x.dtype.accumulator())
    } else {
        (Combine::Assign, x.dtype)
    };
    let dest = ctx.cast(&x, acc)?.value;
    let dest = scatter_loop(
        ctx,
        dest,
        &x.shape,
        acc,
        &plan.shape,
        &plan.indices,
        &plan.coords,
        &Source::Read(source),
        values.dtype,
        how,
    )?;
    let result = Tensor {
        value: dest,
        shape: x.shape.clone(),
        dtype: acc,
    };
    Ok(ctx.cast(&result, out.dtype)?.value)
}

/// `index_put` with one boolean mask (and full slices): `x[..., mask, ...] = values`. The
/// `k`-th selected position (row-major over the mask) takes the `k`-th row of `values` along
/// the mask's result dimension, or its only row when that dimension broadcasts; so the values
/// are gathered to `x`'s shape (through the running count of selected positions) and selected
/// elementwise.
fn masked_put<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    entries: Vec<Entry<'c, 'a>>,
    values: Tensor<'c, 'a>,
    accumulate: bool,
) -> Result<Value<'c, 'a>> {
    let mut mask = None;
    let mut start = 0;
    for (d, entry) in entries.into_iter().enumerate() {
        match entry {
            Entry::Full => {}
            Entry::Mask(m) if mask.is_none() => {
                start = d;
                mask = Some(m);
            }
            _ => {
                return fail(
                    "index_put with a boolean mask supports only that mask and full slices",
                );
            }
        }
    }
    let Some(mask) = mask else {
        return fail("internal: no mask");
    };
    let r = mask.rank();
    let rank = x.rank();
    if x.shape.get(start..start + r) != Some(mask.shape.as_slice()) {
        return fail(format!(
            "mask of shape {:?} does not match the indexed shape {:?} at dimension {start}",
            mask.shape, x.shape
        ));
    }
    // The result of x[mask] has the shape before ++ [N] ++ after; N is data-dependent.
    let result_rank = rank - r + 1;
    if values.rank() > result_rank {
        return fail(format!(
            "values of shape {:?} do not broadcast to the masked selection",
            values.shape
        ));
    }
    let lead = result_rank - values.rank();
    let mut coords = Vec::new();
    let mut needs_count = false;
    for (j, &size) in values.shape.iter().enumerate() {
        let t = lead + j;
        let domain_dim = if t < start {
            Some(t)
        } else if t > start {
            Some(t - 1 + r)
        } else {
            None
        };
        coords.push(match domain_dim {
            _ if size == 1 => Coord::Zero,
            Some(d) => {
                if size != x.shape[d] {
                    return fail(format!(
                        "values of shape {:?} do not broadcast to the masked selection",
                        values.shape
                    ));
                }
                Coord::Loop(d)
            }
            None => {
                needs_count = true;
                Coord::Index(0)
            }
        });
    }
    let mut indices = Vec::new();
    if needs_count {
        let order = selection_order(ctx, &mask)?;
        let map = (start..start + r).map(Some).collect();
        indices.push(Read { tensor: order, map });
    }
    let spread = gather(ctx, &values, &x.shape, &indices, &coords, Valid::Computed)?;
    let spread = Tensor {
        value: spread,
        shape: x.shape.clone(),
        dtype: values.dtype,
    };
    // The mask with unit dimensions around it, to broadcast against x.
    let mut mask_shape = vec![1; start];
    mask_shape.extend_from_slice(&mask.shape);
    mask_shape.resize(rank, 1);
    let mask = ctx.reshape(&mask, &mask_shape)?;
    let dtype = x.dtype;
    let acc = if accumulate {
        dtype.accumulator()
    } else {
        dtype
    };
    ctx.elementwise(
        &[
            Operand::Tensor(mask),
            Operand::Tensor(x.clone()),
            Operand::Tensor(spread),
        ],
        &[DType::Bool, acc, acc],
        acc,
        &x.shape,
        dtype,
        |b, v| {
            let new = if accumulate {
                combine(b, Combine::Add, v[1], v[2], acc)?
            } else {
                v[2]
            };
            b.select(v[0], new, v[1])
        },
    )
}

/// For each position of `mask`, how many positions before it (row-major) are selected: the
/// row of the selection it writes, as int64.
fn selection_order<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    mask: &Tensor<'c, 'a>,
) -> Result<Tensor<'c, 'a>> {
    let order = ctx.e.empty(&mask.shape, DType::Int64)?;
    let zero = ctx.e.constant(Scalar::Int(0), DType::Int64)?;
    if mask.shape.contains(&0) {
        return Ok(Tensor {
            value: order,
            shape: mask.shape.clone(),
            dtype: DType::Int64,
        });
    }
    let read = Read::identity(mask.clone());
    let results = loop_nest(&ctx.e, &mask.shape, &[order, zero], &|b, ivs, carried| {
        let (order, count) = (nth(carried, 0)?, nth(carried, 1)?);
        let selected = read.at(b, ivs)?;
        let selected = b.convert(selected, read.tensor.dtype, DType::Int64)?;
        let selected = b.convert(selected, DType::Int64, DType::Bool)?;
        let selected = b.convert(selected, DType::Bool, DType::Int64)?;
        let order = insert(b, count, order, ivs)?;
        let count = b.same("arith.addi", &[count, selected])?;
        Ok(vec![order, count])
    })?;
    Ok(Tensor {
        value: nth(&results, 0)?,
        shape: mask.shape.clone(),
        dtype: DType::Int64,
    })
}

fn select_scatter<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let src = ctx.tensor(node, 1)?;
    let rank = x.rank();
    if rank == 0 {
        return fail("select_scatter needs a tensor with at least one dimension");
    }
    let dim = norm_dim(ctx.int(node, 2)?, rank)?;
    let size = x.shape[dim];
    let index = super::data_movement::selected(ctx.int(node, 3)?, dim, size)?;
    let mut sizes = x.shape.clone();
    sizes[dim] = 1;
    let mut expected = x.shape.clone();
    expected.remove(dim);
    if src.shape != expected {
        return fail(format!(
            "select_scatter source of shape {:?} does not match {expected:?}",
            src.shape
        ));
    }
    let src = ctx.cast(&src, x.dtype)?;
    let src = ctx.reshape(&src, &sizes)?;
    let mut offsets = vec![0; rank];
    offsets[dim] = index;
    ctx.e.insert_slice(src.value, x.value, &offsets, &sizes)
}

fn slice_scatter<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let src = ctx.tensor(node, 1)?;
    let rank = x.rank();
    if rank == 0 {
        return fail("slice_scatter needs a tensor with at least one dimension");
    }
    let dim = norm_dim(ctx.int(node, 2)?, rank)?;
    let size = x.shape[dim];
    let start = ctx.opt_int(node, 3)?.unwrap_or(0);
    let end = ctx.opt_int(node, 4)?.unwrap_or(size);
    let step = ctx.int(node, 5)?;
    if step <= 0 {
        return fail(format!("slice step must be positive, got {step}"));
    }
    let mut sizes = x.shape.clone();
    let start = if [size, start, end].into_iter().any(dims::is_symbolic) {
        sizes[dim] = src.shape.get(dim).copied().unwrap_or(0);
        super::data_movement::window(size, (start, end, step), sizes[dim])?
    } else {
        let clamp = |i: i64| (if i < 0 { i.saturating_add(size) } else { i }).clamp(0, size);
        let (start, end) = (clamp(start), clamp(end));
        sizes[dim] = if end > start {
            (end - start + step - 1) / step
        } else {
            0
        };
        start
    };
    if src.shape != sizes {
        return fail(format!(
            "slice_scatter source of shape {} does not match the slice {}",
            dims::shown(&src.shape),
            dims::shown(&sizes)
        ));
    }
    let src = ctx.cast(&src, x.dtype)?;
    let mut offsets = vec![0; rank];
    offsets[dim] = start;
    let mut strides = vec![1; rank];
    strides[dim] = step;
    ctx.e
        .insert_strided_slice(src.value, x.value, &offsets, &sizes, &strides)
}
