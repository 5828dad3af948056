//! Reads after a padded placement read the padded tensor, before bufferisation.
//!
//! A tensor `%t` computed into the unpadded part of a larger tensor (a convolution's input
//! with its columns padded to whole tiles, an im2col patch matrix) is placed there as
//!
//! ```text
//! %m = bufferization.materialize_in_destination %t in %part   // %part: a slice of %d
//! %p = tensor.insert_slice (reshapes of %m) into %d
//! ```
//!
//! The fusion stage's empty-tensor elimination points the computation of `%t` at `%part`, so
//! that `%t` is computed in the padded buffer and neither op copies. But One-Shot Bufferize
//! counts both as writes of that buffer, and an op after them that still reads `%t` (the
//! residual add of the next ResNet block reading the block's output, which is also the next
//! convolution's padded input) reads the value from before those writes: a conflict, resolved by
//! computing `%t` into a buffer of its own, copied in before and back after (two copies of
//! every stage-2 to stage-4 block output of ResNet-50, 3% of its time). Those reads are pointed
//! at `%t` cut back out of `%p` (the same slice, the reshapes undone): the buffer then holds
//! what they read, and nothing conflicts.

use super::ir::builder::Builder;
use super::ir::ops::{op_name as name, reassociation, sole_use, tensor_shape};
use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{
        Module, OperationRef, Value, ValueLike,
        operation::{OperationLike, WalkOrder, WalkResult},
    },
};
use mlir_sys::{
    MlirOperation, mlirOpOperandGetNextUse, mlirOpOperandGetOperandNumber, mlirOpOperandGetOwner,
    mlirOpOperandIsNull, mlirOperationGetBlock, mlirOperationGetParentOperation,
    mlirOperationIsBeforeInBlock, mlirOperationSetOperand, mlirValueGetFirstUse,
};

const STAGE: &str = "bufferize";

/// Points the uses of each placed tensor after its placement at the tensor cut back out of
/// the padded one (see the module docs). Returns how many uses it moved.
pub fn reroute(context: &Context, module: &Module) -> Result<usize> {
    let mut materializations = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if name(&op) == "bufferization.materialize_in_destination" && op.result_count() == 1 {
            materializations.push(op.to_raw());
        }
        WalkResult::Advance
    });
    let mut moved = 0;
    for raw in materializations {
        // SAFETY: `raw` is a live op of the module: nothing was erased since the walk.
        let op = unsafe { OperationRef::from_raw(raw) };
        let Some((insert, reshapes)) = placement(&op) else {
            continue;
        };
        let (Ok(source), Ok(placed)) = (op.operand(0), insert.result(0)) else {
            continue;
        };
        let Some(anchor) = insert.next_in_block() else {
            continue;
        };
        let uses = later_uses(source, insert.to_raw());
        if uses.is_empty() {
            continue;
        }
        let builder = Builder {
            stage: STAGE,
            context,
            anchor,
            location: op.location(),
        };
        let slice = cut(&builder, &insert, placed.into())?;
        let value = reshapes
            .iter()
            .rev()
            .try_fold(slice, |value, reshape| undo(&builder, reshape, value))?;
        for (user, index) in uses {
            // SAFETY: `user` is live and comes after the insertion, so after `value`, which
            // has `source`'s type (the reshapes undone in reverse order).
            unsafe { mlirOperationSetOperand(user, index, value.to_raw()) };
            moved += 1;
        }
    }
    Ok(moved)
}

/// The `tensor.insert_slice` with static offsets, sizes and strides that places the
/// materialisation `op`'s result into a larger tensor, through the reshapes between them (the
/// only use of each); `None` if there is no such chain.
fn placement<'c, 'a>(
    op: &OperationRef<'c, 'a>,
) -> Option<(OperationRef<'c, 'a>, Vec<OperationRef<'c, 'a>>)> {
    let mut value: Value = op.result(0).ok()?.into();
    let mut reshapes = Vec::new();
    loop {
        let (user, index) = sole_use(value)?;
        match name(&user).as_str() {
            // Static shapes only: undoing a reshape of symbolic sizes would need them.
            "tensor.collapse_shape" | "tensor.expand_shape"
                if user.operand_count() == 1 && tensor_shape(value).is_some() =>
            {
                value = user.result(0).ok()?.into();
                reshapes.push(user);
            }
            "tensor.insert_slice" if index == 0 && user.operand_count() == 2 => {
                return Some((user, reshapes));
            }
            _ => return None,
        }
    }
}

/// The uses of `value` by ops after `after` in its block (or nested in one), with the
/// operand's index.
fn later_uses(value: Value, after: MlirOperation) -> Vec<(MlirOperation, isize)> {
    let mut uses = Vec::new();
    // SAFETY: `value` is live; a use list ends with a null use; users are live ops.
    unsafe {
        let mut usage = mlirValueGetFirstUse(value.to_raw());
        while !mlirOpOperandIsNull(usage) {
            let user = mlirOpOperandGetOwner(usage);
            if comes_after(user, after) {
                uses.push((user, mlirOpOperandGetOperandNumber(usage) as isize));
            }
            usage = mlirOpOperandGetNextUse(usage);
        }
    }
    uses
}

/// Whether `user`, or the ancestor of it in `op`'s block, comes after `op`.
fn comes_after(user: MlirOperation, op: MlirOperation) -> bool {
    // SAFETY: both are live ops; walking up `user`'s parents ends at a null op.
    unsafe {
        let block = mlirOperationGetBlock(op);
        let mut current = user;
        while !current.ptr.is_null() {
            if mlirOperationGetBlock(current).ptr == block.ptr {
                return current.ptr != op.ptr && mlirOperationIsBeforeInBlock(op, current);
            }
            current = mlirOperationGetParentOperation(current);
        }
        false
    }
}

/// The slice of `placed` that `insert` wrote, as a `tensor.extract_slice`.
fn cut<'c, 'a>(
    builder: &Builder<'c, 'a>,
    insert: &OperationRef<'c, 'a>,
    placed: Value<'c, 'a>,
) -> Result<Value<'c, 'a>> {
    let missing = |what: &str| Error::stage(STAGE, format!("an insert_slice without {what}"));
    let attribute = |key: &str| {
        insert
            .attribute(key)
            .map(|a| a.to_string())
            .map_err(|_| missing(key))
    };
    let ty = insert.operand(0).map_err(|_| missing("a source"))?.r#type();
    builder.build(
        "tensor.extract_slice",
        &[placed],
        ty,
        &[
            ("static_offsets", attribute("static_offsets")?),
            ("static_sizes", attribute("static_sizes")?),
            ("static_strides", attribute("static_strides")?),
            ("operandSegmentSizes", "array<i32: 1, 0, 0, 0>".to_string()),
        ],
        vec![],
    )
}

/// `value`, of `reshape`'s result type, reshaped back to its source type.
fn undo<'c, 'a>(
    builder: &Builder<'c, 'a>,
    reshape: &OperationRef<'c, 'a>,
    value: Value<'c, 'a>,
) -> Result<Value<'c, 'a>> {
    let source = reshape
        .operand(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?;
    let groups = reassociation(reshape)
        .ok_or_else(|| Error::stage(STAGE, "a reshape without reassociation".to_string()))?;
    if name(reshape) == "tensor.collapse_shape" {
        builder.expand(value, &groups, source.r#type(), &[])
    } else {
        builder.collapse(value, &groups, source.r#type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `%t` placed into the unpadded part of a padded tensor through a collapse, read once
    /// before the placement (kept) and once after it, inside a loop (pointed at the slice of
    /// the padded tensor, expanded back).
    #[test]
    fn reads_after_a_placement_read_the_padded_tensor() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let module = Module::parse(
            &context,
            r#"
            func.func @f(%t: tensor<2x3x4xf32>, %d: tensor<2x16xf32>, %n: index) -> (f32, tensor<2x16xf32>, f32) {
              %c0 = arith.constant 0 : index
              %c1 = arith.constant 1 : index
              %before = tensor.extract %t[%c0, %c0, %c0] : tensor<2x3x4xf32>
              %part = tensor.extract_slice %d[0, 0] [2, 12] [1, 1] : tensor<2x16xf32> to tensor<2x12xf32>
              %target = tensor.expand_shape %part [[0], [1, 2]] output_shape [2, 3, 4] : tensor<2x12xf32> into tensor<2x3x4xf32>
              %m = bufferization.materialize_in_destination %t in %target : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
              %flat = tensor.collapse_shape %m [[0], [1, 2]] : tensor<2x3x4xf32> into tensor<2x12xf32>
              %p = tensor.insert_slice %flat into %d[0, 0] [2, 12] [1, 1] : tensor<2x12xf32> into tensor<2x16xf32>
              %sum = scf.for %i = %c0 to %n step %c1 iter_args(%a = %before) -> (f32) {
                %x = tensor.extract %t[%c0, %c1, %i] : tensor<2x3x4xf32>
                %s = arith.addf %a, %x : f32
                scf.yield %s : f32
              }
              return %before, %p, %sum : f32, tensor<2x16xf32>, f32
            }"#,
        )
        .expect("parses");
        assert_eq!(reroute(&context, &module).expect("reroutes"), 1);
        assert!(module.as_operation().verify());
        let text = module.as_operation().to_string();
        let after = text
            .split("tensor.insert_slice")
            .nth(1)
            .expect("the insertion");
        assert!(
            after.contains("tensor.extract_slice %inserted_slice[0, 0] [2, 12] [1, 1]"),
            "{text}"
        );
        assert!(
            after.contains("tensor.expand_shape %extracted_slice_0 [[0], [1, 2]]"),
            "{text}"
        );
        assert!(
            after.contains("tensor.extract %expanded_1[%c0, %c1, %arg3]"),
            "{text}"
        );
        assert!(
            text.contains("tensor.extract %arg0[%c0, %c0, %c0]"),
            "{text}"
        );
    }
}
