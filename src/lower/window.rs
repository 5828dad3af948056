//! What the windowed families (convolution, pooling, padding and upsampling, grid sampling)
//! share: per-dimension window parameters and their arithmetic (the extent the windows read,
//! the input position each tap reads), map results naming loop dimensions, the padded canvas
//! the windows read ([`place`]), constant index tables computed at compile time, and the check
//! of a computed output shape against the recorded one.

use super::elements::linalg_index_i64;
use super::{Emit, Iter, LowerCtx, Scalar, Tensor, emit, fail};
use crate::error::Result;
use crate::graph::{DType, dims as graph_dims};
use melior::ir::{Value, ValueLike};

/// A per-dimension parameter list: `n` values, or one value for every dimension.
pub(super) fn per_dim(list: Vec<i64>, n: usize, name: &str) -> Result<Vec<i64>> {
    match list.len() {
        len if len == n => Ok(list),
        1 => Ok(vec![list[0]; n]),
        _ => fail(format!("{name} must have 1 or {n} values, got {list:?}")),
    }
}

/// The input extent that `output` windows of `kernel` taps read along one dimension, in padded
/// coordinates: `(o - 1) s + d (k - 1) + 1`.
pub(super) fn extent(output: i64, kernel: i64, stride: i64, dilation: i64) -> i64 {
    (output - 1) * stride + dilation * (kernel - 1) + 1
}

/// The padded-input position a tap reads: `o·s + k·d` per spatial dimension `i`, with `o(i)`
/// the loop of the output position and `k(i)` that of the tap.
pub(super) fn taps(
    stride: &[i64],
    dilation: &[i64],
    o: impl Fn(usize) -> usize,
    k: impl Fn(usize) -> usize,
) -> Vec<String> {
    (0..stride.len())
        .map(|i| format!("d{} * {} + d{} * {}", o(i), stride[i], k(i), dilation[i]))
        .collect()
}

/// `d{i}` for each `i`.
pub(super) fn dims(ids: impl IntoIterator<Item = usize>) -> Vec<String> {
    ids.into_iter().map(|d| format!("d{d}")).collect()
}

/// A constant tensor of `shape` holding `values` (row-major) in `dtype` (an integer or float
/// type; not bool), written as raw little-endian bytes so floats keep their exact bits.
pub(super) fn table<'c, 'a>(
    e: &Emit<'c, 'a>,
    values: &[f64],
    shape: &[i64],
    dtype: DType,
) -> Result<Value<'c, 'a>> {
    if values.len() as i64 != shape.iter().product::<i64>() {
        return fail("internal: table size does not match its shape");
    }
    if shape.contains(&0) {
        return e.empty(shape, dtype);
    }
    let mut hex = String::with_capacity(values.len() * 16);
    for &v in values {
        let bytes: Vec<u8> = match dtype {
            DType::Float64 => v.to_le_bytes().to_vec(),
            DType::Float32 => (v as f32).to_le_bytes().to_vec(),
            DType::Int64 => (v as i64).to_le_bytes().to_vec(),
            DType::Int32 => (v as i32).to_le_bytes().to_vec(),
            DType::Int8 | DType::Uint8 => vec![v as i64 as u8],
            _ => return fail(format!("internal: no constant tables of {}", dtype.name())),
        };
        for b in bytes {
            hex.push_str(&format!("{b:02X}"));
        }
    }
    let ty = emit::tensor_type_text(shape, dtype);
    let attr = e.attr(&format!("dense<\"0x{hex}\"> : {ty}"))?;
    e.op1("arith.constant", &[], e.ty(&ty)?, &[("value", attr)])
}

/// An integer table (see [`table`]).
pub(super) fn int_table<'c, 'a>(
    e: &Emit<'c, 'a>,
    values: &[i64],
    shape: &[i64],
) -> Result<Value<'c, 'a>> {
    let values: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    table(e, &values, shape, DType::Int64)
}

/// int64 arithmetic in a generic's body: what a table computed when the kernel runs
/// ([`computed_table`]) is made of.
pub(super) struct Ints<'e, 'c, 'b>(pub &'e Emit<'c, 'b>);

impl<'c, 'b> Ints<'_, 'c, 'b> {
    pub fn constant(&self, v: i64) -> Result<Value<'c, 'b>> {
        self.0.constant(Scalar::Int(v), DType::Int64)
    }

    /// A size: a constant, or a symbolic size's value.
    pub fn size(&self, d: i64) -> Result<Value<'c, 'b>> {
        match graph_dims::is_symbolic(d) {
            true => self.0.size_value(d, DType::Int64),
            false => self.constant(d),
        }
    }

    /// `arith.<name>` of two int64 values (`addi`, `subi`, `muli`, `divsi`, `minsi`, `maxsi`,
    /// `andi`, `ori`).
    pub fn op(&self, name: &str, a: Value<'c, 'b>, b: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        self.0.same(&format!("arith.{name}"), &[a, b])
    }

    /// `a * k + c` for constants `k` and `c`.
    pub fn affine(&self, a: Value<'c, 'b>, k: i64, c: i64) -> Result<Value<'c, 'b>> {
        let scaled = self.op("muli", a, self.constant(k)?)?;
        self.op("addi", scaled, self.constant(c)?)
    }

    /// A signed comparison (`lt`, `le`, `ge`, `gt`, `eq`, `ne`).
    pub fn compare(&self, pred: &str, a: Value<'c, 'b>, b: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        self.0.compare(pred, a, b, DType::Int64)
    }

    pub fn select(
        &self,
        c: Value<'c, 'b>,
        a: Value<'c, 'b>,
        b: Value<'c, 'b>,
    ) -> Result<Value<'c, 'b>> {
        self.0.select(c, a, b)
    }
}

/// An int64 tensor of `shape` (symbolic sizes included) that the kernel computes when it runs:
/// each entry is what `entry` computes from the entry's position (int64 values, one per
/// dimension). A window's tap positions or divisors over symbolic sizes, where fixed sizes
/// have an [`int_table`].
pub(super) fn computed_table<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    shape: &[i64],
    entry: F,
) -> Result<Value<'c, 'a>>
where
    F: for<'e, 'b> Fn(&Ints<'e, 'c, 'b>, &[Value<'c, 'b>]) -> Result<Value<'c, 'b>>,
{
    let rank = shape.len();
    let init = e.empty(shape, DType::Int64)?;
    let identity = emit::identity_map(rank);
    let values = e.generic(
        &[],
        &[(init, identity)],
        &vec![Iter::Parallel; rank],
        |b, _| {
            let at = (0..rank)
                .map(|d| linalg_index_i64(b, d))
                .collect::<Result<Vec<_>>>()?;
            Ok(vec![entry(&Ints(b), &at)?])
        },
    )?;
    Ok(values[0])
}

/// A canvas of `shape` filled with `fill`, holding `x` element `i` (per dimension) at
/// `offsets[d] + i * strides[d]`; elements landing outside the canvas are dropped, so negative
/// offsets crop (not with symbolic sizes: a canvas of symbolic sizes pads). Strides are
/// positive.
pub(super) fn place<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    fill: Scalar,
    shape: &[i64],
    offsets: &[i64],
    strides: &[i64],
) -> Result<Tensor<'c, 'a>> {
    let rank = x.rank();
    if shape.len() != rank || offsets.len() != rank || strides.len() != rank {
        return fail("internal: placement rank mismatch");
    }
    if strides.iter().any(|&s| s <= 0) {
        return fail("internal: placement strides must be positive");
    }
    let result = |value| Tensor {
        value,
        shape: shape.to_vec(),
        dtype: x.dtype,
    };
    if shape == x.shape.as_slice() && offsets.iter().all(|&o| o == 0) {
        return Ok(x.clone());
    }
    if shape
        .iter()
        .chain(&x.shape)
        .any(|&d| graph_dims::is_symbolic(d))
    {
        // Symbolic sizes: a padding, whose canvas holds the whole input.
        if offsets.iter().any(|&o| o < 0) {
            return fail(
                "a canvas of symbolic sizes cannot crop its input (a padding beyond the window's reach; compile the graph for fixed sizes)",
            );
        }
        let canvas = ctx.e.filled(shape, x.dtype, fill)?;
        let value = ctx
            .e
            .insert_strided_slice(x.value, canvas, offsets, &x.shape, strides)?;
        return Ok(result(value));
    }
    // Per dimension: the first source element that lands inside, and how many do.
    let mut first = Vec::with_capacity(rank);
    let mut count = Vec::with_capacity(rank);
    for d in 0..rank {
        let (o, s, size) = (offsets[d], strides[d], x.shape[d]);
        let lo = if o >= 0 { 0 } else { (-o + s - 1) / s };
        let last = shape[d] - 1 - o;
        let hi = if last < 0 {
            0
        } else {
            (last / s + 1).min(size)
        };
        first.push(lo);
        count.push((hi - lo).max(0));
    }
    // A canvas of its own, which `x`'s producer then writes into (see `Emit::filled`).
    let canvas = ctx.e.filled(shape, x.dtype, fill)?;
    if count.contains(&0) {
        return Ok(result(canvas));
    }
    let source = if count == x.shape {
        x.value
    } else {
        ctx.e
            .extract_slice(x.value, &first, &count, &vec![1; rank], &count, x.dtype)?
    };
    let at: Vec<i64> = (0..rank)
        .map(|d| offsets[d] + first[d] * strides[d])
        .collect();
    let attrs = [
        ("static_offsets", ctx.e.attr(&emit::i64_array(&at))?),
        ("static_sizes", ctx.e.attr(&emit::i64_array(&count))?),
        ("static_strides", ctx.e.attr(&emit::i64_array(strides))?),
        (
            "operandSegmentSizes",
            ctx.e.attr("array<i32: 1, 1, 0, 0, 0>")?,
        ),
    ];
    let value = ctx.e.op1(
        "tensor.insert_slice",
        &[source, canvas],
        canvas.r#type(),
        &attrs,
    )?;
    Ok(result(value))
}

/// The recorded output shape must be `expected` (symbolic sizes: may be, where the graph's
/// guards hold; see [`graph_dims::may_be_equal`]).
pub(super) fn check_shape(recorded: &[i64], expected: &[i64]) -> Result<()> {
    let fits = recorded.len() == expected.len()
        && recorded
            .iter()
            .zip(expected)
            .all(|(&a, &b)| graph_dims::may_be_equal(a, b));
    if !fits {
        return fail(format!(
            "computed output shape {} does not match the recorded {}",
            graph_dims::shown(expected),
            graph_dims::shown(recorded)
        ));
    }
    Ok(())
}
