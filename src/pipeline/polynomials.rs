//! `math.exp` and `math.erf` on `f32` (scalars and vectors) as inline polynomials. Called
//! through libmvec, one vector of sixteen exponentials took about 2.5 cycles per element:
//! each call evaluates one short chain of dependent FMAs, and calls cannot overlap. Inline,
//! LLVM interleaves the chains of several vectors and the loop runs at the FMA units' rate.
//! The softmax of attention, GELU, SiLU and sigmoid all spend their time there.
//!
//! - exp: `x = n·ln 2 + r` with `n` the nearest integer to `x·log2 e` and `|r| <= ln 2 / 2`
//!   (`ln 2` in two parts, so that `n·ln 2` is exact), `e^r` a degree-6 polynomial fitted to
//!   a relative error of 2e-9, and `2^n` built in the exponent field in two halves (so that
//!   results down to the smallest subnormal come out rounded once). Inputs are clamped to
//!   [-104, 88.8] first: beyond, the result is 0 or infinity anyway. NaN gives NaN.
//! - erf: `x·P(x²)` (degree 6 in `x²`) below 1, and up to 3.92 a degree-12 polynomial in
//!   `|x| - 2.5`, capped at 1 and given the sign of `x`; from 3.92 on, erf is ±1 in `f32`.
//!   Fitted (in f64, least squares reweighted towards the largest error) to 1.2e-9 relative
//!   and 4.4e-8 absolute; measured in `f32`, at most 2.4 units in the last place (exp: 1.03;
//!   eager's: 1.0 and 0.6).
//!
//! Both run as the `loops` stage's hook, before [`super::vmath::call_libmvec`] (which takes
//! the math left: other functions, `f64`).

use super::ir::builder::Builder;
use super::ir::ops::{op_name, vector_shape};
use crate::error::{Error, Result};
use crate::target::Target;
use melior::{
    Context, IrRewriter,
    ir::{
        Attribute, Module, OperationRef, Type, Value, ValueLike,
        attribute::ArrayAttribute,
        operation::{OperationLike, OperationMutLike, OperationRefMut, WalkOrder, WalkResult},
    },
};

/// The stage whose hook runs this module's rewrite: its errors name it.
const STAGE: &str = "loops";

/// `e^r` on `[-ln 2 / 2, ln 2 / 2]`, constant term first.
const EXP: [f32; 7] = [
    1.0,
    1.0,
    0.499_999_94,
    0.166_664_32,
    0.041_668,
    0.008_374_156,
    0.001_384_364,
];

/// `ln 2` in two parts: the first has nine trailing zero bits, so `n·LN2_HIGH` is exact for
/// every `n` the clamped inputs give.
const LN2_HIGH: f32 = 0.693_145_75;
const LN2_LOW: f32 = 1.428_606_8e-6;

/// `erf(x) / x` below 1, as a polynomial in `x²`, constant term first.
const ERF_SMALL: [f32; 7] = [
    // 2 / √π: erf(x) is 2x / √π to first order.
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_26,
    0.112_835_854,
    -0.026_853_815,
    0.005_188_332_4,
    -0.000_801_023_1,
    7.853_973_5e-5,
];

/// `erf(x)` on `[1, 4]` (used up to [`ONE_FROM`]) as a polynomial in `x - 2.5`, constant term first.
const ERF_LARGE: [f32; 13] = [
    0.999_593_1,
    0.002_178_021,
    -0.005_447_187,
    0.008_353_905,
    -0.008_612_042,
    0.006_101_185_5,
    -0.002_825_388_5,
    0.000_572_915_25,
    0.000_293_591_23,
    -0.000_280_254_2,
    5.871_376_6e-5,
    2.129_926_5e-5,
    -8.595_787e-6,
];

/// `arith.cmpf` predicates: unordered (either operand NaN), ordered less-than, ordered
/// greater-or-equal.
const UNORDERED: &str = "14 : i64";
const ORDERED_LESS: &str = "4 : i64";
const GREATER_EQUAL: &str = "3 : i64";

/// From here on erf is 1 in `f32` (erf(3.9192) is 1 - 2^-25, halfway to the float below).
const ONE_FROM: f32 = 3.92;

/// The math ops this module rewrites.
#[derive(Clone, Copy)]
enum Function {
    Exp,
    Erf,
}

impl Function {
    /// `op`'s function and the shape of its vector (empty for a scalar), when `op` is one to
    /// rewrite: `math.exp` or `math.erf` of `f32` or of a static vector of `f32`.
    fn of(op: &OperationRef) -> Option<(Function, Vec<i64>)> {
        let function = match op_name(op).as_str() {
            "math.exp" => Function::Exp,
            "math.erf" => Function::Erf,
            _ => return None,
        };
        let ty = op.result(0).ok()?.r#type();
        let shape = match vector_shape(ty) {
            Some((shape, element)) => (element == "f32").then_some(shape)?,
            None => (ty.to_string() == "f32").then(Vec::new)?,
        };
        Some((function, shape))
    }
}

/// Builds the arithmetic of one rewritten op, in its type: `f32` or a vector of them, and
/// the `i32` of the same shape for the exponent field.
struct Arithmetic<'c, 'a> {
    b: Builder<'c, 'a>,
    float: Type<'c>,
    int: Type<'c>,
    /// `AxBx` for a vector, empty for a scalar.
    shape: String,
}

impl<'c, 'a> Arithmetic<'c, 'a> {
    fn new(context: &'c Context, op: OperationRef<'c, 'a>, shape: &[i64]) -> Result<Self> {
        let shape: String = shape.iter().map(|d| format!("{d}x")).collect();
        Ok(Self {
            float: shaped(context, &shape, "f32")?,
            int: shaped(context, &shape, "i32")?,
            shape,
            b: Builder {
                context,
                stage: STAGE,
                anchor: op,
                location: op.location(),
            },
        })
    }

    /// A constant of the op's shape: `bits` in `element` (`f32` or `i32`).
    fn constant(&self, bits: String, element: &str) -> Result<Value<'c, 'a>> {
        let value = if self.shape.is_empty() {
            format!("{bits} : {element}")
        } else {
            format!("dense<{bits}> : vector<{}{element}>", self.shape)
        };
        let result = if element == "f32" {
            self.float
        } else {
            self.int
        };
        self.b
            .build("arith.constant", &[], result, &[("value", value)], vec![])
    }

    /// `value` exactly, as its bit pattern.
    fn float(&self, value: f32) -> Result<Value<'c, 'a>> {
        self.constant(format!("0x{:08X}", value.to_bits()), "f32")
    }

    fn int(&self, value: i32) -> Result<Value<'c, 'a>> {
        self.constant(value.to_string(), "i32")
    }

    fn f(&self, op: &str, operands: &[Value<'c, 'a>]) -> Result<Value<'c, 'a>> {
        self.b.build(op, operands, self.float, &[], vec![])
    }

    fn i(&self, op: &str, operands: &[Value<'c, 'a>]) -> Result<Value<'c, 'a>> {
        self.b.build(op, operands, self.int, &[], vec![])
    }

    /// The polynomial `coefficients` (constant term first) at `t`, by Horner's rule in FMAs.
    fn polynomial(&self, coefficients: &[f32], t: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let mut terms = coefficients.iter().rev();
        let mut p = self.float(*terms.next().unwrap_or(&0.0))?;
        for &c in terms {
            p = self.f("math.fma", &[p, t, self.float(c)?])?;
        }
        Ok(p)
    }

    /// `2^k` for an integer `k` of `i32` in [-126, 127], through the exponent field.
    fn power_of_two(&self, k: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let biased = self.i("arith.addi", &[k, self.int(127)?])?;
        let field = self.i("arith.shli", &[biased, self.int(23)?])?;
        self.f("arith.bitcast", &[field])
    }

    fn exp(&self, x: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let clamped = self.f("arith.minimumf", &[x, self.float(88.8)?])?;
        let clamped = self.f("arith.maximumf", &[clamped, self.float(-104.0)?])?;
        let scaled = self.f(
            "arith.mulf",
            &[clamped, self.float(std::f32::consts::LOG2_E)?],
        )?;
        let n = self.f("math.roundeven", &[scaled])?;
        let minus_n = self.f("arith.negf", &[n])?;
        let r = self.f("math.fma", &[minus_n, self.float(LN2_HIGH)?, clamped])?;
        let r = self.f("math.fma", &[minus_n, self.float(LN2_LOW)?, r])?;
        let p = self.polynomial(&EXP, r)?;
        // 2^n as 2^h · 2^(n - h), h = n / 2: n runs over [-150, 128], each half over [-75, 64].
        let k = self.i("arith.fptosi", &[n])?;
        let half = self.i("arith.shrsi", &[k, self.int(1)?])?;
        let rest = self.i("arith.subi", &[k, half])?;
        let y = self.f("arith.mulf", &[p, self.power_of_two(half)?])?;
        let y = self.f("arith.mulf", &[y, self.power_of_two(rest)?])?;
        // A NaN input would convert to an unspecified integer: it gives itself back.
        let nan = self.compare(UNORDERED, x, 0.0)?;
        self.f("arith.select", &[nan, x, y])
    }

    fn erf(&self, x: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let square = self.f("arith.mulf", &[x, x])?;
        let small = self.f("arith.mulf", &[x, self.polynomial(&ERF_SMALL, square)?])?;
        let magnitude = self.f("math.absf", &[x])?;
        let t = self.f("arith.subf", &[magnitude, self.float(2.5)?])?;
        let large = self.polynomial(&ERF_LARGE, t)?;
        let large = self.f("arith.minimumf", &[large, self.float(1.0)?])?;
        let one = self.compare(GREATER_EQUAL, magnitude, ONE_FROM)?;
        let large = self.f("arith.select", &[one, self.float(1.0)?, large])?;
        let large = self.f("math.copysign", &[large, x])?;
        let below = self.compare(ORDERED_LESS, magnitude, 1.0)?;
        self.f("arith.select", &[below, small, large])
    }

    /// `arith.cmpf predicate, a, bound`.
    fn compare(&self, predicate: &str, a: Value<'c, 'a>, bound: f32) -> Result<Value<'c, 'a>> {
        self.b.build(
            "arith.cmpf",
            &[a, self.float(bound)?],
            self.predicate_type()?,
            &[("predicate", predicate.to_string())],
            vec![],
        )
    }

    /// `i1`, or a vector of them: the type of a comparison.
    fn predicate_type(&self) -> Result<Type<'c>> {
        shaped(self.b.context, &self.shape, "i1")
    }
}

/// `element`, or a vector of them of `shape` (`AxBx`, empty for a scalar).
fn shaped<'c>(context: &'c Context, shape: &str, element: &str) -> Result<Type<'c>> {
    let text = if shape.is_empty() {
        element.to_string()
    } else {
        format!("vector<{shape}{element}>")
    };
    Type::parse(context, &text)
        .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the type {text}")))
}

/// Rewrites every `math.exp` and `math.erf` of `f32` in `module` as inline arithmetic (see
/// the module documentation); returns how many it rewrote.
pub fn inline(context: &Context, module: &mut Module, target: &Target) -> Result<usize> {
    let wide = target.vector_bytes() == 64;
    let mut found = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if let Some(planned) = Function::of(&op) {
            found.push((op.to_raw(), planned));
        }
        WalkResult::Advance
    });
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    for (raw, (function, shape)) in &found {
        // SAFETY: `raw` is a live op of `module`, found by the walk above; only ops rewritten
        // before it were erased, and those are other ops.
        let op = unsafe { OperationRef::from_raw(*raw) };
        let x = op
            .operand(0)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?;
        let arithmetic = Arithmetic::new(context, op, shape)?;
        let value = match function {
            Function::Exp => arithmetic.exp(x)?,
            Function::Erf => arithmetic.erf(x)?,
        };
        rewriter.replace_all_uses_with(
            op.result(0)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?
                .into(),
            value,
        );
        if wide {
            prefer_wide_vectors(context, op)?;
        }
        rewriter.erase_op(op);
    }
    Ok(found.len())
}

/// Asks LLVM for 512-bit vectors in the function around `op` (`passthrough`, which becomes
/// the LLVM function attribute): its cost model otherwise keeps to 256 bits on AVX-512
/// targets, and a loop bound by its arithmetic runs half as fast (as `jit::veclib` does for
/// functions calling libmvec).
fn prefer_wide_vectors(context: &Context, op: OperationRef) -> Result<()> {
    let mut parent = op.parent_operation();
    while let Some(p) = parent {
        if op_name(&p) == "func.func" {
            let wide = Attribute::parse(context, r#"["prefer-vector-width", "512"]"#)
                .ok_or_else(|| Error::stage(STAGE, "a passthrough entry".to_string()))?;
            let mut entries: Vec<Attribute> = match p.attribute("passthrough") {
                Ok(existing) => {
                    let existing = ArrayAttribute::try_from(existing)
                        .map_err(|e| Error::stage(STAGE, e.to_string()))?;
                    (0..existing.len())
                        .map(|i| existing.element(i))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|e| Error::stage(STAGE, e.to_string()))?
                }
                Err(_) => Vec::new(),
            };
            if !entries.contains(&wide) {
                entries.push(wide);
                // SAFETY: `p` is a live op of the module being rewritten; only its attribute
                // dictionary changes.
                let mut function = unsafe { OperationRefMut::from_raw(p.to_raw()) };
                function
                    .set_attribute("passthrough", ArrayAttribute::new(context, &entries).into());
            }
            return Ok(());
        }
        parent = p.parent_operation();
    }
    Ok(())
}
