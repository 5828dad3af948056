//! Scans and sorting: cumsum/cumprod as an `scf.for` along the scanned dimension carrying the
//! running total (one `linalg.generic` over the other dimensions per step, or scalar loops when
//! those slices are short), in the accumulator type of PyTorch's CPU kernel; sort and topk as a
//! stable bottom-up merge sort of every row (the sorted dimension moved last), `scf.for` loops
//! over tensors. NaN sorts as the largest value, as in PyTorch; equal keys keep their order
//! (`sort.default` on CPU is stable for rows of up to 16 elements and unspecified beyond;
//! `topk` breaks ties by position here, PyTorch's by its selection algorithm).

use super::elements::{extract, index_to_i64, insert, linalg_index};
use super::layout::permute;
use super::loops::{for_loop, loop_nest, nth, reuse};
use super::{Emit, Iter, LowerCtx, Registry, Scalar, Tensor, emit, fail, norm_dim};
use crate::error::Result;
use crate::graph::{Arg, DType, Node, dims};
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Scan {
    CumSum,
    CumProd,
    Sort,
    SortStable,
    TopK,
}

const SCANS: &[(&str, Scan)] = &[
    ("aten.cumsum.default", Scan::CumSum),
    ("aten.cumprod.default", Scan::CumProd),
    ("aten.sort.default", Scan::Sort),
    ("aten.sort.stable", Scan::SortStable),
    ("aten.topk.default", Scan::TopK),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, scan) in SCANS {
        r.add(op, move |ctx, node| lower_scan(ctx, node, scan));
    }
}

fn lower_scan<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    scan: Scan,
) -> Result<Vec<Value<'c, 'a>>> {
    match scan {
        Scan::CumSum | Scan::CumProd => {
            Ok(vec![cumulative(ctx, node, matches!(scan, Scan::CumProd))?])
        }
        Scan::Sort | Scan::SortStable | Scan::TopK => sort(ctx, node, scan),
    }
}

fn opt_bool(ctx: &LowerCtx, node: &Node, index: usize, default: bool) -> Result<bool> {
    match node.args.get(index) {
        None | Some(Arg::None) => Ok(default),
        Some(_) => ctx.bool(node, index),
    }
}

// ---- cumsum / cumprod ----------------------------------------------------------------------

fn accumulate<'c, 'b>(
    b: &Emit<'c, 'b>,
    total: Value<'c, 'b>,
    x: Value<'c, 'b>,
    acc: DType,
    product: bool,
) -> Result<Value<'c, 'b>> {
    let name = match (product, acc.is_float()) {
        (false, true) => "arith.addf",
        (false, false) => "arith.addi",
        (true, true) => "arith.mulf",
        (true, false) => "arith.muli",
    };
    b.same(name, &[total, x])
}

/// The scan as scalar loops, the scanned dimension innermost: for scans whose slices would
/// be short (the scanned dimension is last, or nearly), where one `linalg.generic` per step
/// costs more than it vectorises.
fn cumulative_rows<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dim: usize,
    acc: DType,
    to: DType,
    product: bool,
) -> Result<Value<'c, 'a>> {
    let mut rest = x.shape.clone();
    let n = rest.remove(dim);
    let init = ctx.e.empty(&x.shape, to)?;
    let (input, from) = (x.value, x.dtype);
    let start = Scalar::Int(if product { 1 } else { 0 });
    let results = loop_nest(&ctx.e, &rest, &[init], &|b, ivs, carried| {
        let total = b.constant(start, acc)?;
        let outer = ivs.to_vec();
        let results = for_loop(
            b,
            b.index(0)?,
            b.size(n)?,
            b.index(1)?,
            &[total, nth(carried, 0)?],
            |m, k, carried| {
                let mut at: Vec<Value> = outer.iter().map(|&v| reuse(v)).collect();
                at.insert(dim, k);
                let x = extract(m, reuse(input), &at, from)?;
                let x = m.convert(x, from, acc)?;
                let total = accumulate(m, nth(carried, 0)?, x, acc, product)?;
                let element = m.convert(total, acc, to)?;
                Ok(vec![total, insert(m, element, nth(carried, 1)?, &at)?])
            },
        )?;
        Ok(vec![nth(&results, 1)?])
    })?;
    nth(&results, 0)
}

/// cumsum / cumprod: `out[.., k, ..]` is the running total up to `k`, accumulated as PyTorch's
/// CPU kernel does and rounded to the output dtype at each step.
fn cumulative<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node, product: bool) -> Result<Value<'c, 'a>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if x.rank() == 0 || dims::is_empty(&out.shape)? {
        norm_dim(ctx.int(node, 1)?, x.rank())?;
        return Ok(ctx.cast(&x, out.dtype)?.value);
    }
    let dim = norm_dim(ctx.int(node, 1)?, x.rank())?;
    if out.shape != x.shape {
        return fail(format!(
            "a scan of shape {:?} cannot give the recorded {:?}",
            x.shape, out.shape
        ));
    }
    // PyTorch's CPU scans accumulate in `acc_type<T, /*is_cuda=*/false>`: double for float,
    // float for the halves, int64 for integers (which wraps to the same result).
    let acc = match out.dtype {
        DType::Float32 | DType::Float64 => DType::Float64,
        DType::Float16 | DType::Bfloat16 => DType::Float32,
        _ => DType::Int64,
    };
    let mut rest = x.shape.clone();
    rest.remove(dim);
    // Short rows (a symbolic inner size counts as long) take the scalar loops.
    let inner = dims::product(&x.shape[dim + 1..])?;
    if !dims::is_symbolic(inner) && inner < 16 {
        return cumulative_rows(ctx, &x, dim, acc, out.dtype, product);
    }
    let running = ctx
        .e
        .splat(&rest, acc, Scalar::Int(if product { 1 } else { 0 }))?;
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let (from, to) = (x.dtype, out.dtype);
    let (input, shape) = (x.value, x.shape.clone());
    let e = ctx.e;
    let results = for_loop(
        &e,
        e.index(0)?,
        e.size(x.shape[dim])?,
        e.index(1)?,
        &[running, init],
        |b, k, carried| {
            let (running, result) = (nth(carried, 0)?, nth(carried, 1)?);
            let slice = b.extract_at(reuse(input), &shape, dim, k, None, from)?;
            let rank = rest.len();
            let part = b.empty(&rest, to)?;
            let id = emit::identity_map(rank);
            let updated = b.generic(
                &[(slice, id.clone())],
                &[(running, id.clone()), (part, id)],
                &vec![Iter::Parallel; rank],
                |g, v| {
                    let x = g.convert(v[0], from, acc)?;
                    let total = accumulate(g, v[1], x, acc, product)?;
                    Ok(vec![total, g.convert(total, acc, to)?])
                },
            )?;
            let (running, part) = (nth(&updated, 0)?, nth(&updated, 1)?);
            let result = b.insert_at(part, result, &shape, (dim, k, None), false)?;
            Ok(vec![running, result])
        },
    )?;
    nth(&results, 1)
}

// ---- sort / topk ---------------------------------------------------------------------------

/// Whether key `a` sorts strictly before key `b`: ascending or descending, NaN largest.
fn before<'c, 'b>(
    b: &Emit<'c, 'b>,
    x: Value<'c, 'b>,
    y: Value<'c, 'b>,
    dtype: DType,
    descending: bool,
) -> Result<Value<'c, 'b>> {
    // Descending order is ascending order with the operands swapped.
    let (lo, hi) = if descending { (y, x) } else { (x, y) };
    let less = b.compare("lt", lo, hi, dtype)?;
    if !dtype.is_float() {
        return Ok(less);
    }
    // `lo` sorts first when `hi` is NaN and `lo` is not.
    let hi_nan = b.cmpf("uno", hi, hi)?;
    let lo_number = b.cmpf("ord", lo, lo)?;
    let nan_last = b.same("arith.andi", &[hi_nan, lo_number])?;
    b.same("arith.ori", &[less, nan_last])
}

/// One merge pass over every row of `keys`/`ids` (`[rows, n]`): runs of `width` sorted
/// elements merge pairwise into runs of `2 * width`, written into `spare_*` (whose contents
/// are overwritten). Stable: on equal keys the left run's element goes first.
#[allow(clippy::too_many_arguments)]
fn merge_pass<'c, 'a>(
    e: &Emit<'c, 'a>,
    keys: Value<'c, 'a>,
    ids: Value<'c, 'a>,
    spare_keys: Value<'c, 'a>,
    spare_ids: Value<'c, 'a>,
    rows: i64,
    n: i64,
    width: Value<'c, 'a>,
    dtype: DType,
    descending: bool,
) -> Result<(Value<'c, 'a>, Value<'c, 'a>)> {
    let double = e.same("arith.addi", &[width, width])?;
    let results = loop_nest(e, &[rows], &[spare_keys, spare_ids], &|b, ivs, carried| {
        let row = nth(ivs, 0)?;
        let (lo, hi) = (b.index(0)?, b.size(n)?);
        for_loop(b, lo, hi, reuse(double), carried, |s, start, carried| {
            let row = reuse(row);
            let n_index = s.size(n)?;
            let mid = s.same("arith.addi", &[start, reuse(width)])?;
            let mid = s.same("arith.minsi", &[mid, n_index])?;
            let end = s.same("arith.addi", &[start, reuse(double)])?;
            let end = s.same("arith.minsi", &[end, n_index])?;
            let mut inits = vec![start, mid];
            inits.extend_from_slice(carried);
            let merged = for_loop(s, start, end, s.index(1)?, &inits, |m, k, carried| {
                let (row, mid, end) = (reuse(row), reuse(mid), reuse(end));
                let (i, j) = (nth(carried, 0)?, nth(carried, 1)?);
                let (out_keys, out_ids) = (nth(carried, 2)?, nth(carried, 3)?);
                // Exhausted runs are read at a clamped position and never taken.
                let last = m.same("arith.subi", &[m.size(n)?, m.index(1)?])?;
                let il = m.same("arith.minsi", &[i, last])?;
                let jl = m.same("arith.minsi", &[j, last])?;
                let (keys, ids) = (reuse(keys), reuse(ids));
                let left = extract(m, keys, &[row, il], dtype)?;
                let right = extract(m, keys, &[row, jl], dtype)?;
                let right_open = m.cmpi("slt", j, end)?;
                let right_first = before(m, right, left, dtype, descending)?;
                let left_closed = m.cmpi("sge", i, mid)?;
                let take_right = m.same("arith.ori", &[left_closed, right_first])?;
                let take_right = m.same("arith.andi", &[right_open, take_right])?;
                let key = m.select(take_right, right, left)?;
                let from = m.select(take_right, jl, il)?;
                let id = extract(m, ids, &[row, from], DType::Int64)?;
                let out_keys = insert(m, key, out_keys, &[row, k])?;
                let out_ids = insert(m, id, out_ids, &[row, k])?;
                let one = m.index(1)?;
                let i_next = m.same("arith.addi", &[i, one])?;
                let j_next = m.same("arith.addi", &[j, one])?;
                let i = m.select(take_right, i, i_next)?;
                let j = m.select(take_right, j_next, j)?;
                Ok(vec![i, j, out_keys, out_ids])
            })?;
            Ok(merged[2..].to_vec())
        })
    })?;
    Ok((nth(&results, 0)?, nth(&results, 1)?))
}

/// Sorts every row of `keys` (`[rows, n]`); returns the sorted keys and their int64 positions.
fn sort_rows<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    keys: &Tensor<'c, 'a>,
    descending: bool,
) -> Result<(Value<'c, 'a>, Value<'c, 'a>)> {
    let (rows, n) = match keys.shape[..] {
        [rows, n] => (rows, n),
        _ => return fail("internal: sort_rows takes a 2-D tensor"),
    };
    let e = ctx.e;
    let positions = e.empty(&keys.shape, DType::Int64)?;
    let ids = e.generic(
        &[],
        &[(positions, emit::identity_map(2))],
        &[Iter::Parallel, Iter::Parallel],
        |b, _| {
            let k = linalg_index(b, 1)?;
            Ok(vec![index_to_i64(b, k)?])
        },
    )?;
    let mut ids = nth(&ids, 0)?;
    let mut keys_now = keys.value;
    let fixed = |d: i64| !dims::is_symbolic(d);
    if (fixed(rows) && rows == 0) || (fixed(n) && n <= 1) {
        return Ok((keys_now, ids));
    }
    // Fresh allocations, not `tensor.empty`: CSE would merge two empties of one type, and
    // bufferization then gives both carried tensors one buffer.
    let spare_keys = e.alloc_tensor(&keys.shape, keys.dtype)?;
    let spare_ids = e.alloc_tensor(&keys.shape, DType::Int64)?;
    // ceil(log2(n)) passes of widths 1, 2, 4, ..: each loop iteration merges into the spare
    // buffers and back (a loop may not swap its carried tensors), so an odd count ends with a
    // pass of width >= n, which copies.
    let dtype = keys.dtype;
    let results = for_loop(
        &e,
        e.index(0)?,
        pass_pairs(&e, n)?,
        e.index(1)?,
        &[keys_now, ids, spare_keys, spare_ids],
        |b, pair, carried| {
            let one = b.index(1)?;
            let twice = b.same("arith.addi", &[pair, pair])?;
            let width = b.same("arith.shli", &[one, twice])?;
            let (k, i) = merge_pass(
                b,
                nth(carried, 0)?,
                nth(carried, 1)?,
                nth(carried, 2)?,
                nth(carried, 3)?,
                rows,
                n,
                width,
                dtype,
                descending,
            )?;
            let width = b.same("arith.addi", &[width, width])?;
            let (k_back, i_back) = merge_pass(
                b,
                k,
                i,
                nth(carried, 0)?,
                nth(carried, 1)?,
                rows,
                n,
                width,
                dtype,
                descending,
            )?;
            Ok(vec![k_back, i_back, k, i])
        },
    )?;
    keys_now = nth(&results, 0)?;
    ids = nth(&results, 1)?;
    Ok((keys_now, ids))
}

/// How many pairs of merge passes sort rows of `n`: half of ceil(log2(n)), rounded up; for a
/// symbolic `n` computed when the kernel runs.
fn pass_pairs<'c, 'a>(e: &Emit<'c, 'a>, n: i64) -> Result<Value<'c, 'a>> {
    if !dims::is_symbolic(n) {
        let passes = i64::from(64 - (n - 1).leading_zeros());
        return e.index((passes + 1) / 2);
    }
    // 64 - ctlz(n - 1) passes (0 for a row of one).
    let i64_type = e.elem_type(DType::Int64)?;
    let n = e.op1("arith.index_cast", &[e.size(n)?], i64_type, &[])?;
    let one = e.constant(Scalar::Int(1), DType::Int64)?;
    let last = e.same("arith.subi", &[n, one])?;
    let zeros = e.same("math.ctlz", &[last])?;
    let passes = e.same(
        "arith.subi",
        &[e.constant(Scalar::Int(64), DType::Int64)?, zeros],
    )?;
    let pairs = e.same("arith.addi", &[passes, one])?;
    let pairs = e.same("arith.shrui", &[pairs, one])?;
    e.op1("arith.index_cast", &[pairs], e.ty("index")?, &[])
}

/// sort (values, indices) and topk (the first `k` of the sorted row).
fn sort<'c, 'a>(ctx: &LowerCtx<'c, 'a>, node: &Node, scan: Scan) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let rank = x.rank();
    // sort.default(self, dim, descending); sort.stable(self, *, stable, dim, descending);
    // topk(self, k, dim, largest, sorted).
    let (dim, descending, k) = match scan {
        Scan::Sort => (ctx.int(node, 1)?, opt_bool(ctx, node, 2, false)?, None),
        Scan::SortStable => (ctx.int(node, 2)?, opt_bool(ctx, node, 3, false)?, None),
        _ => (
            ctx.int(node, 2)?,
            opt_bool(ctx, node, 3, true)?,
            Some(ctx.int(node, 1)?),
        ),
    };
    let dim = norm_dim(dim, rank)?;
    if rank == 0 && k == Some(0) {
        return fail("topk with k = 0 of a 0-d tensor is not supported");
    }
    let values_meta = ctx.out(0)?.clone();
    let indices_meta = ctx.out(1)?.clone();
    let n = x.shape.get(dim).copied().unwrap_or(1);
    let k = k.unwrap_or(n);
    if dims::is_symbolic(k) && k != n {
        return fail("topk of a symbolic k is not supported");
    }
    // A symbolic dimension holds k where tracing guards it.
    if !dims::is_symbolic(k) && (k < 0 || (!dims::is_symbolic(n) && k > n)) {
        return fail(format!(
            "k = {k} is out of range for a dimension of size {n}"
        ));
    }
    // The sorted dimension last, every other one flattened into rows.
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    if rank > 0 {
        perm.push(dim);
    }
    let moved = Tensor {
        value: permute(ctx, &x, &perm)?,
        shape: perm.iter().map(|&d| x.shape[d]).collect(),
        dtype: x.dtype,
    };
    let rows = dims::product(&moved.shape[..moved.rank().saturating_sub(1)])?;
    let flat = ctx.reshape(&moved, &[rows, n])?;
    let (keys, ids) = sort_rows(ctx, &flat, descending)?;
    let mut results = Vec::new();
    for (value, dtype, meta) in [
        (keys, x.dtype, &values_meta),
        (ids, DType::Int64, &indices_meta),
    ] {
        let value = if k != n {
            ctx.e
                .extract_slice(value, &[0, 0], &[rows, k], &[1, 1], &[rows, k], dtype)?
        } else {
            value
        };
        let mut shape = moved.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = k;
        }
        let t = ctx.reshape(
            &Tensor {
                value,
                shape: vec![rows, k],
                dtype,
            },
            &shape,
        )?;
        let mut inverse = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        let back = permute(ctx, &t, &inverse)?;
        let back = Tensor {
            value: back,
            shape: inverse.iter().map(|&i| shape[i]).collect(),
            dtype,
        };
        let back = ctx.cast(&back, meta.dtype)?;
        results.push(ctx.reshape(&back, &meta.shape)?.value);
    }
    Ok(results)
}
