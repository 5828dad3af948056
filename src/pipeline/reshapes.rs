//! Expansions that split one size into several dynamic ones (`memref<?x8xf32>` into
//! `memref<?x?x8xf32>`, the rows of a product over batch and sequence back into both): MLIR's
//! `expand-strided-metadata` takes one dynamic size per reassociation group and crashes on
//! more. The lowering emits them for reshapes with symbolic sizes, and the fusion stage's
//! reshape propagation makes more. After bufferization each becomes the view it is: a
//! `memref.reinterpret_cast` of its source's base buffer, with the source's offset, the sizes
//! the expansion names, and strides that run within each group from the source dimension's
//! stride (the group's last size) outwards.

use super::ir::builder::Builder;
use super::ir::ops::{op_name, reassociation};
use crate::error::{Error, Result};
use melior::{
    Context, IrRewriter,
    ir::{
        BlockLike, Identifier, Module, OperationRef, Type, TypeLike, Value, ValueLike,
        attribute::{DenseI32ArrayAttribute, DenseI64ArrayAttribute},
        operation::{OperationBuilder, OperationLike, WalkOrder, WalkResult},
        r#type::{DimSize, MemRefType, ShapedTypeLike},
    },
};
use mlir_sys::mlirMemRefTypeGetStridesAndOffset;

/// The stage whose hook runs this rewrite: its errors name it.
const STAGE: &str = "bufferize";

/// MLIR's marker of a dynamic size, stride or offset in static lists.
const DYNAMIC: i64 = i64::MIN;

/// The sizes of a memref type (`DYNAMIC` for a dynamic one).
fn sizes(ty: MemRefType) -> Vec<i64> {
    (0..ty.rank())
        .map(|i| match ty.dim_size(i) {
            Ok(DimSize::Static(d)) => i64::try_from(d).unwrap_or(DYNAMIC),
            _ => DYNAMIC,
        })
        .collect()
}

/// The strides and offset of a strided memref type (`DYNAMIC` for a dynamic one).
fn strides_and_offset(ty: MemRefType) -> Option<(Vec<i64>, i64)> {
    let raw = TypeLike::to_raw(&ty);
    let mut strides = vec![0; sizes(ty).len()];
    let mut offset = 0;
    // SAFETY: a live memref type; `strides` holds one entry per dimension of it.
    let ok = unsafe {
        mlirMemRefTypeGetStridesAndOffset(raw, strides.as_mut_ptr(), &mut offset).value != 0
    };
    ok.then_some((strides, offset))
}

/// Whether `op` is a `memref.expand_shape` with a reassociation group of two or more dynamic
/// sizes.
fn splits_dynamic(op: &OperationRef) -> bool {
    if op_name(op) != "memref.expand_shape" {
        return false;
    }
    let (Some(groups), Some(result)) = (
        reassociation(op),
        op.result(0)
            .ok()
            .and_then(|r| MemRefType::try_from(r.r#type()).ok()),
    ) else {
        return false;
    };
    let sizes = sizes(result);
    groups.iter().any(|g| {
        g.iter()
            .filter(|&&d| sizes.get(d) == Some(&DYNAMIC))
            .count()
            > 1
    })
}

/// `op` (an expansion, see [`splits_dynamic`]) as a `memref.reinterpret_cast` of its source.
fn view<'c, 'a>(context: &'c Context, op: OperationRef<'c, 'a>) -> Result<Value<'c, 'a>> {
    let missing = |what: &str| Error::stage(STAGE, format!("an expand_shape without {what}"));
    let result: Value = op.result(0).map_err(|_| missing("a result"))?.into();
    let result_type = MemRefType::try_from(result.r#type()).map_err(|_| missing("a memref"))?;
    let source = op.operand(0).map_err(|_| missing("a source"))?;
    let source_type = MemRefType::try_from(source.r#type()).map_err(|_| missing("a memref"))?;
    let groups = reassociation(&op).ok_or_else(|| missing("reassociation groups"))?;
    let (static_strides, static_offset) =
        strides_and_offset(result_type).ok_or_else(|| missing("a strided result"))?;
    let b = Builder {
        context,
        stage: STAGE,
        anchor: op,
        location: op.location(),
    };
    let index = Type::index(context);
    let rank = sizes(source_type).len();
    let element = result_type.element();
    let base_type = Type::parse(context, &format!("memref<{element}>"))
        .ok_or_else(|| missing("a base buffer type"))?;
    let metadata = OperationBuilder::new("memref.extract_strided_metadata", op.location())
        .add_operands(&[source])
        .add_results(&[vec![base_type], vec![index; 1 + 2 * rank]].concat())
        .build()
        .map_err(|e| Error::stage(STAGE, e.to_string()))?;
    let block = op.block().ok_or_else(|| missing("a block"))?;
    let metadata = block.insert_operation_before(op, metadata);
    let field = |i: usize| -> Result<Value<'c, 'a>> {
        Ok(metadata
            .result(i)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?
            .into())
    };
    let constant = |v: i64| {
        b.build(
            "arith.constant",
            &[],
            index,
            &[("value", format!("{v} : index"))],
            vec![],
        )
    };
    // The sizes: static ones from the type, dynamic ones from the operands after the source.
    let static_sizes = sizes(result_type);
    let mut operands = op.operands().skip(1);
    let size_values = static_sizes
        .iter()
        .map(|&s| match s {
            DYNAMIC => operands
                .next()
                .map(Some)
                .ok_or_else(|| missing("its output sizes")),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let size = |d: usize| match size_values[d] {
        Some(v) => Ok(v),
        None => constant(static_sizes[d]),
    };
    // Strides from the innermost dimension of each group outwards.
    let mut strides: Vec<Option<Value>> = vec![None; static_sizes.len()];
    for (j, group) in groups.iter().enumerate() {
        let mut stride = field(2 + rank + j)?;
        for (i, &d) in group.iter().enumerate().rev() {
            strides[d] = Some(stride);
            if i > 0 {
                stride = b.build("arith.muli", &[stride, size(d)?], index, &[], vec![])?;
            }
        }
    }
    let strides = strides
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| missing("a group for every dimension"))?;
    // Each list: the static entries of the result type, the dynamic ones as operands.
    let dynamic = |statics: &[i64], values: &[Value<'c, 'a>]| -> Vec<Value<'c, 'a>> {
        statics
            .iter()
            .zip(values)
            .filter(|(s, _)| **s == DYNAMIC)
            .map(|(_, v)| *v)
            .collect()
    };
    let offsets = dynamic(&[static_offset], &[field(1)?]);
    let size_operands: Vec<Value> = size_values.iter().flatten().copied().collect();
    let stride_operands = dynamic(&static_strides, &strides);
    let array = |values: &[i64]| DenseI64ArrayAttribute::new(context, values).into();
    let count = |values: &[Value]| i32::try_from(values.len()).unwrap_or(i32::MAX);
    let segments = DenseI32ArrayAttribute::new(
        context,
        &[
            1,
            count(&offsets),
            count(&size_operands),
            count(&stride_operands),
        ],
    );
    let cast = OperationBuilder::new("memref.reinterpret_cast", op.location())
        .add_operands(&[field(0)?])
        .add_operands(&offsets)
        .add_operands(&size_operands)
        .add_operands(&stride_operands)
        .add_results(&[result.r#type()])
        .add_attributes(&[
            (
                Identifier::new(context, "static_offsets"),
                array(&[static_offset]),
            ),
            (
                Identifier::new(context, "static_sizes"),
                array(&static_sizes),
            ),
            (
                Identifier::new(context, "static_strides"),
                array(&static_strides),
            ),
            (
                Identifier::new(context, "operandSegmentSizes"),
                segments.into(),
            ),
        ])
        .build()
        .map_err(|e| Error::stage(STAGE, e.to_string()))?;
    let cast = block.insert_operation_before(op, cast);
    Ok(cast
        .result(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?
        .into())
}

/// Rewrites every expansion of `module` that splits a size into several dynamic ones (see the
/// module documentation); returns how many it rewrote.
pub fn split_dynamic_expansions(context: &Context, module: &mut Module) -> Result<usize> {
    let mut found = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if splits_dynamic(&op) {
            found.push(op.to_raw());
        }
        WalkResult::Advance
    });
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    for raw in &found {
        // SAFETY: `raw` is a live op of `module`, found by the walk above; only other ops
        // were erased since.
        let op = unsafe { OperationRef::from_raw(*raw) };
        let value = view(context, op)?;
        let old = op
            .result(0)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?;
        rewriter.replace_all_uses_with(old.into(), value);
        rewriter.erase_op(op);
    }
    Ok(found.len())
}
