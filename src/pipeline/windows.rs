//! Full unrolling of sliding-window loops, and of nothing else. LLVM's loop unrolling is off
//! for every kernel (on the transformer graphs it was 30-40% of the compile time for no
//! run-time gain, and about 30% of O2 on the convolution graphs); the small loops over a
//! convolution's or pooling's window are the ones it pays on (unrolled, the loop around them
//! becomes innermost and LLVM vectorises it). [`mark`] gives those loops LLVM's
//! `llvm.loop.unroll.full`, which O2 honours with unrolling off, through the `scf.for`'s
//! `loop_annotation` (carried to the loop's back edge by `convert-scf-to-cf`).
//!
//! A window loop: an `scf.for` with constant bounds and at most `MAX_TRIP` iterations whose
//! induction variable an `affine.apply` combines with an enclosing loop's (`oh * stride + kh`),
//! as `convert-linalg-to-loops` indexes a window.

use super::ir::ops::{constant, op_name, within};
use crate::error::{Error, Result};
use melior::{
    Context, StringRef,
    ir::{
        Attribute, BlockLike, OperationRef, RegionLike, Value, ValueLike,
        attribute::AttributeLike,
        block::BlockArgument,
        operation::{OperationLike, WalkOrder, WalkResult},
    },
};
use mlir_sys::{
    MlirOperation, mlirOpOperandGetNextUse, mlirOpOperandGetOwner, mlirOpOperandIsNull,
    mlirOperationGetNumOperands, mlirOperationGetOperand, mlirOperationSetAttributeByName,
    mlirValueGetFirstUse,
};

/// The most iterations a window loop is unrolled for (a 7x7 kernel's rows, with one to spare).
const MAX_TRIP: i64 = 8;

/// The annotation of a window loop.
const FULL_UNROLL: &str = "#llvm.loop_annotation<unroll = #llvm.loop_unroll<full = true>>";

/// Whether `value` is the induction variable of an `scf.for` that encloses `op`.
fn is_enclosing_induction_variable(value: Value, op: MlirOperation) -> bool {
    // Checked first: melior's failed conversion prints the value, numbering its function.
    if !value.is_block_argument() {
        return false;
    }
    let Ok(argument) = BlockArgument::try_from(value) else {
        return false;
    };
    let Some(owner) = argument
        .owner()
        .parent_operation()
        .filter(|o| o.name().as_string_ref().as_str() == Ok("scf.for"))
        .map(|o| o.to_raw())
    else {
        return false;
    };
    within(op, owner)
}

/// Whether an `affine.apply` combines the induction variable `iv` of `for_op` with the
/// induction variable of a loop around it (a window's offset added to the output position;
/// a reduction block loop combined with the loop inside it is not a window).
fn indexes_a_window(iv: Value, for_op: MlirOperation) -> bool {
    let mut found = false;
    // SAFETY: `iv` is a live value; its use list ends with a null use, and each user is live
    // with `mlirOperationGetNumOperands` operands.
    unsafe {
        let mut usage = mlirValueGetFirstUse(iv.to_raw());
        while !found && !mlirOpOperandIsNull(usage) {
            let user = mlirOpOperandGetOwner(usage);
            if op_name(&OperationRef::from_raw(user)) == "affine.apply" {
                found = (0..mlirOperationGetNumOperands(user)).any(|i| {
                    let operand = Value::from_raw(mlirOperationGetOperand(user, i));
                    operand.to_raw().ptr != iv.to_raw().ptr
                        && is_enclosing_induction_variable(operand, for_op)
                });
            }
            usage = mlirOpOperandGetNextUse(usage);
        }
    }
    found
}

/// Whether the `scf.for` `op` is a window loop (see the module documentation).
fn is_window_loop<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> bool {
    let bounds: Option<Vec<i64>> = (0..3)
        .map(|i| op.operand(i).ok().and_then(constant))
        .collect();
    let Some([lower, upper, step]) = bounds.as_deref().map(|b| [b[0], b[1], b[2]]) else {
        return false;
    };
    if step <= 0 {
        return false;
    }
    let trip = (upper - lower + step - 1) / step;
    if !(2..=MAX_TRIP).contains(&trip) {
        return false;
    }
    op.region(0)
        .ok()
        .and_then(|r| r.first_block())
        .and_then(|b| b.argument(0).ok())
        .is_some_and(|iv| indexes_a_window(iv.into(), op.to_raw()))
}

/// Marks every window loop of `module` for full unrolling; returns how many it marked.
pub fn mark(context: &Context, module: &mut melior::ir::Module) -> Result<usize> {
    let annotation = Attribute::parse(context, FULL_UNROLL).ok_or_else(|| {
        Error::stage("loops", format!("cannot parse the attribute {FULL_UNROLL}"))
    })?;
    let mut windows = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if op.name().as_string_ref().as_str() == Ok("scf.for") && is_window_loop(&op) {
            windows.push(op.to_raw());
        }
        WalkResult::Advance
    });
    for &op in &windows {
        // SAFETY: `op` is a live op of `module`, which this function borrows mutably; the name
        // and the attribute outlive the call.
        unsafe {
            mlirOperationSetAttributeByName(
                op,
                StringRef::new("loop_annotation").to_raw(),
                annotation.to_raw(),
            )
        };
    }
    Ok(windows.len())
}
