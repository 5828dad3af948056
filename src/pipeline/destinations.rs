//! Destinations built before the tensors placed in them are computed, before fusion.
//!
//! A tensor `%t` placed into part of a larger one (`tensor.insert_slice %t into %d`, or
//! `bufferization.materialize_in_destination %t in %part`) is computed in place by the fusion
//! stage's `eliminate-empty-tensors`: the empty tensor `%t` is computed into becomes that part
//! of `%d`. MLIR builds the part at the empty tensor, or right after the values it needs, and
//! gives up when neither comes before the empty tensor's first use. The lowering builds a
//! destination where its consumer is lowered, after its producer: the padded canvas of a
//! convolution after the max pool that feeds it (whose -inf init is filled before the pool),
//! the padded rows of a fused attention after the heads' transposes, the canvas of a dense
//! layer after the parts of its concatenated input. Each of those was computed into a buffer
//! of its own and copied into the destination (serial `memmove`s on the master thread).
//!
//! Here the ops that build such a destination move up to just before that empty tensor, when
//! they are only its construction: an allocation or empty tensor, constants, fills, slices,
//! reshapes and index arithmetic, all in the placement's block. A destination holding a value
//! computed after that empty tensor stays where it is (moving it would move a computation).
//!
//! A materialisation's destination has the placed tensor's type, so every use of the empty
//! tensor becomes a use of the destination: MLIR's elimination replaces only the use on the
//! chain of destinations, and a concatenation's parts computed into slices of its empty
//! tensor would be left with a buffer of their own. Materialisations go first: a
//! concatenation materialised in a canvas is then the canvas when its parts' insertions are
//! looked at, and each part's destination (the canvas with the parts before it) moves above
//! that part's computation.

use super::ir::ops::{computed_into, holder_in, op_name};
use crate::error::Result;
use melior::ir::{
    Module, OperationRef,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use mlir_sys::{
    MlirOperation, MlirValue, mlirOpResultGetOwner, mlirOperationGetBlock,
    mlirOperationGetNumOperands, mlirOperationGetOperand, mlirOperationGetResult,
    mlirOperationIsBeforeInBlock, mlirOperationMoveBefore, mlirTypeEqual, mlirValueGetType,
    mlirValueIsAOpResult, mlirValueReplaceAllUsesOfWith,
};
use std::collections::HashSet;

/// Ops that only build a destination: moved above the empty tensor with it.
fn builds_destination(name: &str) -> bool {
    matches!(
        name,
        "bufferization.alloc_tensor"
            | "tensor.empty"
            | "linalg.fill"
            | "tensor.extract_slice"
            | "tensor.insert_slice"
            | "tensor.expand_shape"
            | "tensor.collapse_shape"
            | "tensor.dim"
            | "affine.apply"
            | "affine.min"
            | "affine.max"
    ) || name.starts_with("arith.")
}

/// Moves the construction of each placement's destination above the empty tensor the placed
/// tensor is computed into (see the module docs). Returns how many destinations moved.
pub fn hoist(module: &Module) -> Result<usize> {
    let mut placements = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if matches!(
            op_name(&op).as_str(),
            "tensor.insert_slice" | "bufferization.materialize_in_destination"
        ) && op.operand_count() >= 2
        {
            placements.push(op.to_raw());
        }
        WalkResult::Advance
    });
    // Materialisations first: a concatenation materialised in a canvas becomes the canvas'
    // part before its parts' insertions are looked at, whose destinations then lead to it.
    placements.sort_by_cached_key(|&op| {
        // SAFETY: `op` is a live op collected above.
        op_name(&unsafe { OperationRef::from_raw(op) }) == "tensor.insert_slice"
    });
    let mut moved = 0;
    for placement in placements {
        // SAFETY: `placement` is a live op (ops are only moved, never erased, here), with a
        // source and a destination operand.
        if unsafe { hoist_destination(placement) } {
            moved += 1;
        }
    }
    Ok(moved)
}

/// Moves the ops building `placement`'s destination before the empty tensor its source is
/// computed into; whether it moved any.
///
/// # Safety
/// `placement` is a live op with at least two operands.
unsafe fn hoist_destination(placement: MlirOperation) -> bool {
    // SAFETY: `placement` is live with two operands; the ops reached from it are live.
    unsafe {
        let source = mlirOperationGetOperand(placement, 0);
        let destination = mlirOperationGetOperand(placement, 1);
        let Some(empty) = empty_root(source) else {
            return false;
        };
        if !mlirValueIsAOpResult(destination) {
            return false;
        }
        let block = mlirOperationGetBlock(placement);
        let built = mlirOpResultGetOwner(destination);
        let Some(anchor) = holder_in(empty, block) else {
            return false;
        };
        if mlirOperationGetBlock(built).ptr != block.ptr {
            return false;
        }
        let moved = !mlirOperationIsBeforeInBlock(built, anchor);
        if moved {
            let Some(mut construction) = construction(built, anchor) else {
                return false;
            };
            construction.sort_by(|&a, &b| {
                if a.ptr == b.ptr {
                    std::cmp::Ordering::Equal
                } else if mlirOperationIsBeforeInBlock(a, b) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            });
            for op in construction {
                mlirOperationMoveBefore(op, anchor);
            }
        }
        // A materialisation's destination is a tensor of the source's type: every use of the
        // empty tensor becomes a use of it, the slices a concatenation's parts are computed
        // into included (MLIR's elimination replaces only the use on the chain).
        let empty_value = mlirOperationGetResult(empty, 0);
        let whole = op_name(&OperationRef::from_raw(placement))
            == "bufferization.materialize_in_destination"
            && mlirTypeEqual(mlirValueGetType(empty_value), mlirValueGetType(destination));
        if whole {
            mlirValueReplaceAllUsesOfWith(empty_value, destination);
        }
        moved || whole
    }
}

/// The ops of `built`'s block from `anchor` on that `built` depends on, `built` included, when
/// each only builds a destination (and `anchor` is not among them); `None` otherwise.
///
/// # Safety
/// `built` and `anchor` are live ops of one block.
unsafe fn construction(built: MlirOperation, anchor: MlirOperation) -> Option<Vec<MlirOperation>> {
    let mut ops = Vec::new();
    let mut seen = HashSet::new();
    let mut pending = vec![built];
    // SAFETY: every op reached is a live op of the block: an operand's defining op in the
    // block, checked before it is pushed.
    unsafe {
        let block = mlirOperationGetBlock(anchor);
        while let Some(op) = pending.pop() {
            if !seen.insert(op.ptr as usize) {
                continue;
            }
            if op.ptr == anchor.ptr || !builds_destination(&op_name(&OperationRef::from_raw(op))) {
                return None;
            }
            ops.push(op);
            for i in 0..mlirOperationGetNumOperands(op) {
                let value = mlirOperationGetOperand(op, i);
                if !mlirValueIsAOpResult(value) {
                    continue;
                }
                let producer = mlirOpResultGetOwner(value);
                if mlirOperationGetBlock(producer).ptr == block.ptr
                    && !mlirOperationIsBeforeInBlock(producer, anchor)
                {
                    pending.push(producer);
                }
            }
        }
    }
    Some(ops)
}

/// The `tensor.empty` that `value` is computed into: followed back through the destinations
/// structured ops, loops and inserted slices compute into, as MLIR's elimination does (never
/// through a slice or reshape); `None` if the chain ends elsewhere.
///
/// # Safety
/// `value` is a live value.
unsafe fn empty_root(mut value: MlirValue) -> Option<MlirOperation> {
    // SAFETY: `value` is live, and so is each value reached from it. Each step goes to an
    // operand of the op defining the value, so the chain ends (a concatenation's is as long
    // as its parts are many).
    unsafe {
        loop {
            if !mlirValueIsAOpResult(value) {
                return None;
            }
            let op = mlirOpResultGetOwner(value);
            if op_name(&OperationRef::from_raw(op)) == "tensor.empty" {
                return Some(op);
            }
            value = computed_into(value)?;
        }
    }
}
