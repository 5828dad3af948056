//! Reads of pair-packed operands as one vector. A pairs product (`fxmlir.mm_pairs`, see
//! [`super::schedule::Element::Bf16Pairs`]) reads its right operand, `k x n x 2` bf16, as
//! `vector<1x16x2xbf16>`: sixteen columns of one pair each, 64 contiguous bytes, which the dot
//! product takes as one `vector<32xbf16>`. The vector lowering knows no such read of several
//! dimensions at once: it unrolls it into sixteen reads of one pair, which LLVM then assembles
//! lane by lane, four times the instructions of the dot products themselves. Upstream MLIR has
//! the rewrite (flattening contiguous transfers) only as a test pass, so it is done here, after
//! the schedule stage: the read becomes a one-dimensional read of the operand with its last two
//! dimensions collapsed, shaped back for its users.

use super::ir::builder::Builder;
use super::ir::maps::{identity_map, is_identity_of, map_of};
use super::ir::ops::{all_true, constant, op_name, tensor_shape, vector_shape};
use crate::error::{Error, Result};
use melior::{
    Context, IrRewriter,
    ir::{
        Module, OperationRef, Type, Value, ValueLike,
        operation::{OperationLike, WalkOrder, WalkResult},
    },
};

/// The stage whose hook runs this module's rewrites: its errors name it.
const STAGE: &str = "schedule";

/// `[true, ..., true]` of `rank` entries, as `in_bounds` prints.
fn all_in_bounds(rank: usize) -> String {
    format!("[{}]", vec!["true"; rank].join(", "))
}

/// A read to flatten: `vector.transfer_read` of a static bf16 tensor whose last dimension is
/// one pair, in bounds, without a mask or permutation, of a vector `1 x ... x 1 x w x 2` that
/// starts at the pair's first element. Returns the source's shape.
fn pair_read(op: &OperationRef) -> Option<Vec<i64>> {
    if op_name(op) != "vector.transfer_read" {
        return None;
    }
    let (shape, element) = tensor_shape(op.operand(0).ok()?)?;
    let rank = shape.len();
    if element != "bf16" || rank < 2 || shape[rank - 1] != 2 || op.operand_count() != rank + 2 {
        return None;
    }
    let (vector, _) = vector_shape(op.result(0).ok()?.r#type())?;
    let leading_units = vector.len() == rank && vector[..rank - 2].iter().all(|&d| d == 1);
    let in_place = op
        .attribute("permutation_map")
        .ok()
        .and_then(map_of)
        .is_some_and(|m| is_identity_of(m, rank))
        && op.attribute("in_bounds").is_ok_and(|b| all_true(b, rank));
    (leading_units
        && vector[rank - 1] == 2
        && in_place
        && constant(op.operand(rank).ok()?) == Some(0))
    .then_some(shape)
}

/// Rewrites `read` (see [`pair_read`]) of a tensor of `shape`.
fn flatten<'c, 'a>(context: &'c Context, read: OperationRef<'c, 'a>, shape: &[i64]) -> Result<()> {
    let rank = shape.len();
    let operand = |i: usize| {
        read.operand(i)
            .map_err(|e| Error::stage(STAGE, e.to_string()))
    };
    let builder = Builder {
        stage: STAGE,
        context,
        anchor: read,
        location: read.location(),
    };
    let mut flat_shape = shape[..rank - 1].to_vec();
    flat_shape[rank - 2] *= 2;
    let source = builder.reshape(operand(0)?, &flat_shape)?;
    let index_type = Type::index(context);
    let two = builder.build(
        "arith.constant",
        &[],
        index_type,
        &[("value", "2 : index".to_string())],
        vec![],
    )?;
    let column = builder.build(
        "arith.muli",
        &[operand(rank - 1)?, two],
        index_type,
        &[],
        vec![],
    )?;
    let mut operands = vec![source];
    for i in 1..rank - 1 {
        operands.push(operand(i)?);
    }
    operands.push(column);
    operands.push(operand(rank + 1)?);
    let old: Value = read
        .result(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?
        .into();
    let (vector, element) = vector_shape(old.r#type())
        .ok_or_else(|| Error::stage(STAGE, "a read of no vector".to_string()))?;
    let mut flat_vector = vector[..rank - 1].to_vec();
    flat_vector[rank - 2] *= 2;
    let dims: String = flat_vector.iter().map(|d| format!("{d}x")).collect();
    let flat_type = Type::parse(context, &format!("vector<{dims}{element}>"))
        .ok_or_else(|| Error::stage(STAGE, format!("a vector of {flat_vector:?}")))?;
    let flat = builder.build(
        "vector.transfer_read",
        &operands,
        flat_type,
        &[
            ("permutation_map", identity_map(rank - 1)),
            ("in_bounds", all_in_bounds(rank - 1)),
            (
                "operandSegmentSizes",
                format!("array<i32: 1, {}, 1, 0>", rank - 1),
            ),
        ],
        vec![],
    )?;
    let back = builder.build("vector.shape_cast", &[flat], old.r#type(), &[], vec![])?;
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    rewriter.replace_all_uses_with(old, back);
    rewriter.erase_op(read);
    Ok(())
}

/// Flattens every pair read of `module`; returns how many.
pub fn flatten_reads(context: &Context, module: &Module) -> Result<usize> {
    let mut reads = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if let Some(shape) = pair_read(&op) {
            reads.push((op.to_raw(), shape));
        }
        WalkResult::Advance
    });
    for (raw, shape) in &reads {
        // SAFETY: `raw` was collected from the live module just above, and each read is
        // rewritten (and erased) once, after the walk.
        let read = unsafe { OperationRef::from_raw(*raw) };
        flatten(context, read, shape)?;
    }
    Ok(reads.len())
}
