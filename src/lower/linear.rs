//! Matrix products: `mm`, `bmm`, `addmm`, and fxmlir's own `mm_pairs`. Contractions become
//! linalg named ops, accumulating half types in f32 as PyTorch's CPU kernels do; epilogues
//! (bias, scaling) are elementwise generics that the fusion stage folds into the consumer.

use super::{LowerCtx, Operand, Registry, Scalar, Tensor, fail};
use crate::error::Result;
use crate::graph::{DType, Node};
use crate::pipeline::schedule::PAIR_MAPS;
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

/// The f32 product of `a` (m x k x 2) and `pairs` (k x n x 2), both bf16, whose last dimension
/// pairs adjacent steps of the reduction: the `linalg.contract` over [`PAIR_MAPS`] that the
/// schedule maps to AVX512-BF16's dot product.
pub(super) fn pair_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    a: &Tensor<'c, 'a>,
    pairs: &Tensor<'c, 'a>,
) -> Result<Tensor<'c, 'a>> {
    let (m, n) = (a.shape[0], pairs.shape[1]);
    let zero = ctx.e.splat(&[m, n], DType::Float32, Scalar::Int(0))?;
    let maps = ctx.e.attr(PAIR_MAPS)?;
    let value = ctx.e.named_linalg(
        "linalg.contract",
        &[a.value, pairs.value],
        zero,
        &[("indexing_maps", maps)],
    )?;
    Ok(Tensor {
        value,
        shape: vec![m, n],
        dtype: DType::Float32,
    })
}

/// `a @ b` for rank-2 (`linalg.matmul`) or rank-3 (`linalg.batch_matmul`) operands, in the
/// accumulator dtype of `dtype`.
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
    let a = ctx.cast(a, dtype)?;
    let b = ctx.cast(b, dtype)?;
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
