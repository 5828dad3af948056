//! Elementwise ops: unary math, rounding and activations, binary arithmetic with broadcasting
//! and PyTorch's type promotion, bitwise and logical ops, comparisons and float classification,
//! clamping, `where`, and dtype conversion. Each op is one row.

use super::{Checked, Emit, LowerCtx, Operand, Registry, Scalar, Tensor, fail};
use crate::error::{Check, Result};
use crate::graph::{Arg, DType, Node, dims, result_type};
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
    /// `exp(x) - 1`, accurate near 0.
    Expm1,
    /// A `math` rounding op on floats; the identity on integers (PyTorch copies them).
    Round(&'static str),
    /// -1, 0 or 1 (0 for NaN and both zeros, as PyTorch's `(0 < x) - (x < 0)`).
    Sign,
    BitwiseNot,
    LeakyRelu,
    Elu,
}

const UNARY: &[(&str, Unary)] = &[
    ("aten.neg.default", Unary::Neg),
    ("aten.abs.default", Unary::Abs),
    ("aten.exp.default", Unary::Math("math.exp")),
    ("aten.exp2.default", Unary::Math("math.exp2")),
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
    ("aten.acos.default", Unary::Math("math.acos")),
    ("aten.acosh.default", Unary::Math("math.acosh")),
    ("aten.asin.default", Unary::Math("math.asin")),
    ("aten.asinh.default", Unary::Math("math.asinh")),
    ("aten.atan.default", Unary::Math("math.atan")),
    ("aten.atanh.default", Unary::Math("math.atanh")),
    ("aten.cosh.default", Unary::Math("math.cosh")),
    ("aten.sinh.default", Unary::Math("math.sinh")),
    ("aten.tan.default", Unary::Math("math.tan")),
    ("aten.expm1.default", Unary::Expm1),
    ("aten.log10.default", Unary::Math("math.log10")),
    ("aten.log1p.default", Unary::Math("math.log1p")),
    ("aten.log2.default", Unary::Math("math.log2")),
    ("aten.ceil.default", Unary::Round("math.ceil")),
    ("aten.floor.default", Unary::Round("math.floor")),
    // torch.round rounds half to even.
    ("aten.round.default", Unary::Round("math.roundeven")),
    ("aten.trunc.default", Unary::Round("math.trunc")),
    ("aten.sign.default", Unary::Sign),
    ("aten.bitwise_not.default", Unary::BitwiseNot),
    ("aten.leaky_relu.default", Unary::LeakyRelu),
    ("aten.elu.default", Unary::Elu),
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
    Atan2,
    /// Python's `%`: the result takes the sign of the divisor.
    Remainder,
    /// C's `fmod`: the result takes the sign of the dividend.
    Fmod,
    BitAnd,
    BitOr,
    BitXor,
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
    ("aten.true_divide.Tensor", Binary::Div),
    ("aten.div.Scalar", Binary::Div),
    ("aten.div.Tensor_mode", Binary::Div),
    ("aten.div.Scalar_mode", Binary::Div),
    ("aten.pow.Tensor_Tensor", Binary::Pow),
    ("aten.pow.Tensor_Scalar", Binary::Pow),
    ("aten.pow.Scalar", Binary::Pow),
    ("aten.maximum.default", Binary::Maximum),
    ("aten.minimum.default", Binary::Minimum),
    ("aten.atan2.default", Binary::Atan2),
    // An integer remainder/fmod by zero raises as in PyTorch (the divisor is checked, see
    // `check_divisor`) and computes 0 rather than trap; `INT_MIN % -1` gives 0, its true value.
    ("aten.remainder.Tensor", Binary::Remainder),
    ("aten.remainder.Scalar", Binary::Remainder),
    ("aten.fmod.Tensor", Binary::Fmod),
    ("aten.fmod.Scalar", Binary::Fmod),
    ("aten.bitwise_and.Tensor", Binary::BitAnd),
    ("aten.bitwise_and.Scalar", Binary::BitAnd),
    ("aten.bitwise_or.Tensor", Binary::BitOr),
    ("aten.bitwise_or.Scalar", Binary::BitOr),
    ("aten.bitwise_xor.Tensor", Binary::BitXor),
    ("aten.bitwise_xor.Scalar", Binary::BitXor),
];

/// Ops on truth values: every operand is tested `!= 0` (NaN is true), the result is bool.
#[derive(Clone, Copy)]
enum Logical {
    And,
    Or,
    Xor,
    Not,
}

const LOGICAL: &[(&str, Logical)] = &[
    ("aten.logical_and.default", Logical::And),
    ("aten.logical_or.default", Logical::Or),
    ("aten.logical_xor.default", Logical::Xor),
    ("aten.logical_not.default", Logical::Not),
];

/// Float classification to bool; always false for integers.
#[derive(Clone, Copy)]
enum Classify {
    IsNan,
    IsInf,
}

const CLASSIFY: &[(&str, Classify)] = &[
    ("aten.isnan.default", Classify::IsNan),
    ("aten.isinf.default", Classify::IsInf),
];

/// Where a clamp's bounds come from (arguments 1 and 2).
#[derive(Clone, Copy)]
enum Bounds {
    /// Optional Python scalars.
    Scalar,
    /// Python scalars defaulting to -1 and 1 (hardtanh: clamp into the input's dtype).
    Hardtanh,
    /// Optional tensors, broadcast with the input.
    Tensor,
}

const CLAMP: &[(&str, Bounds)] = &[
    ("aten.clamp.default", Bounds::Scalar),
    ("aten.clamp.Tensor", Bounds::Tensor),
    ("aten.hardtanh.default", Bounds::Hardtanh),
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
        // Integer divisions and remainders check their divisor (PyTorch raises).
        if matches!(binary, Binary::Remainder | Binary::Fmod) || op.ends_with("_mode") {
            let checked = Checked {
                check: Check::ZERO_DIVISION,
                applies: |node| node.outputs.iter().all(|m| !m.dtype.is_float()),
            };
            r.add_checked(op, checked, move |ctx, node| {
                lower_binary(ctx, node, binary)
            });
        } else {
            r.add(op, move |ctx, node| lower_binary(ctx, node, binary));
        }
    }
    for &(op, predicate) in COMPARE {
        r.add(op, move |ctx, node| lower_compare(ctx, node, predicate));
    }
    for &(op, logical) in LOGICAL {
        r.add(op, move |ctx, node| lower_logical(ctx, node, logical));
    }
    for &(op, class) in CLASSIFY {
        r.add(op, move |ctx, node| lower_classify(ctx, node, class));
    }
    for &(op, bounds) in CLAMP {
        r.add(op, move |ctx, node| lower_clamp(ctx, node, bounds));
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
    // Bitwise not of bool is logical not, so it computes in i1, not in i64 like arithmetic.
    let compute = match op {
        Unary::BitwiseNot => out.dtype,
        _ => arithmetic_dtype(out.dtype),
    };
    let is_float = compute.is_float();
    let approximate = match op {
        Unary::Gelu => ctx.str(node, 1)?.unwrap_or_else(|| "none".into()),
        _ => String::new(),
    };
    // Scalar parameters: leaky_relu's slope; elu's alpha, scale and input_scale.
    let params: Vec<f64> = match op {
        Unary::LeakyRelu => vec![opt_float(ctx, node, 1, 0.01)?],
        Unary::Elu => vec![
            opt_float(ctx, node, 1, 1.0)?,
            opt_float(ctx, node, 2, 1.0)?,
            opt_float(ctx, node, 3, 1.0)?,
        ],
        _ => vec![],
    };
    if matches!(
        op,
        Unary::Math(_)
            | Unary::Reciprocal
            | Unary::Sigmoid
            | Unary::Gelu
            | Unary::Expm1
            | Unary::LeakyRelu
            | Unary::Elu
    ) && !is_float
    {
        return fail(format!(
            "needs a floating-point result, the graph records {}",
            out.dtype.name()
        ));
    }
    if matches!(op, Unary::BitwiseNot) && is_float {
        return fail("bitwise_not needs an integer or bool tensor");
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
                Unary::Expm1 => expm1(b, x, compute),
                Unary::Round(name) if is_float => b.same(name, &[x]),
                Unary::Round(_) => Ok(x),
                Unary::Sign => sign(b, x, compute),
                Unary::BitwiseNot => {
                    // All ones: -1 for integers, true for bool.
                    let ones = b.constant(Scalar::Int(-1), compute)?;
                    b.same("arith.xori", &[x, ones])
                }
                Unary::LeakyRelu => {
                    // `x > 0 ? x : x * slope`: NaN and -0.0 take the scaled branch, as in PyTorch.
                    let zero = b.constant(Scalar::Float(0.0), compute)?;
                    let slope = b.constant(Scalar::Float(params[0]), compute)?;
                    let positive = b.cmpf("ogt", x, zero)?;
                    let scaled = b.same("arith.mulf", &[x, slope])?;
                    b.select(positive, x, scaled)
                }
                Unary::Elu => {
                    // PyTorch: `x > 0 ? x * scale : expm1(x * input_scale) * (alpha * scale)`,
                    // the coefficients rounded to the compute type first.
                    let c = |v: f64| b.constant(Scalar::Float(v), compute);
                    let (alpha, scale, input_scale) = (c(params[0])?, c(params[1])?, c(params[2])?);
                    let negcoef = b.same("arith.mulf", &[alpha, scale])?;
                    let zero = c(0.0)?;
                    let positive = b.cmpf("ogt", x, zero)?;
                    let pos = b.same("arith.mulf", &[x, scale])?;
                    let inner = b.same("arith.mulf", &[x, input_scale])?;
                    let e = expm1(b, inner, compute)?;
                    let neg = b.same("arith.mulf", &[e, negcoef])?;
                    b.select(positive, pos, neg)
                }
            }
        },
    )?;
    Ok(vec![value])
}

/// A float argument with a default when the graph leaves it out or passes None.
fn opt_float(ctx: &LowerCtx<'_, '_>, node: &Node, index: usize, default: f64) -> Result<f64> {
    match node.args.get(index) {
        None | Some(Arg::None) => Ok(default),
        Some(_) => ctx.float(node, index),
    }
}

/// `exp(x) - 1` by Kahan's method: `u = exp(x)`, then `(u - 1) * (x / log(u))`, with `u == 1`
/// giving `x` (so -0.0 and tiny values are exact). The `math.expm1` op would lower to
/// `exp(x) - 1`, which loses every digit for small |x|.
pub(super) fn expm1<'c, 'b>(
    b: &Emit<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let c = |v: f64| b.constant(Scalar::Float(v), dtype);
    let one = c(1.0)?;
    let u = b.same("math.exp", &[x])?;
    let um1 = b.same("arith.subf", &[u, one])?;
    let log = b.same("math.log", &[u])?;
    let ratio = b.same("arith.divf", &[x, log])?;
    let general = b.same("arith.mulf", &[um1, ratio])?;
    // exp overflowed (inf / inf would be NaN) or underflowed to a result of exactly -1.
    let is_inf = b.cmpf("oeq", u, c(f64::INFINITY)?)?;
    let is_minus_one = b.cmpf("oeq", um1, c(-1.0)?)?;
    let is_one = b.cmpf("oeq", u, one)?;
    let r = b.select(is_inf, u, general)?;
    let r = b.select(is_minus_one, um1, r)?;
    b.select(is_one, x, r)
}

/// `(0 < x) - (x < 0)` in the value's own type; unsigned values are 0 or 1.
fn sign<'c, 'b>(b: &Emit<'c, 'b>, x: Value<'c, 'b>, dtype: DType) -> Result<Value<'c, 'b>> {
    let zero = b.constant(Scalar::Int(0), dtype)?;
    let one = b.constant(Scalar::Int(1), dtype)?;
    let positive = b.compare("gt", x, zero, dtype)?;
    let p = b.select(positive, one, zero)?;
    if dtype.is_unsigned() {
        return Ok(p);
    }
    let negative = b.compare("lt", x, zero, dtype)?;
    let n = b.select(negative, one, zero)?;
    b.same(
        if dtype.is_float() {
            "arith.subf"
        } else {
            "arith.subi"
        },
        &[p, n],
    )
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
    let bitwise = matches!(op, Binary::BitAnd | Binary::BitOr | Binary::BitXor);
    // Bitwise ops on bool stay in i1; arithmetic on bool computes in i64.
    let compute = if bitwise {
        out.dtype
    } else {
        arithmetic_dtype(out.dtype)
    };
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
    if matches!(op, Binary::Atan2) && !float {
        return fail("atan2 needs a floating-point result");
    }
    if !float && (matches!(op, Binary::Remainder | Binary::Fmod) || rounding.is_some()) {
        check_divisor(ctx, &rhs)?;
    }
    if bitwise && float {
        return fail("bitwise ops need integer or bool operands");
    }
    // PyTorch computes `x ** e` with a Scalar exponent e of 0.5, -0.5, 2, 3, -1 or -2 as
    // sqrt, rsqrt, x*x, x*x*x, 1/x and 1/(x*x) (except for float16): those differ from pow at
    // -inf and -0.0, and vectorise without a call.
    let special = match (op, &rhs) {
        _ if !float || out.dtype == DType::Float16 => None,
        (Binary::Pow, Operand::Scalar(e)) => PowSpecial::of(e.as_f64()),
        _ => None,
    };
    // With a half result, PyTorch rounds the operands of add/sub/pow/atan2/remainder/fmod
    // (Python scalars, 0-d tensors, alpha) to the half type before computing in f32; mul/div
    // use them unrounded.
    let operand = match op {
        Binary::Add
        | Binary::Sub
        | Binary::ReverseSub
        | Binary::Pow
        | Binary::Atan2
        | Binary::Remainder
        | Binary::Fmod
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
                Binary::Pow => match special {
                    Some(PowSpecial::Sqrt) => b.same("math.sqrt", &[a]),
                    Some(PowSpecial::Rsqrt) => b.same("math.rsqrt", &[a]),
                    Some(PowSpecial::Square) => b.same("arith.mulf", &[a, a]),
                    Some(PowSpecial::Cube) => {
                        let square = b.same("arith.mulf", &[a, a])?;
                        b.same("arith.mulf", &[square, a])
                    }
                    Some(PowSpecial::Reciprocal) => {
                        b.same("arith.divf", &[b.constant(Scalar::Float(1.0), compute)?, a])
                    }
                    Some(PowSpecial::ReciprocalSquare) => {
                        let square = b.same("arith.mulf", &[a, a])?;
                        b.same(
                            "arith.divf",
                            &[b.constant(Scalar::Float(1.0), compute)?, square],
                        )
                    }
                    None if float => b.same("math.powf", &[a, x]),
                    None => int_pow(b, a, x, compute),
                },
                Binary::Maximum if float => b.torch_extremum(a, x, true),
                Binary::Maximum => b.same(
                    if unsigned {
                        "arith.maxui"
                    } else {
                        "arith.maxsi"
                    },
                    &[a, x],
                ),
                Binary::Minimum if float => b.torch_extremum(a, x, false),
                Binary::Minimum => b.same(
                    if unsigned {
                        "arith.minui"
                    } else {
                        "arith.minsi"
                    },
                    &[a, x],
                ),
                Binary::Atan2 => b.same("math.atan2", &[a, x]),
                Binary::Remainder | Binary::Fmod if float => {
                    let m = b.same("arith.remf", &[a, x])?;
                    match op {
                        Binary::Remainder => python_remainder(b, m, x, compute),
                        _ => Ok(m),
                    }
                }
                Binary::Remainder | Binary::Fmod => {
                    int_remainder(b, a, x, compute, matches!(op, Binary::Remainder))
                }
                Binary::BitAnd => b.same("arith.andi", &[a, x]),
                Binary::BitOr => b.same("arith.ori", &[a, x]),
                Binary::BitXor => b.same("arith.xori", &[a, x]),
            }
        },
    )?;
    Ok(vec![value])
}

/// Floating-point powers by a Scalar exponent that PyTorch computes without `pow`.
#[derive(Clone, Copy)]
enum PowSpecial {
    Sqrt,
    Rsqrt,
    Square,
    Cube,
    Reciprocal,
    ReciprocalSquare,
}

impl PowSpecial {
    fn of(exponent: f64) -> Option<Self> {
        Some(match exponent {
            0.5 => Self::Sqrt,
            -0.5 => Self::Rsqrt,
            2.0 => Self::Square,
            3.0 => Self::Cube,
            -1.0 => Self::Reciprocal,
            -2.0 => Self::ReciprocalSquare,
            _ => return None,
        })
    }
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

/// Reports (see [`LowerCtx::report`]) an integer divisor that is zero: an element of a tensor
/// divisor, or a Python scalar 0.
fn check_divisor(ctx: &LowerCtx, divisor: &Operand) -> Result<()> {
    match divisor {
        Operand::Tensor(t) => {
            let dtype = t.dtype;
            ctx.report_any(t, |b, x| {
                b.cmpi("eq", x, b.constant(Scalar::Int(0), dtype)?)
            })
        }
        Operand::Scalar(s) if s.as_f64() == 0.0 => {
            let always = ctx.e.constant(Scalar::Bool(true), DType::Bool)?;
            ctx.report(always)
        }
        Operand::Scalar(_) => Ok(()),
    }
}

/// Python's remainder from C's: `m += x` when `m` is nonzero and its sign differs from the
/// divisor's (PyTorch's `remainder` kernel; -0.0 stays -0.0, NaN stays NaN).
fn python_remainder<'c, 'b>(
    b: &Emit<'c, 'b>,
    m: Value<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    let zero = b.constant(Scalar::Int(0), dtype)?;
    let nonzero = b.compare("ne", m, zero, dtype)?;
    let m_neg = b.compare("lt", m, zero, dtype)?;
    let x_neg = b.compare("lt", x, zero, dtype)?;
    let signs_differ = b.same("arith.xori", &[m_neg, x_neg])?;
    let adjust = b.same("arith.andi", &[nonzero, signs_differ])?;
    let add = if dtype.is_float() {
        "arith.addf"
    } else {
        "arith.addi"
    };
    let shifted = b.same(add, &[m, x])?;
    b.select(adjust, shifted, m)
}

/// Integer `fmod` (C `%`) or `remainder` (Python `%`). x86 traps on a zero divisor and on
/// `INT_MIN % -1`, so both divide by 1 instead: the result is 0, which is `a % -1`'s true value
/// and a defined stand-in where PyTorch raises ZeroDivisionError.
fn int_remainder<'c, 'b>(
    b: &Emit<'c, 'b>,
    a: Value<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
    python: bool,
) -> Result<Value<'c, 'b>> {
    let unsigned = dtype.is_unsigned();
    let zero = b.constant(Scalar::Int(0), dtype)?;
    let one = b.constant(Scalar::Int(1), dtype)?;
    let mut unsafe_divisor = b.cmpi("eq", x, zero)?;
    if !unsigned {
        let minus_one = b.constant(Scalar::Int(-1), dtype)?;
        let is_minus_one = b.cmpi("eq", x, minus_one)?;
        unsafe_divisor = b.same("arith.ori", &[unsafe_divisor, is_minus_one])?;
    }
    let d = b.select(unsafe_divisor, one, x)?;
    if unsigned {
        return b.same("arith.remui", &[a, d]);
    }
    let r = b.same("arith.remsi", &[a, d])?;
    if python {
        python_remainder(b, r, d, dtype)
    } else {
        Ok(r)
    }
}

/// Integer division that cannot trap: x86 raises SIGFPE on a zero divisor (PyTorch raises
/// ZeroDivisionError) and on `INT_MIN / -1` (eager PyTorch itself crashes). Both divide by 1
/// instead; a zero divisor then gives 0 and -1 gives the wrapping negation (`INT_MIN / -1` is
/// INT_MIN, as numpy). `quotient` divides by the guarded divisor.
fn int_divide<'c, 'b>(
    b: &Emit<'c, 'b>,
    a: Value<'c, 'b>,
    x: Value<'c, 'b>,
    dtype: DType,
    quotient: impl Fn(Value<'c, 'b>, Value<'c, 'b>) -> Result<Value<'c, 'b>>,
) -> Result<Value<'c, 'b>> {
    let zero = b.constant(Scalar::Int(0), dtype)?;
    let one = b.constant(Scalar::Int(1), dtype)?;
    let is_zero = b.cmpi("eq", x, zero)?;
    if dtype.is_unsigned() {
        let d = b.select(is_zero, one, x)?;
        let q = quotient(a, d)?;
        return b.select(is_zero, zero, q);
    }
    let minus_one = b.constant(Scalar::Int(-1), dtype)?;
    let is_minus_one = b.cmpi("eq", x, minus_one)?;
    let unsafe_divisor = b.same("arith.ori", &[is_zero, is_minus_one])?;
    let d = b.select(unsafe_divisor, one, x)?;
    let q = quotient(a, d)?;
    let negated = b.same("arith.subi", &[zero, a])?;
    let q = b.select(is_minus_one, negated, q)?;
    b.select(is_zero, zero, q)
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
        (Some(mode @ ("trunc" | "floor")), false) => {
            int_divide(b, a, x, dtype, |a, d| match (unsigned, mode) {
                (true, _) => b.same("arith.divui", &[a, d]),
                (false, "trunc") => b.same("arith.divsi", &[a, d]),
                (false, _) => b.floor_div_si(a, d, dtype),
            })
        }
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

fn lower_logical<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    op: Logical,
) -> Result<Vec<Value<'c, 'a>>> {
    let out = ctx.out(0)?.clone();
    let mut operands = vec![ctx.operand(node, 0)?];
    if !matches!(op, Logical::Not) {
        operands.push(ctx.operand(node, 1)?);
    }
    // Halves are tested in f32; the body converts each operand to bool (`!= 0`).
    let compute: Vec<DType> = operands
        .iter()
        .map(|o| match o {
            Operand::Tensor(t) => t.dtype.compute(),
            Operand::Scalar(_) => DType::Bool,
        })
        .collect();
    let value = ctx.elementwise(
        &operands,
        &compute,
        DType::Bool,
        &out.shape,
        out.dtype,
        |b, v| {
            let truth: Vec<Value> = v
                .iter()
                .zip(&compute)
                .map(|(x, dtype)| b.convert(*x, *dtype, DType::Bool))
                .collect::<Result<_>>()?;
            match op {
                Logical::And => b.same("arith.andi", &[truth[0], truth[1]]),
                Logical::Or => b.same("arith.ori", &[truth[0], truth[1]]),
                Logical::Xor => b.same("arith.xori", &[truth[0], truth[1]]),
                Logical::Not => {
                    let t = b.constant(Scalar::Bool(true), DType::Bool)?;
                    b.same("arith.xori", &[truth[0], t])
                }
            }
        },
    )?;
    Ok(vec![value])
}

fn lower_classify<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    class: Classify,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if !x.dtype.is_float() {
        return Ok(vec![ctx.e.splat(
            &out.shape,
            out.dtype,
            Scalar::Bool(false),
        )?]);
    }
    let compute = x.dtype.compute();
    let value = ctx.elementwise(
        &[Operand::Tensor(x)],
        &[compute],
        DType::Bool,
        &out.shape,
        out.dtype,
        |b, v| match class {
            Classify::IsNan => b.cmpf("uno", v[0], v[0]),
            Classify::IsInf => {
                let magnitude = b.same("math.absf", &[v[0]])?;
                let inf = b.constant(Scalar::Float(f64::INFINITY), compute)?;
                b.cmpf("oeq", magnitude, inf)
            }
        },
    )?;
    Ok(vec![value])
}

/// `clamp(x, min, max)` as `min(max(x, lo), hi)` in the result dtype: lo > hi gives hi, a NaN
/// input or bound gives NaN. On a tie (-0.0 against +0.0) scalar bounds keep x and tensor
/// bounds give the bound, as PyTorch's vectorised kernels do (its scalar tail loop keeps x for
/// both). Integer scalar bounds outside the dtype's range saturate: PyTorch compares exactly and
/// rejects only bounds that would make every result unrepresentable.
fn lower_clamp<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    bounds: Bounds,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    let dtype = out.dtype;
    let compute = arithmetic_dtype(dtype);
    let mut operands = vec![Operand::Tensor(x)];
    // Operand index of the lower and upper bound.
    let mut slots = [None, None];
    for (slot, (index, default)) in slots.iter_mut().zip([(1, -1.0), (2, 1.0)]) {
        let bound = match (bounds, node.args.get(index)) {
            (Bounds::Tensor, _) => ctx.opt_tensor(node, index)?.map(Operand::Tensor),
            (Bounds::Scalar, None | Some(Arg::None)) => None,
            (Bounds::Hardtanh, None | Some(Arg::None)) => {
                Some(Operand::Scalar(saturate(Scalar::Float(default), dtype)))
            }
            // A size (an index clamped to the last of a symbolic dimension), computed when
            // the kernel runs.
            (Bounds::Scalar, Some(Arg::Int(size))) if dims::is_symbolic(*size) => {
                Some(ctx.operand(node, index)?)
            }
            (Bounds::Scalar | Bounds::Hardtanh, Some(_)) => {
                Some(Operand::Scalar(saturate(ctx.scalar(node, index)?, dtype)))
            }
        };
        if let Some(bound) = bound {
            *slot = Some(operands.len());
            operands.push(bound);
        }
    }
    if slots == [None, None] {
        return fail("clamp needs a lower or an upper bound");
    }
    let bound_on_tie = matches!(bounds, Bounds::Tensor);
    // Bounds are first rounded to the result dtype (a float32 bound of a float16 clamp).
    let operand_dtypes = vec![dtype; operands.len()];
    let value = ctx.elementwise(
        &operands,
        &operand_dtypes,
        compute,
        &out.shape,
        dtype,
        |b, v| {
            let mut y = b.convert(v[0], dtype, compute)?;
            for (slot, past) in slots.iter().zip(["lt", "gt"]) {
                if let Some(i) = *slot {
                    let bound = b.convert(v[i], dtype, compute)?;
                    y = clamp_side(b, y, bound, past, bound_on_tie, compute)?;
                }
            }
            Ok(y)
        },
    )?;
    Ok(vec![value])
}

/// One side of a clamp: `bound` where `y` is `past` (lt: below, gt: above) it, else `y`.
fn clamp_side<'c, 'b>(
    b: &Emit<'c, 'b>,
    y: Value<'c, 'b>,
    bound: Value<'c, 'b>,
    past: &str,
    bound_on_tie: bool,
    dtype: DType,
) -> Result<Value<'c, 'b>> {
    if !dtype.is_float() {
        let beyond = b.compare(past, y, bound, dtype)?;
        return b.select(beyond, bound, y);
    }
    if bound_on_tie {
        let within = b.cmpf(if past == "lt" { "ogt" } else { "olt" }, y, bound)?;
        let r = b.select(within, y, bound)?;
        let nan = b.cmpf("uno", y, y)?;
        b.select(nan, y, r)
    } else {
        let beyond = b.cmpf(&format!("o{past}"), y, bound)?;
        let r = b.select(beyond, bound, y)?;
        let nan = b.cmpf("uno", bound, bound)?;
        b.select(nan, bound, r)
    }
}

/// An integer clamp bound saturated into `dtype`'s range (floats truncate toward zero).
fn saturate(s: Scalar, dtype: DType) -> Scalar {
    if !dtype.is_int() {
        return s;
    }
    let v = match s {
        Scalar::Int(i) => i,
        Scalar::Bool(b) => b as i64,
        Scalar::Float(f) => f as i64,
    };
    let bits = dtype.bits();
    let (min, max) = if dtype.is_unsigned() {
        (0, (1i64 << bits) - 1)
    } else if bits >= 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    };
    Scalar::Int(v.clamp(min, max))
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
            "cast changes shape {} to {}",
            dims::shown(&x.shape),
            dims::shown(&out.shape)
        ));
    }
    Ok(vec![ctx.cast(&x, out.dtype)?.value])
}
