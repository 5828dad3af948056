//! Tensors made from scalars: `full`, `full_like`, `scalar_tensor`, `zeros`/`ones` and their
//! `_like` forms. Shape and dtype come from the node's recorded output.

use super::{LowerCtx, Registry, Scalar};
use crate::error::Result;
use crate::graph::Node;
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
];

pub(super) fn register(r: &mut Registry) {
    for &(op, fill) in CREATION {
        r.add(op, move |ctx, node| lower_fill(ctx, node, fill));
    }
}

fn lower_fill<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    fill: FillValue,
) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let value = match fill {
        FillValue::Arg(i) => ctx.scalar(node, i)?,
        FillValue::Const(v) => Scalar::Float(v),
    };
    // The literal is converted through its own kind so that e.g. `full(…, 1e10, dtype=int32)`
    // wraps as PyTorch does instead of saturating.
    let value = match (value, out.dtype.is_float()) {
        (Scalar::Float(f), false) if f.fract() == 0.0 => Scalar::Int(f as i64),
        (v, _) => v,
    };
    Ok(vec![ctx.e.splat(&out.shape, out.dtype, value)?])
}
