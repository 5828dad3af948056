//! What an OpenMP parallel region captures. After the conversion to the LLVM dialect, a memref
//! used inside an `omp.parallel` region is a descriptor struct built outside it (from the
//! function's arguments, with `llvm.insertvalue`), and the region reads the fields it needs
//! with `llvm.extractvalue`. OpenMP's translation passes every value a region captures through
//! memory: the forking function stores each captured descriptor field by field into a stack
//! slot, and the outlined region loads it back. [`narrow`] makes a region capture only the
//! fields it reads: each `llvm.extractvalue` inside a region of a value built outside it is
//! replaced by the field's value, where the `llvm.insertvalue` chain outside names it, or else
//! moved before the region. A parallel op's forking function then passes a few pointers
//! instead of whole descriptors (on the transformer block, a third less LLVM IR around the
//! parallel regions).

use super::outline::{op_name, result_owner};
use crate::error::{Error, Result};
use melior::ir::{
    BlockLike, Module, OperationRef, Value, ValueLike,
    attribute::DenseI64ArrayAttribute,
    block::BlockArgument,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use mlir_sys::{
    MlirOperation, mlirOpOperandIsNull, mlirOperationDestroy, mlirOperationGetParentOperation,
    mlirOperationMoveBefore, mlirValueGetFirstUse, mlirValueReplaceAllUsesOfWith,
};

const PARALLEL: &str = "omp.parallel";
const EXTRACT: &str = "llvm.extractvalue";
const INSERT: &str = "llvm.insertvalue";
const POISON: &str = "llvm.mlir.poison";

fn failure(message: String) -> Error {
    Error::stage("llvm", message)
}

/// Whether `ancestor` is `op` or contains it.
fn within(op: MlirOperation, ancestor: MlirOperation) -> bool {
    let mut current = op;
    // SAFETY: `op` is a live op; walking up its parents ends at a null op.
    unsafe {
        while !current.ptr.is_null() {
            if current.ptr == ancestor.ptr {
                return true;
            }
            current = mlirOperationGetParentOperation(current);
        }
    }
    false
}

/// The op that holds the definition of `value`: its defining op, or for a block argument the
/// op whose region holds the block.
fn definition_site(value: Value) -> Option<MlirOperation> {
    if let Some(owner) = result_owner(value) {
        return Some(owner.to_raw());
    }
    let argument = BlockArgument::try_from(value).ok()?;
    argument.owner().parent_operation().map(|o| o.to_raw())
}

/// The `position` of an `llvm.extractvalue` or `llvm.insertvalue`.
fn position(op: &OperationRef) -> Result<Vec<i64>> {
    let list = op
        .attribute("position")
        .map_err(|e| failure(format!("{}: {e}", op_name(op))))?;
    let list = DenseI64ArrayAttribute::try_from(list)
        .map_err(|e| failure(format!("{}: {e}", op_name(op))))?;
    Ok((0..list.len())
        .filter_map(|i| list.element(i).ok())
        .collect())
}

/// The value an `llvm.insertvalue` chain ending in `aggregate` put at `wanted`, if the chain
/// names it whole; `None` when the chain starts elsewhere or writes part of that field.
fn inserted<'c: 'a, 'a>(
    mut aggregate: Value<'c, 'a>,
    wanted: &[i64],
) -> Result<Option<Value<'c, 'a>>> {
    while let Some(insert) = result_owner(aggregate).filter(|o| op_name(o) == INSERT) {
        let at = position(&insert)?;
        if at == wanted {
            return Ok(insert.operand(1).ok());
        }
        let overlaps = at.iter().zip(wanted).all(|(a, b)| a == b);
        if overlaps {
            return Ok(None);
        }
        aggregate = insert
            .operand(0)
            .map_err(|e| failure(format!("{INSERT}: {e}")))?;
    }
    Ok(None)
}

/// Erases `value`'s `llvm.insertvalue` chain, down to the `llvm.mlir.poison` it starts from,
/// as far as nothing else uses it.
fn erase_unused_chain<'c: 'a, 'a>(mut value: Value<'c, 'a>) -> Result<()> {
    while let Some(op) = result_owner(value).filter(|o| [INSERT, POISON].contains(&&*op_name(o))) {
        // SAFETY: `op` is live; its result's use list is read only.
        let used = op
            .result(0)
            .is_ok_and(|r| unsafe { !mlirOpOperandIsNull(mlirValueGetFirstUse(r.to_raw())) });
        if used {
            break;
        }
        let container = (op_name(&op) == INSERT)
            .then(|| op.operand(0))
            .transpose()
            .map_err(|e| failure(format!("{INSERT}: {e}")))?;
        // SAFETY: `op` is live and its result has no uses; nothing refers to it after.
        unsafe { mlirOperationDestroy(op.to_raw()) };
        match container {
            Some(next) => value = next,
            None => break,
        }
    }
    Ok(())
}

/// Narrows the captures of every `omp.parallel` region of `module` (see the module
/// documentation); returns how many field reads it took out of regions.
pub fn narrow(module: &mut Module) -> Result<usize> {
    let mut regions = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if op.name().as_string_ref().as_str() == Ok(PARALLEL) {
            regions.push(op.to_raw());
        }
        WalkResult::Advance
    });
    let mut narrowed = 0;
    for &region in &regions {
        let mut reads = Vec::new();
        // SAFETY: `region` is a live op of `module`, borrowed mutably here.
        let parallel = unsafe { OperationRef::from_raw(region) };
        parallel.walk(WalkOrder::PreOrder, |op| {
            if op.name().as_string_ref().as_str() == Ok(EXTRACT)
                && op
                    .operand(0)
                    .ok()
                    .and_then(definition_site)
                    .is_some_and(|site| !within(site, region))
            {
                reads.push(op.to_raw());
            }
            WalkResult::Advance
        });
        for &read in &reads {
            // SAFETY: `read` is a live op of `module` (reads are only ever moved or erased
            // after their own turn).
            let op = unsafe { OperationRef::from_raw(read) };
            let aggregate = op
                .operand(0)
                .map_err(|e| failure(format!("{EXTRACT}: {e}")))?;
            let result = op
                .result(0)
                .map_err(|e| failure(format!("{EXTRACT}: {e}")))?;
            match inserted(aggregate, &position(&op)?)? {
                Some(field) if field.r#type() == result.r#type() => {
                    // SAFETY: `read` is live; `field` dominates the region and so every use
                    // of the read; after the replacement the read has no uses and is erased.
                    unsafe {
                        mlirValueReplaceAllUsesOfWith(result.to_raw(), field.to_raw());
                        mlirOperationDestroy(read);
                    }
                    erase_unused_chain(aggregate)?;
                }
                // SAFETY: both ops are live; the read's operand is defined outside the region
                // and so dominates the region's op.
                _ => unsafe { mlirOperationMoveBefore(read, region) },
            }
            narrowed += 1;
        }
    }
    Ok(narrowed)
}
