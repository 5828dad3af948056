//! Math on vectors as calls of libmvec's vector functions. The schedule vectorises a matrix
//! product's epilogue whole, so a GELU after a linear layer reaches the LLVM stage as one
//! `math.erf` on an 8 x 32 register tile. `convert-math-to-libm` turns that into 256 scalar
//! `erff` calls, which LLVM's SLP vectoriser packs back into sixteen calls of libmvec's
//! `_ZGVeN16v_erff` (see `jit::veclib`), at a cost of 7% of the whole compile of the
//! transformer block and of BERT (instructions executed). [`call_libmvec`] makes the sixteen
//! calls itself: each row of the tile is cut into slices of the host's widest vector function
//! that divides it, and each slice is one call. A math op libmvec has no function for, or whose
//! rows no variant divides, is left to the LLVM stage's lowerings.

use super::ir::builder::Builder;
use super::ir::ops::{op_name, vector_shape};
use super::transform::{items, list};
use crate::error::{Error, Result};
use crate::libmvec;
use crate::target::Target;
use melior::{
    Context, IrRewriter,
    dialect::func,
    ir::{
        Attribute, BlockLike, Identifier, Location, Module, OperationRef, Region, Type, Value,
        ValueLike,
        attribute::{StringAttribute, TypeAttribute},
        operation::{OperationLike, WalkOrder, WalkResult},
        r#type::FunctionType,
    },
};
use std::collections::BTreeMap;

/// The stage whose hook runs this module's rewrites: its errors name it.
const STAGE: &str = "loops";

/// A math op to rewrite: its vector shape and element type, and the libmvec function for a
/// slice of `lanes` elements of one row.
struct MathCall {
    shape: Vec<i64>,
    element: String,
    callee: String,
    lanes: i64,
}

/// The libm name of a `math` op: its own, but `powf` is `pow`.
fn libm_name(op: &str) -> Option<&str> {
    match op.strip_prefix("math.")? {
        "powf" => Some("pow"),
        name => Some(name),
    }
}

/// What [`call_libmvec`] does with `op`, if anything: a `math` op on static vectors of `f32`
/// or `f64` with a libmvec function for its rows.
fn math_call(op: &OperationRef, target: &Target) -> Option<MathCall> {
    let name = op_name(op);
    let base = libm_name(&name)?;
    if op.result_count() != 1 {
        return None;
    }
    let (shape, element) = vector_shape(op.result(0).ok()?.r#type())?;
    let bits = match element.as_str() {
        "f32" => 32,
        "f64" => 64,
        _ => return None,
    };
    let (callee, lanes, arity) = libmvec::row_variant(base, bits, *shape.last()?, target)?;
    (op.operand_count() == arity).then_some(MathCall {
        shape,
        element,
        callee,
        lanes,
    })
}

/// The positions of a vector's rows: every index over its leading dimensions, in order.
fn rows(leading: &[i64]) -> Vec<Vec<i64>> {
    leading.iter().fold(vec![Vec::new()], |prefixes, &extent| {
        prefixes
            .iter()
            .flat_map(|p| {
                (0..extent).map(move |i| {
                    let mut row = p.clone();
                    row.push(i);
                    row
                })
            })
            .collect()
    })
}

/// `vector<length x element>`.
fn vector_type<'c>(context: &'c Context, length: i64, element: &str) -> Result<Type<'c>> {
    let text = format!("vector<{length}x{element}>");
    Type::parse(context, &text)
        .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the type {text}")))
}

/// `op`'s result computed by `planned.callee` slice by slice, before `op`.
fn rewrite<'c, 'a>(
    context: &'c Context,
    op: OperationRef<'c, 'a>,
    planned: &MathCall,
) -> Result<Value<'c, 'a>> {
    let b = Builder {
        stage: STAGE,
        context,
        anchor: op,
        location: op.location(),
    };
    let (leading, &[length]) = planned.shape.split_at(planned.shape.len() - 1) else {
        return Err(Error::stage(STAGE, "a math op on a 0-d vector".to_string()));
    };
    let whole = op
        .result(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?
        .r#type();
    let row_type = vector_type(context, length, &planned.element)?;
    let slice_type = vector_type(context, planned.lanes, &planned.element)?;
    let operands: Vec<Value> = op.operands().collect();
    let callee = format!("@{}", planned.callee);
    let mut result = operands[0];
    for position in rows(leading) {
        let at = || {
            [(
                "static_position",
                format!("array<i64: {}>", items(&position)),
            )]
        };
        let inputs = if leading.is_empty() {
            operands.clone()
        } else {
            operands
                .iter()
                .map(|&x| b.build("vector.extract", &[x], row_type, &at(), vec![]))
                .collect::<Result<_>>()?
        };
        let mut row = inputs[0];
        for start in (0..length).step_by(planned.lanes as usize) {
            let args = if length == planned.lanes {
                inputs.clone()
            } else {
                let slice = [
                    ("offsets", list(&[start])),
                    ("sizes", list(&[planned.lanes])),
                    ("strides", list(&[1])),
                ];
                inputs
                    .iter()
                    .map(|&x| {
                        b.build(
                            "vector.extract_strided_slice",
                            &[x],
                            slice_type,
                            &slice,
                            vec![],
                        )
                    })
                    .collect::<Result<_>>()?
            };
            let called = b.build(
                "func.call",
                &args,
                slice_type,
                &[("callee", callee.clone())],
                vec![],
            )?;
            row = if length == planned.lanes {
                called
            } else {
                let at = [("offsets", list(&[start])), ("strides", list(&[1]))];
                b.build(
                    "vector.insert_strided_slice",
                    &[called, row],
                    row_type,
                    &at,
                    vec![],
                )?
            };
        }
        result = if leading.is_empty() {
            row
        } else {
            b.build("vector.insert", &[row, result], whole, &at(), vec![])?
        };
    }
    Ok(result)
}

/// Rewrites every math op of `module` that libmvec has a vector function for (see the module
/// documentation) and declares the functions called; returns how many ops it rewrote.
pub fn call_libmvec(context: &Context, module: &mut Module, target: &Target) -> Result<usize> {
    let mut found = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if let Some(planned) = math_call(&op, target) {
            found.push((op.to_raw(), planned));
        }
        WalkResult::Advance
    });
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    // Each callee with its first caller: its signature and its declaration's location.
    let mut callees: BTreeMap<&str, (&MathCall, usize, Location)> = BTreeMap::new();
    for (raw, planned) in &found {
        // SAFETY: `raw` is a live op of `module`, found by the walk above; only ops rewritten
        // before it were erased, and those are other ops.
        let op = unsafe { OperationRef::from_raw(*raw) };
        let value = rewrite(context, op, planned)?;
        callees
            .entry(&planned.callee)
            .or_insert((planned, op.operand_count(), op.location()));
        rewriter.replace_all_uses_with(
            op.result(0)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?
                .into(),
            value,
        );
        rewriter.erase_op(op);
    }
    let body = module.body();
    let mut next = body.first_operation();
    while let Some(f) = next {
        if let Ok(symbol) = f.attribute("sym_name") {
            callees.remove(symbol.to_string().trim_matches('"'));
        }
        next = f.next_in_block();
    }
    for (name, (planned, arity, location)) in callees {
        let lane_type = vector_type(context, planned.lanes, &planned.element)?;
        let private = Attribute::parse(context, "\"private\"")
            .ok_or_else(|| Error::stage(STAGE, "a visibility".to_string()))?;
        body.append_operation(func::func(
            context,
            StringAttribute::new(context, name),
            TypeAttribute::new(
                FunctionType::new(context, &vec![lane_type; arity], &[lane_type]).into(),
            ),
            Region::new(),
            &[(Identifier::new(context, "sym_visibility"), private)],
            location,
        ));
    }
    Ok(found.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_run_over_the_leading_dimensions_in_order() {
        assert_eq!(rows(&[]), vec![Vec::<i64>::new()]);
        assert_eq!(rows(&[2, 3]).len(), 6);
        assert_eq!(rows(&[2, 3])[4], vec![1, 1]);
        assert_eq!(libm_name("math.powf"), Some("pow"));
        assert_eq!(libm_name("arith.addf"), None);
    }
}
