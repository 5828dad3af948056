//! Matrix products: `mm`, `bmm`, `addmm`, grouped products (mixture-of-experts layers) and
//! fxmlir's own `mm_pairs` and `mm_panels`. Contractions become linalg named ops, accumulating half types in
//! f32 as PyTorch's CPU kernels do (built in `products`, which attention and convolution
//! share); epilogues (bias, scaling) are elementwise generics that the fusion stage folds into
//! the consumer.

use super::elements::{extract, index_to_i64, linalg_index_i64, to_index};
use super::loops::{fill_rows, for_loop, nth, reuse};
use super::products::{contract, pair_product, panel_product};
use super::{Emit, Iter, LowerCtx, Operand, Registry, Scalar, Tensor, Whole, emit, fail};
use crate::error::Result;
use crate::graph::{DType, Node, dims};
use crate::tuning::{MIN_PARALLEL_WORK, largest_divisor_at_most};
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
    r.add_whole(
        "fxmlir.mm_pairs.default",
        Whole {
            op: "fxmlir.mm_pairs",
            attributes: |_, _| Ok(vec![]),
        },
        lower_pairs,
    );
    r.add_whole(
        "fxmlir.mm_panels.default",
        Whole {
            op: "fxmlir.mm_panels",
            attributes: |_, _| Ok(vec![]),
        },
        lower_panels,
    );
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
            let row = linalg_index_i64(b, 0)?;
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
/// contraction to; `fxmlir.passes.bf16_pairs` packs weights so, in the part of the graph that
/// `fxmlir.passes.hoist` takes out of the kernel.
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
    // Sizes may be symbolic (markers): the reduction is twice the pairs' count as polynomials.
    if pairs.rank() != 3 || pairs.shape[2] != 2 || dims::product(&[2, pairs.shape[0]])? != k {
        return fail(format!(
            "mm_pairs: the right operand of a left one of shape {:?} must be (k / 2) x n x 2, got {:?}",
            a.shape, pairs.shape
        ));
    }
    let a = ctx.reshape(&a, &[m, pairs.shape[0], 2])?;
    let product = pair_product(ctx, &a, &pairs)?;
    Ok(vec![ctx.cast(&product, out.dtype)?.value])
}

/// `fxmlir.mm_panels(a, panels, bias)`: `a` (m x k, f32) times a right operand in panels of
/// `w` columns (`panels[j / w, k, j % w]` holds `b[k, j]`), plus `bias` (n, optional), in f32.
/// The panels are the layout the schedule's register tiles read the right operand in, and a
/// panel's rows follow one another in memory, so the tiles read them where they lie;
/// `fxmlir.passes.panels` hands weights over so, in the part of the graph that
/// `fxmlir.passes.hoist` takes out of the kernel. The bias is added in the product's own
/// layout (read as `panels x w`), where the schedule fuses it into the register tiles.
fn lower_panels<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let a = ctx.tensor(node, 0)?;
    let panels = ctx.tensor(node, 1)?;
    let bias = ctx.opt_tensor(node, 2)?;
    let operands = [Some(&a), Some(&panels), bias.as_ref()];
    if operands.iter().flatten().any(|t| t.dtype != DType::Float32) {
        let dtypes: Vec<&str> = operands.iter().flatten().map(|t| t.dtype.name()).collect();
        return fail(format!(
            "mm_panels takes float32 operands, got {}",
            dtypes.join(", ")
        ));
    }
    if a.rank() != 2 || panels.rank() != 3 || panels.shape[1] != a.shape[1] {
        return fail(format!(
            "mm_panels: the right operand of a left one of shape {:?} must be panels x k x width, got {:?}",
            a.shape, panels.shape
        ));
    }
    if let Some(bias) = &bias
        && bias.shape != [dims::product(&[panels.shape[0], panels.shape[2]])?]
    {
        return fail(format!(
            "mm_panels: the bias of a product by panels {:?} must have {} elements, got {:?}",
            panels.shape,
            panels.shape[0] * panels.shape[2],
            bias.shape
        ));
    }
    let product = panel_product(ctx, &a, &panels, bias.as_ref())?;
    let out = ctx.out(0)?;
    if out.shape != product.shape || out.dtype != DType::Float32 {
        return fail(format!(
            "mm_panels: the product of {:?} by panels {:?} is float32 {:?}, the node says {} {:?}",
            a.shape,
            panels.shape,
            product.shape,
            out.dtype.name(),
            out.shape
        ));
    }
    Ok(vec![product.value])
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
