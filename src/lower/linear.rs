//! Matrix products: `mm`, `bmm`, `addmm`, grouped products (mixture-of-experts layers) and
//! fxmlir's own `mm_pairs`. Contractions become linalg named ops, accumulating half types in
//! f32 as PyTorch's CPU kernels do; epilogues (bias, scaling) are elementwise generics that the
//! fusion stage folds into the consumer.

use super::indexing::{extract, fill_rows, for_loop, index_to_i64, nth, reuse, to_index};
use super::reduction::linalg_index;
use super::resize::{affine, dims, place};
use super::{Emit, Iter, LowerCtx, Operand, Registry, Scalar, Tensor, emit, fail};
use crate::error::Result;
use crate::graph::{DType, Node};
use crate::target::Target;
use crate::tuning::{
    BATCHED_PAIR_MAPS, MIN_PARALLEL_WORK, PAIR_LANES, PAIR_MAPS, largest_divisor_at_most,
};
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Product {
    Mm,
    Bmm,
    Addmm,
}

const LINEAR: &[(&str, Product)] = &[
    ("aten.mm.default", Product::Mm),
    ("aten.bmm.default", Product::Bmm),
    ("aten.addmm.default", Product::Addmm),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, product) in LINEAR {
        r.add(op, move |ctx, node| lower_product(ctx, node, product));
    }
    r.add("fxmlir.mm_pairs.default", lower_pairs);
    for op in GROUPED {
        r.add(op, lower_grouped);
    }
}

/// Grouped products: transformers' mixture-of-experts fallback (f32 and f16 experts under
/// `torch.compile`) and PyTorch's own (bf16 experts), rank-2 left by rank-3 right operand.
const GROUPED: [&str; 2] = [
    "transformers.grouped_mm_fallback.default",
    "aten._grouped_mm.default",
];

/// Rows of the left operand per tile of a grouped product (at most; the largest divisor of
/// the row count). Each tile multiplies its rows by the matrix of every group it overlaps and
/// keeps each row's own: a tile of `r` rows reads each such matrix once for `r` rows, and each
/// group boundary inside a tile costs a product of `r` rows. Eight rows are the schedule's
/// tallest register tile, so one tile is one pass of register tiles over the matrix.
const GROUP_TILE_ROWS: i64 = 8;

/// What a tile of a grouped product reads: the left operand (`rows` x `k`), the group
/// matrices (`groups` x `k` x `n`) and each row's group (`rows`, i64).
struct Grouped<'c, 'a> {
    left: Value<'c, 'a>,
    right: Value<'c, 'a>,
    group_of: Value<'c, 'a>,
    shape: [i64; 4],
    tile: i64,
    dtype: DType,
    acc: DType,
    out: DType,
}

/// `transformers.grouped_mm_fallback(input, weight, offs)` and `aten._grouped_mm(mat_a, mat_b,
/// offs)`: the rows of `input` (s x k) come sorted in groups, group `g` ending before row
/// `offs[g]` where group `g - 1` ended, and each group's rows are multiplied by its own matrix
/// `weight[g]` (k x n). Rows from `offs[-1]` on belong to no group and are zero (the fallback
/// zeroes them; `_grouped_mm` leaves them unset). The rows are cut into tiles of at most
/// [`GROUP_TILE_ROWS`] (the tiles run in parallel when the product is large); each tile loops
/// over the groups its rows belong to, computes a full tile product with that group's matrix
/// (a static `linalg.matmul`, which the schedule stage register-tiles and vectorises) and keeps
/// the rows of that group.
fn lower_grouped<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let left = ctx.tensor(node, 0)?;
    let right = ctx.tensor(node, 1)?;
    let offs = ctx.opt_tensor(node, 2)?;
    let ([s, k], [groups, k2, n]) = (&left.shape[..], &right.shape[..]) else {
        return fail(format!(
            "grouped products take a rank-2 left and a rank-3 right operand, got shapes {:?} and {:?}",
            left.shape, right.shape
        ));
    };
    let (s, k, groups, n) = (*s, *k, *groups, *n);
    if k != *k2 {
        return fail(format!(
            "shapes {:?} and {:?} cannot be multiplied group by group",
            left.shape, right.shape
        ));
    }
    let Some(offs) = offs else {
        return fail(
            "a grouped product without `offs` (one group per batch entry) is not supported",
        );
    };
    if node.args.len() > 3 && ctx.opt_tensor(node, 3)?.is_some() {
        return fail("a grouped product's `bias` is not supported");
    }
    if offs.shape != [groups] || !matches!(offs.dtype, DType::Int32 | DType::Int64) {
        return fail(format!(
            "`offs` must hold one int32 or int64 end row per group ({groups}), got {} of shape {:?}",
            offs.dtype.name(),
            offs.shape
        ));
    }
    if left.dtype != right.dtype || left.dtype.is_bool() {
        return fail(format!(
            "grouped products take two operands of one numeric dtype, got {} and {}",
            left.dtype.name(),
            right.dtype.name()
        ));
    }
    if s == 0 || n == 0 || k == 0 || groups == 0 {
        return Ok(vec![ctx.e.splat(&out.shape, out.dtype, Scalar::Int(0))?]);
    }
    let tile = largest_divisor_at_most(s, GROUP_TILE_ROWS);
    let p = Grouped {
        left: left.value,
        right: right.value,
        group_of: group_of_rows(ctx, &offs, s)?,
        shape: [s, k, groups, n],
        tile,
        dtype: left.dtype,
        acc: if left.dtype.is_float() {
            left.dtype.compute()
        } else {
            left.dtype
        },
        out: out.dtype,
    };
    let init = ctx.e.empty(&[s, n], out.dtype)?;
    let tiles = s / tile;
    let parallel = tiles > 1 && s.saturating_mul(k).saturating_mul(n) >= MIN_PARALLEL_WORK;
    let result = fill_rows(
        &ctx.e,
        init,
        &[s, n],
        (tiles, Some(tile)),
        parallel,
        &|b, t| grouped_tile(b, &p, t),
    )?;
    Ok(vec![result])
}

/// Each row's group: the number of groups that end at or before it (`groups` for the rows
/// after the last), as an i64 vector of `rows`.
fn group_of_rows<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    offs: &Tensor<'c, 'a>,
    rows: i64,
) -> Result<Value<'c, 'a>> {
    let init = ctx.e.splat(&[rows], DType::Int64, Scalar::Int(0))?;
    let ends = offs.dtype;
    let counted = ctx.e.generic(
        &[(offs.value, emit::affine_map(2, &[Some(1)]))],
        &[(init, emit::affine_map(2, &[Some(0)]))],
        &[Iter::Parallel, Iter::Reduction],
        |b, v| {
            let row = index_to_i64(b, linalg_index(b, 0)?)?;
            let end = b.convert(v[0], ends, DType::Int64)?;
            let ended = b.cmpi("sle", end, row)?;
            let one = b.convert(ended, DType::Bool, DType::Int64)?;
            Ok(vec![b.same("arith.addi", &[v[1], one])?])
        },
    )?;
    nth(&counted, 0)
}

/// Tile `t` of a grouped product: its rows of the result and its first row.
fn grouped_tile<'c, 'b>(
    b: &Emit<'c, 'b>,
    p: &Grouped<'c, '_>,
    t: Value<'c, 'b>,
) -> Result<(Value<'c, 'b>, Value<'c, 'b>)> {
    let [s, k, groups, n] = p.shape;
    let first = b.same("arith.muli", &[t, b.index(p.tile)?])?;
    let last = b.same("arith.addi", &[first, b.index(p.tile - 1)?])?;
    let left = b.extract_at(reuse(p.left), &[s, k], 0, first, Some(p.tile), p.dtype)?;
    let group_of = b.extract_at(
        reuse(p.group_of),
        &[s],
        0,
        first,
        Some(p.tile),
        DType::Int64,
    )?;
    let group_at = |row| -> Result<Value<'c, 'b>> {
        let g = extract(b, reuse(p.group_of), &[row], DType::Int64)?;
        to_index(b, g, DType::Int64)
    };
    let (lowest, highest) = (group_at(first)?, group_at(last)?);
    // Rows after the last group have group `groups`, which has no matrix.
    let past = b.same("arith.addi", &[highest, b.index(1)?])?;
    let end = b.same("arith.minsi", &[past, b.index(groups)?])?;
    // The tile stays in the accumulator dtype over the groups, so that keeping a group's rows
    // is the product's epilogue (fused into its register tiles); it is rounded once at the end.
    let zero = b.splat(&[p.tile, n], p.acc, Scalar::Int(0))?;
    let done = for_loop(b, lowest, end, b.index(1)?, &[zero], |c, g, carried| {
        let right = c.extract_at(reuse(p.right), &[groups, k, n], 0, g, None, p.dtype)?;
        let init = c.splat(&[p.tile, n], p.acc, Scalar::Int(0))?;
        let product = c.named_linalg("linalg.matmul", &[reuse(left), right], init, &[])?;
        let group = index_to_i64(c, g)?;
        let all = emit::identity_map(2);
        let kept = c.generic(
            &[
                (product, all.clone()),
                (reuse(group_of), emit::affine_map(2, &[Some(0)])),
            ],
            &[(nth(carried, 0)?, all)],
            &[Iter::Parallel, Iter::Parallel],
            |d, v| {
                let mine = d.cmpi("eq", v[1], reuse(group))?;
                Ok(vec![d.select(mine, v[0], v[2])?])
            },
        )?;
        Ok(vec![nth(&kept, 0)?])
    })?;
    let rows = nth(&done, 0)?;
    if p.out == p.acc {
        return Ok((rows, first));
    }
    let all = emit::identity_map(2);
    let rounded = b.generic(
        &[(rows, all.clone())],
        &[(b.empty(&[p.tile, n], p.out)?, all)],
        &[Iter::Parallel, Iter::Parallel],
        |d, v| Ok(vec![d.convert(v[0], p.acc, p.out)?]),
    )?;
    Ok((nth(&rounded, 0)?, first))
}

/// `fxmlir.mm_pairs(a, pairs)`: `a` (m x k, bf16) times a right operand packed in pairs along
/// the reduction (`pairs[k / 2, n, k % 2]` holds `b[k, n]`), accumulated and returned in f32.
/// The pairs are the operand layout of AVX512-BF16's dot product, which the schedule maps this
/// contraction to; `fxmlir.pairs` packs weights so, in the part of the graph that
/// `fxmlir.hoist` takes out of the kernel.
fn lower_pairs<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let a = ctx.tensor(node, 0)?;
    let pairs = ctx.tensor(node, 1)?;
    if a.dtype != DType::Bfloat16 || pairs.dtype != DType::Bfloat16 {
        return fail(format!(
            "mm_pairs takes bfloat16 operands, got {} and {}",
            a.dtype.name(),
            pairs.dtype.name()
        ));
    }
    let [m, k] = a.shape[..] else {
        return fail(format!(
            "mm_pairs: expected a rank-2 left operand, got {:?}",
            a.shape
        ));
    };
    if pairs.rank() != 3 || pairs.shape[2] != 2 || 2 * pairs.shape[0] != k {
        return fail(format!(
            "mm_pairs: the right operand of a {m} x {k} left one must be {} x n x 2, got {:?}",
            k / 2,
            pairs.shape
        ));
    }
    let a = ctx.reshape(&a, &[m, k / 2, 2])?;
    let product = pair_product(ctx, &a, &pairs)?;
    Ok(vec![ctx.cast(&product, out.dtype)?.value])
}

/// The f32 product of `a` (`[batch,] m x k x 2`) and `pairs` (`[batch,] k x n x 2`), both
/// bf16, whose last dimension pairs adjacent steps of the reduction: the `linalg.contract` over
/// [`PAIR_MAPS`] (or [`BATCHED_PAIR_MAPS`]) that the schedule maps to AVX512-BF16's dot
/// product.
pub(super) fn pair_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    a: &Tensor<'c, 'a>,
    pairs: &Tensor<'c, 'a>,
) -> Result<Tensor<'c, 'a>> {
    let rank = a.rank();
    let mut shape = a.shape[..rank - 2].to_vec();
    shape.push(pairs.shape[rank - 2]);
    let zero = ctx.e.splat(&shape, DType::Float32, Scalar::Int(0))?;
    let maps = ctx.e.attr(if rank == 4 {
        BATCHED_PAIR_MAPS
    } else {
        PAIR_MAPS
    })?;
    let value = ctx.e.named_linalg(
        "linalg.contract",
        &[a.value, pairs.value],
        zero,
        &[("indexing_maps", maps)],
    )?;
    Ok(Tensor {
        value,
        shape,
        dtype: DType::Float32,
    })
}

/// `t` with dimension `dim` padded with zeros to a multiple of `multiple`.
pub(super) fn pad_to_multiple<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: &Tensor<'c, 'a>,
    dim: usize,
    multiple: i64,
) -> Result<Tensor<'c, 'a>> {
    let mut shape = t.shape.clone();
    shape[dim] += (-shape[dim]).rem_euclid(multiple);
    zero_padded(ctx, t, &shape)
}

/// `t` at the start of a zero tensor of `shape` (at least `t`'s in every dimension).
fn zero_padded<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: &Tensor<'c, 'a>,
    shape: &[i64],
) -> Result<Tensor<'c, 'a>> {
    let rank = t.rank();
    place(
        ctx,
        t,
        Scalar::Int(0),
        shape,
        &vec![0; rank],
        &vec![1; rank],
    )
}

/// The first `size` entries of `t` along dimension `dim`.
pub(super) fn first_entries<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: &Tensor<'c, 'a>,
    dim: usize,
    size: i64,
) -> Result<Tensor<'c, 'a>> {
    if t.shape[dim] == size {
        return Ok(t.clone());
    }
    let mut shape = t.shape.clone();
    shape[dim] = size;
    let rank = t.rank();
    let value = ctx.e.extract_slice(
        t.value,
        &vec![0; rank],
        &shape,
        &vec![1; rank],
        &shape,
        t.dtype,
    )?;
    Ok(Tensor {
        value,
        shape,
        dtype: t.dtype,
    })
}

/// Rows from which a bf16 product of two computed operands packs its right operand in pairs
/// per call and runs on AVX512-BF16's dot product: the packing is a copy of the right operand,
/// which the dot product's rate (about three times that of f32 multiply-adds on widened
/// operands) repays over enough rows. A right operand of at most [`CACHED_RIGHT_BYTES`] per
/// batch is packed and read back in cache, and pays from [`MIN_CACHED_PAIR_ROWS`] rows; a larger
/// one from [`MIN_PAIR_ROWS`]. Measured on `bmm`: 1 x 16 x 1024 x 1024 took 0.21 ms packed
/// against 0.17 widened, 1 x 32 x 1024 x 1024 0.26 against 0.34, 32 x 8 x 64 x 128 0.022
/// against 0.029, and attention's 12 x 197 x 64 x 197 0.13 against 0.34. (Weights are packed
/// once, outside the kernel, by `fxmlir.pairs`.)
const MIN_PAIR_ROWS: i64 = 32;
const MIN_CACHED_PAIR_ROWS: i64 = 8;
const CACHED_RIGHT_BYTES: i64 = 256 << 10;

/// `a @ b` (`[batch x] m x k` by `[batch x] k x n`, both bf16) as a pairs product, on a host
/// with AVX512-BF16's dot product and enough rows (see [`MIN_PAIR_ROWS`]); `None` otherwise.
/// `a` is read in pairs as it is (an odd `k` gets a zero column); `b` is packed per call into
/// `[batch x] k/2 x n x 2`, with zero columns up to a multiple of [`WHOLE_COLUMNS`] that the
/// result drops again. Attention's bf16 products (`q @ kᵀ`, `p @ v`) ran at about a quarter of
/// the dot product's rate with their operands widened to f32 as they were loaded.
fn computed_pairs<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    a: &Tensor<'c, 'a>,
    b: &Tensor<'c, 'a>,
) -> Result<Option<Tensor<'c, 'a>>> {
    let rank = a.rank();
    let (m, k, n) = (a.shape[rank - 2], a.shape[rank - 1], b.shape[rank - 1]);
    let cached = k.saturating_mul(n).saturating_mul(2) <= CACHED_RIGHT_BYTES;
    let min_rows = if cached {
        MIN_CACHED_PAIR_ROWS
    } else {
        MIN_PAIR_ROWS
    };
    if a.dtype != DType::Bfloat16
        || b.dtype != DType::Bfloat16
        || m < min_rows
        || k == 0
        || n == 0
        || !ctx.target.bf16_dot()
    {
        return Ok(None);
    }
    let half = (k + 1) / 2;
    let mut a_shape = a.shape[..rank - 1].to_vec();
    a_shape.extend([half, 2]);
    let a = ctx.reshape(&pad_to_multiple(ctx, a, rank - 1, 2)?, &a_shape)?;
    let lead = rank - 2;
    let mut b_shape = b.shape[..lead].to_vec();
    b_shape.extend([2 * half, n + (-n).rem_euclid(PAIR_LANES)]);
    let b = zero_padded(ctx, b, &b_shape)?;
    // Loops: [batch,] k / 2, n, k % 2.
    let mut read = dims(0..lead);
    read.push(format!("d{lead} * 2 + d{}", lead + 2));
    read.push(format!("d{}", lead + 1));
    let mut packed_shape = b.shape[..lead].to_vec();
    packed_shape.extend([half, b.shape[rank - 1], 2]);
    let init = ctx.e.empty(&packed_shape, DType::Bfloat16)?;
    let packed = ctx.e.generic(
        &[(b.value, affine(rank + 1, &read))],
        &[(init, emit::identity_map(rank + 1))],
        &vec![Iter::Parallel; rank + 1],
        |_, v| Ok(vec![v[0]]),
    )?[0];
    let packed = Tensor {
        value: packed,
        shape: packed_shape,
        dtype: DType::Bfloat16,
    };
    let product = pair_product(ctx, &a, &packed)?;
    Ok(Some(first_entries(ctx, &product, rank - 1, n)?))
}

/// Half-precision products of fewer rows multiply their operands as they are: one row is
/// bound by reading the right operand, which widening doubles. Measured on the AVX2 host with
/// a weight-only right operand of 512 x 4000 (widened once, outside the kernel): one row took
/// 0.32 ms on bf16 and 0.18 on f32, but 0.14 on f16 and 0.17 on f32; two rows 0.74 ms (bf16)
/// and 2.2 ms (f16) against 0.24 and 0.19 on f32; 128 rows 18.9 ms (bf16) and 70 ms (f16)
/// against 4.6 and 3.9.
pub const MIN_WIDENED_ROWS: i64 = 2;

/// Whether a product of `rows` rows of `dtype` operands multiplies f32 copies of them on
/// `target`: the half types the target has no dot product for (f16 everywhere, bf16 without
/// AVX512-BF16), whose register tiles would otherwise widen every element they load.
/// Widening is exact and the product accumulates in f32 either way, so the result is the
/// same.
pub fn widened(target: &Target, dtype: DType, rows: i64) -> bool {
    let widens = match dtype {
        DType::Float16 => true,
        DType::Bfloat16 => !target.bf16_dot(),
        _ => false,
    };
    rows >= MIN_WIDENED_ROWS && widens
}

/// `a @ b` for rank-2 (`linalg.matmul`) or rank-3 (`linalg.batch_matmul`) operands, in the
/// accumulator dtype of `dtype`; half-precision operands are multiplied as f32 copies where
/// [`widened`] says so.
pub(super) fn contract<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    a: &Tensor<'c, 'a>,
    b: &Tensor<'c, 'a>,
    dtype: DType,
) -> Result<Tensor<'c, 'a>> {
    let rank = a.rank();
    if rank != b.rank() || !(rank == 2 || rank == 3) {
        return fail(format!(
            "matrix product needs two rank-2 or two rank-3 operands, got shapes {:?} and {:?}",
            a.shape, b.shape
        ));
    }
    let (m, k) = (a.shape[rank - 2], a.shape[rank - 1]);
    let (k2, n) = (b.shape[rank - 2], b.shape[rank - 1]);
    if k != k2 || (rank == 3 && a.shape[0] != b.shape[0]) {
        return fail(format!(
            "shapes {:?} and {:?} cannot be multiplied",
            a.shape, b.shape
        ));
    }
    if dtype.is_bool() {
        return fail("matrix products of bool tensors are not supported");
    }
    let acc = if dtype.is_float() {
        dtype.compute()
    } else {
        dtype
    };
    let operands = if widened(ctx.target, dtype, m) {
        acc
    } else {
        dtype
    };
    let a = ctx.cast(a, operands)?;
    let b = ctx.cast(b, operands)?;
    if let Some(product) = computed_pairs(ctx, &a, &b)? {
        return Ok(product);
    }
    let mut shape = vec![m, n];
    if rank == 3 {
        shape.insert(0, a.shape[0]);
    }
    let zero = ctx.e.splat(&shape, acc, Scalar::Int(0))?;
    let name = if rank == 2 {
        "linalg.matmul"
    } else {
        "linalg.batch_matmul"
    };
    let value = ctx.e.named_linalg(name, &[a.value, b.value], zero, &[])?;
    Ok(Tensor {
        value,
        shape,
        dtype: acc,
    })
}

fn lower_product<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    product: Product,
) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let (a, b) = match product {
        Product::Mm | Product::Bmm => (ctx.tensor(node, 0)?, ctx.tensor(node, 1)?),
        Product::Addmm => (ctx.tensor(node, 1)?, ctx.tensor(node, 2)?),
    };
    let expected_rank = if matches!(product, Product::Bmm) {
        3
    } else {
        2
    };
    if a.rank() != expected_rank {
        return fail(format!(
            "expected rank-{expected_rank} operands, got {:?}",
            a.shape
        ));
    }
    let prod = contract(ctx, &a, &b, out.dtype)?;
    let acc = prod.dtype;
    let value = match product {
        Product::Mm | Product::Bmm => ctx.cast(&prod, out.dtype)?.value,
        Product::Addmm => {
            let bias = ctx.operand(node, 0)?;
            let beta = ctx.scalar(node, 3)?;
            let alpha = ctx.scalar(node, 4)?;
            let float = acc.is_float();
            ctx.elementwise(
                &[Operand::Tensor(prod), bias],
                &[acc, acc],
                acc,
                &out.shape,
                out.dtype,
                |e, v| {
                    let (mul, add) = if float {
                        ("arith.mulf", "arith.addf")
                    } else {
                        ("arith.muli", "arith.addi")
                    };
                    let mut p = v[0];
                    let mut c = v[1];
                    if alpha.as_f64() != 1.0 {
                        p = e.same(mul, &[p, e.constant(alpha, acc)?])?;
                    }
                    if beta.as_f64() == 0.0 {
                        // beta = 0 ignores the bias entirely, NaNs included.
                        return Ok(p);
                    }
                    if beta.as_f64() != 1.0 {
                        c = e.same(mul, &[c, e.constant(beta, acc)?])?;
                    }
                    e.same(add, &[p, c])
                },
            )?
        }
    };
    Ok(vec![value])
}
