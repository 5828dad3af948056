//! Lowerings given as MLIR text with the node (`Node::lowering`): a `func.func` over the node's
//! tensor arguments whose body is copied in place of a call, its values mapped to the
//! graph's. The body may use any loaded dialect (upstream, or one defined in IRDL), so a
//! lowering registered in Python needs no Rust; the ops it brings get the node's location.

use super::{LowerCtx, lowering_error};
use crate::error::Result;
use crate::graph::{Arg, InlineLowering, Node};
use crate::pipeline::ir::ops::op_name;
use melior::ir::{
    BlockLike, Module, OperationRef, RegionLike, Type, Value, ValueLike,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use mlir_sys::{
    MlirValue, mlirBlockAppendOwnedOperation, mlirOperationClone, mlirOperationGetResult,
    mlirOperationReplaceUsesOfWith, mlirOperationSetLocation,
};

/// The node's results: `lowering`'s function body, copied into the graph function with its
/// arguments bound to the node's tensor arguments.
pub(super) fn lower<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    lowering: &InlineLowering,
) -> Result<Vec<Value<'c, 'a>>> {
    let fail = |message: String| lowering_error(format!("{} lowering: {message}", lowering.origin));
    let context = ctx.e.context;
    let diagnostics = crate::context::Diagnostics::capture(context);
    let module = Module::parse(context, &lowering.mlir)
        .ok_or_else(|| fail(format!("its MLIR does not parse:\n{}", diagnostics.take())))?;
    if !module.as_operation().verify() {
        return Err(fail(format!(
            "its MLIR does not verify:\n{}",
            diagnostics.take()
        )));
    }
    drop(diagnostics);
    let function = std::iter::successors(module.body().first_operation(), |op| op.next_in_block())
        .find(|op| op_name(op) == "func.func")
        .ok_or_else(|| fail("its MLIR holds no func.func".to_string()))?;
    let body = function
        .region(0)
        .ok()
        .and_then(|r| r.first_block())
        .ok_or_else(|| fail("its function has no body".to_string()))?;
    let arguments: Vec<Value> = node
        .args
        .iter()
        .filter(|a| matches!(a, Arg::Ref(_)))
        .map(|a| ctx.tensor_value(a))
        .collect::<Result<_>>()?;
    if body.argument_count() != arguments.len() {
        return Err(fail(format!(
            "its function takes {} arguments; the node has {} tensor arguments",
            body.argument_count(),
            arguments.len()
        )));
    }
    // Callee value → graph value.
    let mut map: Vec<(MlirValue, MlirValue)> = Vec::new();
    for (i, value) in arguments.iter().enumerate() {
        let argument = body.argument(i).map_err(|e| fail(e.to_string()))?;
        if argument.r#type() != value.r#type() {
            return Err(fail(format!(
                "its argument {i} is {}, the node's is {}",
                argument.r#type(),
                value.r#type()
            )));
        }
        map.push((argument.to_raw(), value.to_raw()));
    }
    let mut results = None;
    for op in std::iter::successors(body.first_operation(), |op| op.next_in_block()) {
        if op_name(&op) == "func.return" {
            results = Some(
                op.operands()
                    .map(|v| find(&map, v.to_raw()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| fail("it returns a value it does not define".to_string()))?,
            );
            break;
        }
        copy(ctx, &op, &mut map);
    }
    let results = results.ok_or_else(|| fail("its function does not return".to_string()))?;
    let expected: Vec<Type> = node
        .outputs
        .iter()
        .map(|m| ctx.e.tensor_type(&m.shape, m.dtype))
        .collect::<Result<_>>()?;
    let values: Vec<Value<'c, 'a>> = results
        .into_iter()
        // SAFETY: each value is a graph value or a result of an op just copied into the
        // graph function's block, which outlives the lowering.
        .map(|raw| unsafe { Value::from_raw(raw) })
        .collect();
    let types: Vec<Type> = values.iter().map(|v| v.r#type()).collect();
    if types != expected {
        return Err(fail(format!(
            "its function returns {}; the node's outputs are {}",
            list(&types),
            list(&expected)
        )));
    }
    Ok(values)
}

fn list(types: &[Type]) -> String {
    types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn find(map: &[(MlirValue, MlirValue)], value: MlirValue) -> Option<MlirValue> {
    map.iter()
        .find(|(from, _)| from.ptr == value.ptr)
        .map(|(_, to)| *to)
}

/// Copies `op` to the end of the graph function's block at the node's location, its operands
/// (nested ones included) mapped to the graph's values, and maps its results.
fn copy(ctx: &LowerCtx, op: &OperationRef, map: &mut Vec<(MlirValue, MlirValue)>) {
    // SAFETY: `op` is a live op of the parsed module; the clone is owned until the block takes
    // it; uses are replaced only with values that dominate the block's end.
    unsafe {
        let clone = mlirOperationClone(op.to_raw());
        let cloned = OperationRef::from_raw(clone);
        cloned.walk(WalkOrder::PreOrder, |nested| {
            for (from, to) in map.iter() {
                mlirOperationReplaceUsesOfWith(nested.to_raw(), *from, *to);
            }
            mlirOperationSetLocation(nested.to_raw(), ctx.e.loc.to_raw());
            WalkResult::Advance
        });
        mlirBlockAppendOwnedOperation(ctx.e.block.to_raw(), clone);
        for i in 0..op.result_count() {
            map.push((
                mlirOperationGetResult(op.to_raw(), i as isize),
                mlirOperationGetResult(clone, i as isize),
            ));
        }
    }
}
