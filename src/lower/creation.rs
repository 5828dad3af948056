//! Tensors made from scalars: `full`, `full_like`, `fill`, `scalar_tensor`, `zeros`/`ones` and
//! their `_like` forms, `arange`, and uninitialised `empty`/`empty_strided`/`empty_permuted`
//! (what `empty_like` decomposes to). Shape and dtype
//! come from the node's recorded output.

use super::loops::reuse;
use super::{Iter, LowerCtx, Registry, Scalar, emit, fail};
use crate::error::Result;
use crate::graph::{DType, Node};
use melior::ir::Value;

/// Where the fill value comes from.
#[derive(Clone, Copy)]
enum FillValue {
    /// The node's argument at this index.
    Arg(usize),
    Const(f64),
}

const CREATION: &[(&str, FillValue)] = &[
    ("aten.full.default", FillValue::Arg(1)),
    ("aten.full_like.default", FillValue::Arg(1)),
    ("aten.scalar_tensor.default", FillValue::Arg(0)),
    ("aten.zeros.default", FillValue::Const(0.0)),
    ("aten.zeros_like.default", FillValue::Const(0.0)),
    ("aten.ones.default", FillValue::Const(1.0)),
    ("aten.ones_like.default", FillValue::Const(1.0)),
    ("aten.fill.Scalar", FillValue::Arg(1)),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, fill) in CREATION {
        r.add(op, move |ctx, node| lower_fill(ctx, node, fill));
    }
    // Contents are unspecified: a `tensor.empty` of the recorded shape, written to an output
    // buffer allocated with the recorded strides.
    r.add("aten.empty.memory_format", lower_empty);
    r.add("aten.empty_strided.default", lower_empty);
    r.add("aten.empty_permuted.default", lower_empty);
    r.add("aten.arange.start_step", lower_arange);
}

fn lower_empty<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, _node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    Ok(vec![ctx.e.empty(&out.shape, out.dtype)?])
}

/// `arange(start, end, step)`: element i is `start + step * i`, computed as PyTorch's CPU
/// kernel does in the dtype's `acc_type` (double for float32 and float64, float for the
/// halves, int64 for integers, the scalars converted to it first: a float start truncates for
/// an integer dtype) and then cast to the output dtype. The length is the recorded shape's;
/// the start and step may be symbolic sizes (`arange(past, past + n)` over a cache's length).
/// (PyTorch's vectorised loop adds `step * k` to a base already rounded to the output dtype,
/// so float results can differ from this by an ulp.)
fn lower_arange<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    if out.shape.len() != 1 {
        return fail(format!(
            "arange records a result of shape {:?}, not 1-D",
            out.shape
        ));
    }
    let acc = match out.dtype {
        DType::Float16 | DType::Bfloat16 => DType::Float32,
        DType::Float32 | DType::Float64 => DType::Float64,
        _ => DType::Int64,
    };
    let start = ctx.scalar_value(node, 0, acc)?;
    let step = ctx.scalar_value(node, 2, acc)?;
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let results = ctx.e.generic(
        &[],
        &[(init, emit::identity_map(1))],
        &[Iter::Parallel],
        |b, _| {
            let dim = b.attr("0 : i64")?;
            let i = b.op1("linalg.index", &[], b.ty("index")?, &[("dim", dim)])?;
            let i = b.op1("arith.index_cast", &[i], b.elem_type(DType::Int64)?, &[])?;
            let i = b.convert(i, DType::Int64, acc)?;
            let (mul, add) = if acc.is_float() {
                ("arith.mulf", "arith.addf")
            } else {
                ("arith.muli", "arith.addi")
            };
            let offset = b.same(mul, &[reuse(step), i])?;
            let v = b.same(add, &[reuse(start), offset])?;
            Ok(vec![b.convert(v, acc, out.dtype)?])
        },
    )?;
    Ok(vec![results[0]])
}

fn lower_fill<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    fill: FillValue,
) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let value = match fill {
        FillValue::Arg(i) => ctx.scalar_value(node, i, out.dtype)?,
        FillValue::Const(v) => ctx.e.constant(Scalar::Float(v), out.dtype)?,
    };
    Ok(vec![ctx.e.fill(&out.shape, out.dtype, value)?])
}
