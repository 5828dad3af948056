//! The ops of fxmlir's dialect (`dialects/fxmlir.irdl.mlir`) stand for a node lowered whole;
//! each names, in its `decomposition` attribute, a private function of the module that
//! computes it. [`expand`] (the `expand` stage) replaces each such op by that function's body.

use super::ops::op_name;
use crate::error::{Error, Result};
use melior::ir::{
    BlockLike, Module, OperationRef, RegionLike, ValueLike,
    attribute::FlatSymbolRefAttribute,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use mlir_sys::{
    MlirValue, mlirBlockInsertOwnedOperationBefore, mlirOperationClone, mlirOperationDestroy,
    mlirOperationGetResult, mlirOperationReplaceUsesOfWith, mlirValueReplaceAllUsesOfWith,
};

/// The attribute of every op of fxmlir's dialect that names its decomposition.
pub const DECOMPOSITION: &str = "decomposition";

/// The stage whose work [`expand`] is: its errors name it.
const STAGE: &str = "expand";

/// Whether `op` is one of fxmlir's ops that stand for a node (it names a decomposition).
pub fn is_whole(op: &OperationRef) -> bool {
    op_name(op).starts_with("fxmlir.") && op.attribute(DECOMPOSITION).is_ok()
}

/// The function of `module`'s body named `symbol`.
fn function<'c, 'a>(module: &'a Module<'c>, symbol: &str) -> Option<OperationRef<'c, 'a>> {
    std::iter::successors(module.body().first_operation(), |op| op.next_in_block()).find(|op| {
        op_name(op) == "func.func"
            && op
                .attribute("sym_name")
                .ok()
                .and_then(|a| melior::ir::attribute::StringAttribute::try_from(a).ok())
                .is_some_and(|s| s.value() == symbol)
    })
}

/// Replaces every op of fxmlir's dialect in `module` by its decomposition's body (the
/// functions stay, for `symbol-dce` to drop); returns how many it replaced. An op whose
/// decomposition is missing or does not match it is an error naming the op.
pub fn expand(module: &Module) -> Result<usize> {
    let mut wholes = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if is_whole(&op) {
            wholes.push(op.to_raw());
        }
        WalkResult::Advance
    });
    for &raw in &wholes {
        // SAFETY: a live op of the module; each is replaced once, below.
        let op = unsafe { OperationRef::from_raw(raw) };
        let fail = |message: String| {
            Error::stage(
                STAGE,
                format!("{} at {}: {message}", op_name(&op), op.location()),
            )
        };
        let symbol = op
            .attribute(DECOMPOSITION)
            .ok()
            .and_then(|a| FlatSymbolRefAttribute::try_from(a).ok())
            .map(|s| s.value().to_string())
            .ok_or_else(|| fail("its decomposition is not a symbol".to_string()))?;
        let body = function(module, &symbol)
            .and_then(|f| f.region(0).ok().and_then(|r| r.first_block()))
            .ok_or_else(|| fail(format!("its decomposition @{symbol} is not a function")))?;
        if body.argument_count() != op.operand_count() {
            return Err(fail(format!(
                "@{symbol} takes {} arguments for {} operands",
                body.argument_count(),
                op.operand_count()
            )));
        }
        let block = op
            .block()
            .ok_or_else(|| fail("it is in no block".to_string()))?;
        // Decomposition value → value at the op.
        let mut map: Vec<(MlirValue, MlirValue)> = Vec::new();
        for i in 0..op.operand_count() {
            let argument = body.argument(i).map_err(|e| fail(e.to_string()))?;
            let operand = op.operand(i).map_err(|e| fail(e.to_string()))?;
            if argument.r#type() != operand.r#type() {
                return Err(fail(format!(
                    "@{symbol} takes {} as argument {i}, the op gives {}",
                    argument.r#type(),
                    operand.r#type()
                )));
            }
            map.push((argument.to_raw(), operand.to_raw()));
        }
        let mut returned = None;
        for inner in std::iter::successors(body.first_operation(), |o| o.next_in_block()) {
            if op_name(&inner) == "func.return" {
                returned = Some(inner.operands().map(|v| v.to_raw()).collect::<Vec<_>>());
                break;
            }
            // SAFETY: the clone is a new op with no parent, which the block takes before the
            // whole op; its operands (nested ones included) are replaced only by values that
            // dominate the whole op.
            unsafe {
                let clone = mlirOperationClone(inner.to_raw());
                OperationRef::from_raw(clone).walk(WalkOrder::PreOrder, |nested| {
                    for (from, to) in &map {
                        mlirOperationReplaceUsesOfWith(nested.to_raw(), *from, *to);
                    }
                    WalkResult::Advance
                });
                mlirBlockInsertOwnedOperationBefore(block.to_raw(), raw, clone);
                for i in 0..inner.result_count() {
                    map.push((
                        mlirOperationGetResult(inner.to_raw(), i as isize),
                        mlirOperationGetResult(clone, i as isize),
                    ));
                }
            }
        }
        let returned = returned.ok_or_else(|| fail(format!("@{symbol} does not return")))?;
        if returned.len() != op.result_count() {
            return Err(fail(format!(
                "@{symbol} returns {} values for {} results",
                returned.len(),
                op.result_count()
            )));
        }
        for (i, value) in returned.into_iter().enumerate() {
            // SAFETY: `value` is a live value the decomposition returns.
            let found = unsafe { melior::ir::Value::from_raw(value) }.r#type();
            let result = op.result(i).map_err(|e| fail(e.to_string()))?.r#type();
            if found != result {
                return Err(fail(format!(
                    "@{symbol} returns {found} as value {i}, the op's result is {result}"
                )));
            }
            let with = map
                .iter()
                .find(|(from, _)| from.ptr == value.ptr)
                .map(|(_, to)| *to)
                .ok_or_else(|| fail(format!("@{symbol} returns a value it does not define")))?;
            // SAFETY: the result and its replacement are live values of the same type (the
            // decomposition's signature matches the op's); the op, unused, is destroyed.
            unsafe { mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(raw, i as isize), with) };
        }
        // SAFETY: the op has no uses left and is owned by its block.
        unsafe { mlirOperationDestroy(raw) };
    }
    Ok(wholes.len())
}
