//! Matrix products as the families build them: `a @ b` in the accumulator dtype
//! ([`contract`]; half types multiplied as f32 copies where [`widened`] says so, bf16 ones as
//! pairs products on AVX512-BF16 where enough rows repay packing), the pairs product itself
//! ([`pair_product`]), and the zero padding and cropping of operands and results around it.
//! The linear family's rows, attention and convolution's im2col and pairs products use them.

use super::window::{dims, place};
use super::{Iter, LowerCtx, Operand, Scalar, Tensor, emit, fail};
use crate::error::Result;
use crate::graph::{DType, dims};
use crate::pipeline::ir::maps::affine_map;
use crate::target::Target;
use crate::tuning::{BATCHED_PAIR_MAPS, PAIR_LANES, PAIR_MAPS, PANEL_MAPS};

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
    let maps = if rank == 4 {
        BATCHED_PAIR_MAPS
    } else {
        PAIR_MAPS
    };
    let operands = (a, pairs);
    mapped_product(
        ctx,
        ("linalg.contract", maps),
        operands,
        &shape,
        DType::Float32,
    )
}

/// The product `name` (`linalg.contract`, `linalg.batch_matmul`) of `a` and `b` over the
/// indexing `maps`, accumulated from zeros of `shape` in `dtype`.
pub(super) fn mapped_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    (name, maps): (&str, &str),
    (a, b): (&Tensor<'c, 'a>, &Tensor<'c, 'a>),
    shape: &[i64],
    dtype: DType,
) -> Result<Tensor<'c, 'a>> {
    let zero = ctx.e.splat(shape, dtype, Scalar::Int(0))?;
    let maps = ctx.e.attr(maps)?;
    let value = ctx
        .e
        .named_linalg(name, &[a.value, b.value], zero, &[("indexing_maps", maps)])?;
    Ok(Tensor {
        value,
        shape: shape.to_vec(),
        dtype,
    })
}

/// The f32 product of `a` (`m x k`) and `panels` (`p x k x w`, the right operand in panels of
/// `w` columns), both f32: the `linalg.contract` over [`PANEL_MAPS`] into `m x p x w`, which
/// the schedule tiles reading each panel where it lies, plus `bias` (`p * w`, read as `p x w`:
/// an elementwise op on the product's shape, which the schedule fuses), reshaped to the
/// `m x (p * w)` it is in memory.
pub(super) fn panel_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    a: &Tensor<'c, 'a>,
    panels: &Tensor<'c, 'a>,
    bias: Option<&Tensor<'c, 'a>>,
) -> Result<Tensor<'c, 'a>> {
    let (m, p, w) = (a.shape[0], panels.shape[0], panels.shape[2]);
    let shape = [m, p, w];
    let contract = ("linalg.contract", PANEL_MAPS);
    let mut product = mapped_product(ctx, contract, (a, panels), &shape, DType::Float32)?;
    if let Some(bias) = bias {
        let bias = ctx.reshape(bias, &[p, w])?;
        let f32 = DType::Float32;
        product.value = ctx.elementwise(
            &[Operand::Tensor(product.clone()), Operand::Tensor(bias)],
            &[f32, f32],
            f32,
            &shape,
            f32,
            |e, v| e.same("arith.addf", &[v[0], v[1]]),
        )?;
    }
    ctx.reshape(&product, &[m, dims::product(&[p, w])?])
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

/// A tensor of `shape` with dimension `dim` padded with zeros to a multiple of `multiple`,
/// whose unpadded part is what `compute` computes (in any shape of as many elements, such as
/// an im2col gather's loop shape). Only the padding is zeroed, and the result is materialized
/// in the unpadded part (`bufferization.materialize_in_destination`, in the computation's
/// shape), so that `eliminate-empty-tensors` points the computation's `tensor.empty` init at
/// it and bufferized, it writes straight into the padded buffer. Padding the computed tensor
/// afterwards ([`pad_to_multiple`]) zeroed the whole buffer and copied the tensor into it: two
/// more passes over an im2col patch matrix (squeezenet1_0 took 1.14 and ResNet-50 1.06 times as
/// long). The destination is a `bufferization.alloc_tensor`, because slices of a `tensor.empty`
/// fold to fresh ones, which would leave the computation a buffer of its own.
pub(super) fn computed_padded<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    shape: &[i64],
    dtype: DType,
    (dim, multiple): (usize, i64),
    compute: impl FnOnce() -> Result<Tensor<'c, 'a>>,
) -> Result<Tensor<'c, 'a>> {
    let rank = shape.len();
    let mut padded = shape.to_vec();
    // A symbolic size is not padded (its kernel's schedule peels the last tiles instead).
    if !dims::is_symbolic(shape[dim]) {
        padded[dim] += (-shape[dim]).rem_euclid(multiple);
    }
    if padded == shape {
        return ctx.reshape(&compute()?, shape);
    }
    let destination = ctx.e.alloc_tensor(&padded, dtype)?;
    let ones = vec![1; rank];
    let mut offsets = vec![0; rank];
    offsets[dim] = shape[dim];
    let mut sizes = padded.clone();
    sizes[dim] -= shape[dim];
    let pad = ctx
        .e
        .extract_slice(destination, &offsets, &sizes, &ones, &sizes, dtype)?;
    let zero = ctx.e.constant(Scalar::Int(0), dtype)?;
    let zeroed = ctx.e.named_linalg("linalg.fill", &[zero], pad, &[])?;
    let destination = ctx.e.insert_slice(zeroed, destination, &offsets, &sizes)?;
    let origin = vec![0; rank];
    let part = ctx
        .e
        .extract_slice(destination, &origin, shape, &ones, shape, dtype)?;
    let part = Tensor {
        value: part,
        shape: shape.to_vec(),
        dtype,
    };
    let computed = compute()?;
    let target = ctx.reshape(&part, &computed.shape)?;
    let written = ctx.e.op1(
        "bufferization.materialize_in_destination",
        &[computed.value, target.value],
        ctx.e.tensor_type(&computed.shape, dtype)?,
        &[],
    )?;
    let written = ctx.reshape(
        &Tensor {
            value: written,
            ..computed
        },
        shape,
    )?;
    Ok(Tensor {
        value: ctx
            .e
            .insert_slice(written.value, destination, &origin, shape)?,
        shape: padded,
        dtype,
    })
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
/// once, outside the kernel, by `fxmlir.passes.bf16_pairs`.)
const MIN_PAIR_ROWS: i64 = 32;
const MIN_CACHED_PAIR_ROWS: i64 = 8;
const CACHED_RIGHT_BYTES: i64 = 256 << 10;

/// `a @ b` (`[batch x] m x k` by `[batch x] k x n`, both bf16) as a pairs product, on a host
/// with AVX512-BF16's dot product and enough rows (see [`MIN_PAIR_ROWS`]); `None` otherwise.
/// `a` is read in pairs as it is (an odd `k` gets a zero column); `b` is packed per call into
/// `[batch x] k/2 x n x 2`, with zero columns up to a multiple of [`PAIR_LANES`] that the
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
        &[(b.value, affine_map(rank + 1, &read))],
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
/// same. Symbolic rows count as many.
pub fn widened(target: &Target, dtype: DType, rows: i64) -> bool {
    let widens = match dtype {
        DType::Float16 => true,
        DType::Bfloat16 => !target.bf16_dot(),
        _ => false,
    };
    (rows >= MIN_WIDENED_ROWS || dims::is_symbolic(rows)) && widens
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
