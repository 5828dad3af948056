//! One `tensor.empty` per use, before bufferisation.
//!
//! `tensor.empty` has no effects, so CSE merges every empty tensor of one type into one value:
//! in DenseNet-121 one `tensor<32xf32>` became the destination of 600 batch norms' per-channel
//! scales, and one `tensor<128x256xf32>` the output of 24 convolutions. One-Shot Bufferize's
//! analysis then sees every result written into that destination as an alias of every other
//! and checks each write against each read of the whole set: it took 10-15 s of DenseNet-121's
//! compile at 224 x 224, and grew with about the sixth power of a dense block's length (2.2 s
//! at 24 layers, 144 s at 48).
//!
//! A use keeps the empty tensor an operand of the same op computes into already (an epilogue
//! written over the product it reads): there the shared buffer is the in-place update the
//! analysis would choose, and a copy of its own would cost an allocation. Every other use gets
//! a copy of its own: where the shared buffer was still live, the analysis allocated a new one
//! anyway, and a buffer freed before it is handed out again by the kernels' allocator
//! (`jit::alloc`, which keeps freed blocks by size class).

use super::ir::ops::{computed_into, for_each_result_use, holder_in, op_name};
use crate::error::Result;
use melior::ir::{
    Module, OperationRef,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use mlir_sys::{
    MlirBlock, MlirValue, mlirBlockGetFirstOperation, mlirBlockInsertOwnedOperationBefore,
    mlirOpResultGetOwner, mlirOperationClone, mlirOperationGetBlock, mlirOperationGetNextInBlock,
    mlirOperationGetNumOperands, mlirOperationGetOperand, mlirOperationGetResult,
    mlirOperationSetOperand, mlirValueIsAOpResult,
};
use std::collections::HashMap;

/// Gives every use of an empty tensor a copy of its own but the first and those that keep
/// it (see the module docs). A copy is placed before the op in the empty tensor's block that
/// holds the use (the user or the loop around it), so that each buffer is allocated where it
/// was. Returns how many copies it made.
pub fn split(module: &Module) -> Result<usize> {
    let mut shared = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if op_name(&op) == "tensor.empty" {
            let mut uses = Vec::new();
            // SAFETY: `op` is a live op of the module being walked.
            unsafe { for_each_result_use(op.to_raw(), |_, user, index| uses.push((user, index))) };
            if uses.len() > 1 {
                shared.push((op.to_raw(), uses));
            }
        }
        WalkResult::Advance
    });
    let mut copies = 0;
    for (empty, mut uses) in shared {
        // SAFETY: `empty` and the users are live ops of the module (nothing was erased since
        // the walk), each user lies within `empty`'s block (the empty tensor dominates it),
        // each copy is inserted into that block and owned by it, and it replaces an operand
        // by a value of the same type.
        unsafe {
            let block = mlirOperationGetBlock(empty);
            let order = positions(block);
            let at =
                |user| holder_in(user, block).and_then(|h| order.get(&(h.ptr as usize)).copied());
            uses.sort_by_key(|&(user, _)| at(user));
            // The empty tensors given out so far (the original first).
            let mut given = vec![mlirOperationGetResult(empty, 0).ptr as usize];
            for &(user, index) in &uses[1..] {
                let kept = (0..mlirOperationGetNumOperands(user))
                    .filter(|&i| i != index)
                    .find_map(|i| destination_root(mlirOperationGetOperand(user, i), &given));
                let value = match (kept, holder_in(user, block)) {
                    (Some(value), _) => value,
                    (None, None) => continue,
                    (None, Some(holder)) => {
                        let copy = mlirOperationClone(empty);
                        mlirBlockInsertOwnedOperationBefore(block, holder, copy);
                        copies += 1;
                        let value = mlirOperationGetResult(copy, 0);
                        given.push(value.ptr as usize);
                        value
                    }
                };
                mlirOperationSetOperand(user, index, value);
            }
        }
    }
    Ok(copies)
}

/// The empty tensor among `given` that `value` is computed into, followed back through the
/// tensors ops compute into ([`computed_into`]) and views (their source), a few steps at most;
/// `None` for an empty tensor itself (two outputs of one op cannot share a buffer).
///
/// # Safety
/// `value` is a live value.
unsafe fn destination_root(mut value: MlirValue, given: &[usize]) -> Option<MlirValue> {
    for step in 0..8 {
        if step > 0 && given.contains(&(value.ptr as usize)) {
            return Some(value);
        }
        // SAFETY: `value` is live, so is the op defining it.
        unsafe {
            if !mlirValueIsAOpResult(value) {
                return None;
            }
            let op = mlirOpResultGetOwner(value);
            value = match op_name(&OperationRef::from_raw(op)).as_str() {
                "tensor.extract_slice" | "tensor.expand_shape" | "tensor.collapse_shape" => {
                    mlirOperationGetOperand(op, 0)
                }
                _ => computed_into(value)?,
            };
        }
    }
    None
}

/// The position of each op of `block`, by raw pointer.
///
/// # Safety
/// `block` is a live block.
unsafe fn positions(block: MlirBlock) -> HashMap<usize, usize> {
    let mut order = HashMap::new();
    // SAFETY: `block` is live; its op list ends with a null op.
    unsafe {
        let mut op = mlirBlockGetFirstOperation(block);
        while !op.ptr.is_null() {
            order.insert(op.ptr as usize, order.len());
            op = mlirOperationGetNextInBlock(op);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use melior::ir::{BlockLike, RegionLike};

    /// Three uses of one empty tensor: a fill (the first use, which keeps it), an epilogue that
    /// reads the product computed into it (keeps it: the in-place update) and an unrelated op in
    /// a loop (gets a copy, placed before the loop).
    #[test]
    fn uses_get_their_own_empty_tensors_unless_computed_into_it() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let module = Module::parse(
            &context,
            r#"
            #id = affine_map<(d0) -> (d0)>
            func.func @f(%a: tensor<8xf32>, %n: index) -> (tensor<8xf32>, tensor<8xf32>) {
              %cst = arith.constant 0.0 : f32
              %c0 = arith.constant 0 : index
              %c1 = arith.constant 1 : index
              %e = tensor.empty() : tensor<8xf32>
              %zero = linalg.fill ins(%cst : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
              %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
                  ins(%a, %zero : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
              ^bb0(%x: f32, %y: f32, %o: f32):
                %s = arith.addf %x, %y : f32
                linalg.yield %s : f32
              } -> tensor<8xf32>
              %looped = scf.for %i = %c0 to %n step %c1 iter_args(%t = %a) -> (tensor<8xf32>) {
                %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
                    ins(%t : tensor<8xf32>) outs(%e : tensor<8xf32>) {
                ^bb0(%x: f32, %o: f32):
                  %m = arith.negf %x : f32
                  linalg.yield %m : f32
                } -> tensor<8xf32>
                scf.yield %neg : tensor<8xf32>
              }
              return %sum, %looped : tensor<8xf32>, tensor<8xf32>
            }"#,
        )
        .expect("parses");
        assert_eq!(split(&module).expect("splits"), 1);
        assert!(module.as_operation().verify());
        let function = module.body().first_operation().expect("the function");
        let block = function.region(0).unwrap().first_block().unwrap();
        let mut names = Vec::new();
        let mut next = block.first_operation();
        while let Some(op) = next {
            names.push(op_name(&op));
            next = op.next_in_block();
        }
        let at = |name: &str, from: usize| {
            from + names[from..].iter().position(|n| n == name).expect(name)
        };
        let first = at("tensor.empty", 0);
        let copy = at("tensor.empty", first + 1);
        assert!(at("linalg.generic", first) < copy, "{names:?}");
        assert_eq!(at("scf.for", first), copy + 1, "{names:?}");
        let empties = names.iter().filter(|n| *n == "tensor.empty").count();
        assert_eq!(empties, 2, "{names:?}");
    }
}
