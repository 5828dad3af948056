//! Single elements inside region bodies: reading and writing one element of a tensor, the
//! loop index of a `linalg.generic`, conversions between `index` and integer elements, and the
//! extreme values of a dtype (the identities of max and min).

use super::{Emit, Scalar};
use crate::error::Result;
use crate::graph::DType;
use melior::ir::{Value, ValueLike};

/// `tensor.extract` of one element.
pub(super) fn extract<'c, 'b>(
    b: &Emit<'c, 'b>,
    tensor: Value<'c, 'b>,
    at: &[Value<'c, 'b>],
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let mut operands = vec![tensor];
    operands.extend_from_slice(at);
    b.op1("tensor.extract", &operands, b.elem_type(dtype)?, &[])
}

/// `tensor.insert` of one element; returns the updated tensor.
pub(super) fn insert<'c, 'b>(
    b: &Emit<'c, 'b>,
    element: Value<'c, 'b>,
    tensor: Value<'c, 'b>,
    at: &[Value<'c, 'b>],
) -> Result<Value<'c, 'b>> {
    let mut operands = vec![element, tensor];
    operands.extend_from_slice(at);
    b.op1("tensor.insert", &operands, tensor.r#type(), &[])
}

/// An integer element as an `index` (zero-extended for unsigned types).
pub(super) fn to_index<'c, 'b>(
    b: &Emit<'c, 'b>,
    v: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let name = if dtype.is_unsigned() {
        "arith.index_castui"
    } else {
        "arith.index_cast"
    };
    b.op1(name, &[v], b.ty("index")?, &[])
}

/// An `index` as an int64 element.
pub(super) fn index_to_i64<'c, 'b>(b: &Emit<'c, 'b>, v: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
    b.op1("arith.index_cast", &[v], b.elem_type(DType::Int64)?, &[])
}

/// `linalg.index` of loop dimension `dim`, inside a `linalg.generic` body.
pub(super) fn linalg_index<'c, 'b>(b: &Emit<'c, 'b>, dim: usize) -> Result<Value<'c, 'b>> {
    let attr = b.attr(&format!("{dim} : i64"))?;
    b.op1("linalg.index", &[], b.ty("index")?, &[("dim", attr)])
}

/// `linalg.index` of loop dimension `dim` as an int64, inside a `linalg.generic` body.
pub(super) fn linalg_index_i64<'c, 'b>(b: &Emit<'c, 'b>, dim: usize) -> Result<Value<'c, 'b>> {
    index_to_i64(b, linalg_index(b, dim)?)
}

/// The identity element of max (`lowest = true`) or min over `dtype`.
pub(super) fn extreme(dtype: DType, lowest: bool) -> Scalar {
    if dtype.is_float() {
        return Scalar::Float(if lowest {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if dtype.is_bool() {
        return Scalar::Bool(!lowest);
    }
    let bits = dtype.bits();
    let (min, max) = if dtype.is_unsigned() {
        (0i64, (1i64 << bits) - 1)
    } else if bits == 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    };
    Scalar::Int(if lowest { min } else { max })
}
