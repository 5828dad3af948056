//! Elementwise ops: unary math, binary arithmetic with broadcasting and PyTorch's type
//! promotion, comparisons, `where`, and dtype conversion. Each op is one row.

use super::{Emit, LowerCtx, Operand, Registry, Scalar, Tensor, fail};
use crate::error::Result;
use crate::graph::{DType, Node, result_type};
use melior::ir::Value;

#[derive(Clone, Copy)]
enum Unary {
    /// A `math` dialect op of the same name on floats.
    Math(&'static str),
    Neg,
    Abs,
    Reciprocal,
    Sigmoid,
    Relu,
    Gelu,
}

const UNARY: &[(&str, Unary)] = &[
    ("aten.neg.default", Unary::Neg),
    ("aten.abs.default", Unary::Abs),
    ("aten.exp.default", Unary::Math("math.exp")),
    ("aten.log.default", Unary::Math("math.log")),
    ("aten.sqrt.default", Unary::Math("math.sqrt")),
    ("aten.rsqrt.default", Unary::Math("math.rsqrt")),
    ("aten.sin.default", Unary::Math("math.sin")),
    ("aten.cos.default", Unary::Math("math.cos")),
    ("aten.tanh.default", Unary::Math("math.tanh")),
    ("aten.erf.default", Unary::Math("math.erf")),
    ("aten.reciprocal.default", Unary::Reciprocal),
    ("aten.sigmoid.default", Unary::Sigmoid),
    ("aten.relu.default", Unary::Relu),
    ("aten.gelu.default", Unary::Gelu),
];

#[derive(Clone, Copy)]
enum Binary {
    Add,
    Sub,
    /// `rsub(a, b, alpha) = b - alpha * a`.
    ReverseSub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
}

const BINARY: &[(&str, Binary)] = &[
    ("aten.add.Tensor", Binary::Add),
    ("aten.add.Scalar", Binary::Add),
    ("aten.sub.Tensor", Binary::Sub),
    ("aten.sub.Scalar", Binary::Sub),
    ("aten.rsub.Tensor", Binary::ReverseSub),
    ("aten.rsub.Scalar", Binary::ReverseSub),
    ("aten.mul.Tensor", Binary::Mul),
    ("aten.mul.Scalar", Binary::Mul),
    ("aten.div.Tensor", Binary::Div),
    ("aten.div.Scalar", Binary::Div),
    ("aten.div.Tensor_mode", Binary::Div),
    ("aten.div.Scalar_mode", Binary::Div),
    ("aten.pow.Tensor_Tensor", Binary::Pow),
    ("aten.pow.Tensor_Scalar", Binary::Pow),
    ("aten.pow.Scalar", Binary::Pow),
    ("aten.maximum.default", Binary::Maximum),
    ("aten.minimum.default", Binary::Minimum),
];

const COMPARE: &[(&str, &str)] = &[
    ("aten.eq.Tensor", "eq"),
    ("aten.eq.Scalar", "eq"),
    ("aten.ne.Tensor", "ne"),
    ("aten.ne.Scalar", "ne"),
    ("aten.lt.Tensor", "lt"),
    ("aten.lt.Scalar", "lt"),
    ("aten.le.Tensor", "le"),
    ("aten.le.Scalar", "le"),
    ("aten.gt.Tensor", "gt"),
    ("aten.gt.Scalar", "gt"),
    ("aten.ge.Tensor", "ge"),
    ("aten.ge.Scalar", "ge"),
];

pub(super) fn register(r: &mut Registry) {
    for &(op, unary) in UNARY {
        r.add(op, move |ctx, node| lower_unary(ctx, node, unary));
    }
    for &(op, binary) in BINARY {
        r.add(op, move |ctx, node| lower_binary(ctx, node, binary));
    }
    for &(op, predicate) in COMPARE {
        r.add(op, move |ctx, node| lower_compare(ctx, node, predicate));
    }
    r.add("aten.where.self", lower_where);
    r.add("aten._to_copy.default", lower_convert);
    r.add("prims.convert_element_type.default", lower_convert);
}

/// The dtype arithmetic runs in for a result of `out`: halves compute in f32, and bool results
/// of arithmetic (`True + True`) compute in i64 and test `!= 0`.
fn arithmetic_dtype(out: DType) -> DType {
    if out.is_bool() {
        DType::Int64
    } else {
        out.compute()
    }
}

fn lower_unary<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    op: Unary,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    let compute = arithmetic_dtype(out.dtype);
    let is_float = compute.is_float();
    let approximate = match op {
        Unary::Gelu => ctx.str(node, 1)?.unwrap_or_else(|| "none".into()),
        _ => String::new(),
    };
    if matches!(
        op,
        Unary::Math(_) | Unary::Reciprocal | Unary::Sigmoid | Unary::Gelu
    ) && !is_float
    {
        return fail(format!(
            "needs a floating-point result, the graph records {}",
            out.dtype.name()
        ));
    }
    let value = ctx.elementwise(
        &[Operand::Tensor(x)],
        &[compute],
        compute,
        &out.shape,
        out.dtype,
        |b, v| {
            let x = v[0];
            match op {
                Unary::Math(name) => b.same(name, &[x]),
                Unary::Neg if is_float => b.same("arith.negf", &[x]),
                Unary::Neg => {
                    let zero = b.constant(Scalar::Int(0), compute)?;
                    b.same("arith.subi", &[zero, x])
                }
                Unary::Abs if is_float => b.same("math.absf", &[x]),
                // uint8 values are never negative: abs and relu are the identity.
                Unary::Abs | Unary::Relu if compute.is_unsigned() => Ok(x),
                Unary::Abs => b.same("math.absi", &[x]),
                Unary::Reciprocal => {
                    let one = b.constant(Scalar::Float(1.0), compute)?;
                    b.same("arith.divf", &[one, x])
                }
                Unary::Sigmoid => sigmoid(b, x, compute),
                Unary::Relu if is_float => {
                    let zero = b.constant(Scalar::Float(0.0), compute)?;
                    // `x < 0 ? 0 : x`, as torch.relu: NaN and -0.0 pass through (maximumf
                    // would turn -0.0 into +0.0).
                    let negative = b.cmpf("olt", x, zero)?;
                    b.select(negative, zero, x)
                }
                Unary::Relu => {
                    let zero = b.constant(Scalar::Int(0), compute)?;
                    b.same("arith.maxsi", &[x, zero])
                }
                Unary::Gelu => gelu(b, x, compute, &approximate),
            }
        },
    )?;
    Ok(vec![value])
}

pub(super) fn sigmoid<'c, 'b>(
    b: &Emit<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let one = b.constant(Scalar::Float(1.0), dtype)?;
    let neg = b.same("arith.negf", &[x])?;
    let e = b.same("math.exp", &[neg])?;
    let denom = b.same("arith.addf", &[one, e])?;
    b.same("arith.divf", &[one, denom])
}

fn gelu<'c, 'b>(
    b: &Emit<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
    approximate: &str,
) -> Result<Value<'c, 'b>> {
    let c = |v: f64| b.constant(Scalar::Float(v), dtype);
    let half_x = b.same("arith.mulf", &[x, c(0.5)?])?;
    let inner = match approximate {
        "none" => {
            let scaled = b.same("arith.mulf", &[x, c(std::f64::consts::FRAC_1_SQRT_2)?])?;
            b.same("math.erf", &[scaled])?
        }
        "tanh" => {
            let x3 = b.same("arith.mulf", &[x, x])?;
            let x3 = b.same("arith.mulf", &[x3, x])?;
            let cubic = b.same("arith.mulf", &[x3, c(0.044715)?])?;
            let sum = b.same("arith.addf", &[x, cubic])?;
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let arg = b.same("arith.mulf", &[sum, c(k)?])?;
            b.same("math.tanh", &[arg])?
        }
        other => return fail(format!("unknown gelu approximation `{other}`")),
    };
    let one_plus = b.same("arith.addf", &[inner, c(1.0)?])?;
    b.same("arith.mulf", &[half_x, one_plus])
}

fn lower_binary<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    op: Binary,
) -> Result<Vec<Value<'c, 'a>>> {
    let lhs = ctx.operand(node, 0)?;
    let rhs = ctx.operand(node, 1)?;
    let out = ctx.out(0)?.clone();
    let compute = arithmetic_dtype(out.dtype);
    let alpha = match op {
        Binary::Add | Binary::Sub | Binary::ReverseSub if node.args.len() > 2 => {
            Some(ctx.scalar(node, 2)?).filter(|a| a.as_f64() != 1.0)
        }
        _ => None,
    };
    let rounding = match op {
        Binary::Div if node.target.ends_with("_mode") => ctx.str(node, 2)?,
        _ => None,
    };
    let float = compute.is_float();
    let unsigned = compute.is_unsigned();
    if matches!(op, Binary::Div) && rounding.is_none() && !float {
        return fail("true division needs a floating-point result");
    }
    // PyTorch computes `x ** 0.5` and `x ** -0.5` with a Scalar exponent as sqrt and rsqrt
    // (except for float16), which differ from pow at -inf and -0.0.
    let root = match (op, &rhs) {
        _ if !float || out.dtype == DType::Float16 => None,
        (Binary::Pow, Operand::Scalar(e)) if e.as_f64() == 0.5 => Some("math.sqrt"),
        (Binary::Pow, Operand::Scalar(e)) if e.as_f64() == -0.5 => Some("math.rsqrt"),
        _ => None,
    };
    // With a half result, PyTorch rounds the operands of add/sub/pow (Python scalars, 0-d
    // tensors, alpha) to the half type before computing in f32; mul/div use them unrounded.
    let operand = match op {
        Binary::Add | Binary::Sub | Binary::ReverseSub | Binary::Pow
            if compute != out.dtype && out.dtype.is_float() =>
        {
            out.dtype
        }
        _ => compute,
    };
    let value = ctx.elementwise(
        &[lhs, rhs],
        &[operand, operand],
        compute,
        &out.shape,
        out.dtype,
        |b, v| {
            let a = b.convert(v[0], operand, compute)?;
            let x = b.convert(v[1], operand, compute)?;
            let pick = |f: &'static str, i: &'static str| if float { f } else { i };
            let scale = |y| -> Result<_> {
                match alpha {
                    None => Ok(y),
                    Some(alpha) => {
                        let k = b.constant(alpha, operand)?;
                        let k = b.convert(k, operand, compute)?;
                        b.same(pick("arith.mulf", "arith.muli"), &[y, k])
                    }
                }
            };
            match op {
                Binary::Add => b.same(pick("arith.addf", "arith.addi"), &[a, scale(x)?]),
                Binary::Sub => b.same(pick("arith.subf", "arith.subi"), &[a, scale(x)?]),
                Binary::ReverseSub => b.same(pick("arith.subf", "arith.subi"), &[x, scale(a)?]),
                Binary::Mul => b.same(pick("arith.mulf", "arith.muli"), &[a, x]),
                Binary::Div => divide(b, a, x, compute, rounding.as_deref()),
                Binary::Pow => match root {
                    Some(name) => b.same(name, &[a]),
                    None if float => b.same("math.powf", &[a, x]),
                    None => int_pow(b, a, x, compute),
                },
                Binary::Maximum if float => b.same("arith.maximumf", &[a, x]),
                Binary::Maximum => b.same(
                    if unsigned {
                        "arith.maxui"
                    } else {
                        "arith.maxsi"
                    },
                    &[a, x],
                ),
                Binary::Minimum if float => b.same("arith.minimumf", &[a, x]),
                Binary::Minimum => b.same(
                    if unsigned {
                        "arith.minui"
                    } else {
                        "arith.minsi"
                    },
                    &[a, x],
                ),
            }
        },
    )?;
    Ok(vec![value])
}

/// Integer power with PyTorch's `powi`: a negative exponent gives 1 for base 1, ±1 for base -1
/// and 0 otherwise, base 0 included (where `math.ipowi` would divide by zero). uint8 exponents
/// are never negative, so uint8 powers run in i64 (equal modulo 256).
fn int_pow<'c, 'b>(
    b: &Emit<'c, 'b>,
    a: Value<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    if dtype.is_unsigned() {
        let wide = DType::Int64;
        let (a, x) = (b.convert(a, dtype, wide)?, b.convert(x, dtype, wide)?);
        let p = int_pow(b, a, x, wide)?;
        return b.convert(p, wide, dtype);
    }
    let zero = b.constant(Scalar::Int(0), dtype)?;
    let two = b.constant(Scalar::Int(2), dtype)?;
    let negative = b.cmpi("slt", x, zero)?;
    let zero_base = b.cmpi("eq", a, zero)?;
    let both = b.same("arith.andi", &[negative, zero_base])?;
    let base = b.select(both, two, a)?;
    b.same("math.ipowi", &[base, x])
}

/// Division with PyTorch's rounding modes. Float floor division follows PyTorch's
/// `div_floor_floating` (fmod-based, so `floor(a / b)` rounding errors do not leak through).
fn divide<'c, 'b>(
    b: &Emit<'c, 'b>,
    a: Value<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
    rounding: Option<&str>,
) -> Result<Value<'c, 'b>> {
    let unsigned = dtype.is_unsigned();
    match (rounding, dtype.is_float()) {
        (None, _) => b.same("arith.divf", &[a, x]),
        (Some("trunc"), true) => {
            let q = b.same("arith.divf", &[a, x])?;
            b.same("math.trunc", &[q])
        }
        (Some("trunc"), false) => b.same(
            if unsigned {
                "arith.divui"
            } else {
                "arith.divsi"
            },
            &[a, x],
        ),
        (Some("floor"), false) => b.same(
            if unsigned {
                "arith.divui"
            } else {
                "arith.floordivsi"
            },
            &[a, x],
        ),
        (Some("floor"), true) => {
            let zero = b.constant(Scalar::Float(0.0), dtype)?;
            let one = b.constant(Scalar::Float(1.0), dtype)?;
            let half = b.constant(Scalar::Float(0.5), dtype)?;
            let m = b.same("arith.remf", &[a, x])?;
            let diff = b.same("arith.subf", &[a, m])?;
            let q = b.same("arith.divf", &[diff, x])?;
            // if m != 0 and sign(x) != sign(m): q -= 1
            let m_nonzero = b.cmpf("une", m, zero)?;
            let x_neg = b.cmpf("olt", x, zero)?;
            let m_neg = b.cmpf("olt", m, zero)?;
            let signs_differ = b.same("arith.xori", &[x_neg, m_neg])?;
            let adjust = b.same("arith.andi", &[m_nonzero, signs_differ])?;
            let q_minus = b.same("arith.subf", &[q, one])?;
            let q = b.select(adjust, q_minus, q)?;
            // floor, then correct a rounding step of more than one half
            let f = b.same("math.floor", &[q])?;
            let gap = b.same("arith.subf", &[q, f])?;
            let too_low = b.cmpf("ogt", gap, half)?;
            let f_plus = b.same("arith.addf", &[f, one])?;
            let f = b.select(too_low, f_plus, f)?;
            // b == 0 keeps IEEE a / b; a zero quotient takes the sign of a / b
            let plain = b.same("arith.divf", &[a, x])?;
            let x_zero = b.cmpf("oeq", x, zero)?;
            let q_zero = b.cmpf("oeq", q, zero)?;
            let signed_zero = b.same("math.copysign", &[zero, plain])?;
            let f = b.select(q_zero, signed_zero, f)?;
            b.select(x_zero, plain, f)
        }
        (Some(other), _) => fail(format!("unknown rounding mode `{other}`")),
    }
}

fn lower_compare<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    predicate: &'static str,
) -> Result<Vec<Value<'c, 'a>>> {
    let lhs = ctx.operand(node, 0)?;
    let rhs = ctx.operand(node, 1)?;
    let out = ctx.out(0)?.clone();
    // Operands (a Python scalar included) are first cast to the common dtype, as PyTorch
    // does: `half(0.1) == 0.1` holds because 0.1 rounds to half too. Halves then compare in f32.
    let common = result_type(&[lhs.promotion(), rhs.promotion()], DType::Float32);
    let compute = common.compute();
    let value = ctx.elementwise(
        &[lhs, rhs],
        &[common, common],
        DType::Bool,
        &out.shape,
        out.dtype,
        |b, v| {
            let a = b.convert(v[0], common, compute)?;
            let x = b.convert(v[1], common, compute)?;
            b.compare(predicate, a, x, compute)
        },
    )?;
    Ok(vec![value])
}

fn lower_where<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let cond = ctx.operand(node, 0)?;
    let a = ctx.operand(node, 1)?;
    let x = ctx.operand(node, 2)?;
    let out = ctx.out(0)?.clone();
    let dtype = out.dtype;
    let value = ctx.elementwise(
        &[cond, a, x],
        &[DType::Bool, dtype, dtype],
        dtype,
        &out.shape,
        dtype,
        |b, v| b.select(v[0], v[1], v[2]),
    )?;
    Ok(vec![value])
}

/// `_to_copy` and `convert_element_type`: a cast to the recorded output dtype.
fn lower_convert<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let x: Tensor = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if x.shape != out.shape {
        return fail(format!(
            "cast changes shape {:?} to {:?}",
            x.shape, out.shape
        ));
    }
    Ok(vec![ctx.cast(&x, out.dtype)?.value])
}
