//! Queries of single ops, values and types: an op's name, the static shape of a tensor,
//! vector or memref value, an index constant's value, a value's sole use.

use melior::ir::{
    Attribute, OperationRef, Type, Value, ValueLike,
    attribute::{ArrayAttribute, AttributeLike, DenseI32ArrayAttribute, IntegerAttribute},
    operation::{OperationLike, OperationResult},
    r#type::{DimSize, RankedTensorType, ShapedTypeLike},
    r#type::{MemRefType, TypeLike},
};
use mlir_sys::{
    MlirBlock, MlirOperation, MlirValue, mlirAffineMapAttrGetValue, mlirAffineMapIsIdentity,
    mlirAttributeIsAAffineMap, mlirAttributeIsABool, mlirBoolAttrGetValue,
    mlirLLVMPointerTypeGetAddressSpace, mlirMemRefTypeGetLayout, mlirMemRefTypeGetMemorySpace,
    mlirOpOperandGetNextUse, mlirOpOperandGetOperandNumber, mlirOpOperandGetOwner,
    mlirOpOperandIsNull, mlirOpResultGetOwner, mlirOpResultGetResultNumber, mlirOperationGetBlock,
    mlirOperationGetNumOperands, mlirOperationGetNumResults, mlirOperationGetOperand,
    mlirOperationGetParentOperation, mlirOperationGetResult, mlirShapedTypeGetDimSize,
    mlirShapedTypeGetElementType, mlirShapedTypeGetRank, mlirTypeIsALLVMPointerType,
    mlirTypeIsAVector, mlirValueGetFirstUse, mlirValueIsAOpResult, mlirVectorTypeIsScalable,
};

pub fn op_name(op: &OperationRef) -> String {
    op.name().as_string_ref().as_str().unwrap_or("").to_string()
}

/// Static shape and element type of a ranked tensor value.
pub fn tensor_shape(value: Value) -> Option<(Vec<i64>, String)> {
    let tensor = RankedTensorType::try_from(value.r#type()).ok()?;
    Some((static_shape(&tensor)?, tensor.element().to_string()))
}

/// The sizes of a ranked tensor value, `None` for a dynamic one.
pub fn tensor_dims(value: Value) -> Option<Vec<Option<i64>>> {
    type_sizes(value.r#type())
}

/// The sizes of a ranked tensor or memref type, `None` for a dynamic one.
pub fn type_sizes(ty: Type) -> Option<Vec<Option<i64>>> {
    match RankedTensorType::try_from(ty) {
        Ok(tensor) => shaped_sizes(&tensor),
        Err(_) => shaped_sizes(&MemRefType::try_from(ty).ok()?),
    }
}

fn shaped_sizes<'c>(shaped: &impl ShapedTypeLike<'c>) -> Option<Vec<Option<i64>>> {
    (0..shaped.rank())
        .map(|i| match shaped.dim_size(i).ok()? {
            DimSize::Static(d) => Some(i64::try_from(d).ok()),
            DimSize::Dynamic => Some(None),
        })
        .collect()
}

/// The sizes (`None` for a dynamic one) and element type of a ranked tensor value.
pub fn tensor_sizes(value: Value) -> Option<(Vec<Option<i64>>, String)> {
    let tensor = RankedTensorType::try_from(value.r#type()).ok()?;
    Some((tensor_dims(value)?, tensor.element().to_string()))
}

/// The sizes of a shaped type (tensor or memref); `None` if one is dynamic.
pub fn static_shape<'c>(shaped: &impl ShapedTypeLike<'c>) -> Option<Vec<i64>> {
    (0..shaped.rank())
        .map(|i| match shaped.dim_size(i).ok()? {
            DimSize::Static(d) => i64::try_from(d).ok(),
            DimSize::Dynamic => None,
        })
        .collect()
}

pub fn raw_value(value: Value) -> usize {
    value.to_raw().ptr as usize
}

/// The shape of a fixed-size vector type of rank one or more (`vector<1x16x2xbf16>` →
/// `[1, 16, 2]`) and its element.
pub fn vector_shape(ty: Type) -> Option<(Vec<i64>, String)> {
    let raw = ty.to_raw();
    // SAFETY: a live type; shapes are read only from a vector type, within its rank.
    unsafe {
        if !mlirTypeIsAVector(raw) || mlirVectorTypeIsScalable(raw) {
            return None;
        }
        let rank = isize::try_from(mlirShapedTypeGetRank(raw)).ok()?;
        let dims = (0..rank)
            .map(|d| mlirShapedTypeGetDimSize(raw, d))
            .collect::<Vec<_>>();
        let element = Type::from_raw(mlirShapedTypeGetElementType(raw));
        (rank > 0).then(|| (dims, element.to_string()))
    }
}

/// Whether a memref type has a layout other than the identity or a memory space: a view
/// (`strided<…>`), not a plain row-major buffer.
pub fn has_layout(ty: MemRefType) -> bool {
    let raw = ty.to_raw();
    // SAFETY: a live memref type; its layout is an attribute, read as a map only when it is one.
    unsafe {
        let layout = mlirMemRefTypeGetLayout(raw);
        let identity = mlirAttributeIsAAffineMap(layout)
            && mlirAffineMapIsIdentity(mlirAffineMapAttrGetValue(layout));
        !identity || !mlirMemRefTypeGetMemorySpace(raw).ptr.is_null()
    }
}

/// Whether `ty` is `!llvm.ptr`: an LLVM pointer in the default address space.
pub fn is_pointer(ty: Type) -> bool {
    let raw = ty.to_raw();
    // SAFETY: a live type; the address space is read only from a pointer type.
    unsafe { mlirTypeIsALLVMPointerType(raw) && mlirLLVMPointerTypeGetAddressSpace(raw) == 0 }
}

/// Whether `attribute` is an array of `len` booleans, all true (`in_bounds = [true, true]`).
pub fn all_true(attribute: Attribute, len: usize) -> bool {
    ArrayAttribute::try_from(attribute).is_ok_and(|array| {
        array.len() == len
            && (0..len).all(|i| {
                array.element(i).is_ok_and(|b| {
                    // SAFETY: a live attribute, read as a bool only when it is one.
                    unsafe { mlirAttributeIsABool(b.to_raw()) && mlirBoolAttrGetValue(b.to_raw()) }
                })
            })
    })
}

/// The reassociation groups of a `collapse_shape` or `expand_shape` (tensor or memref): for
/// each dimension of its collapsed side, the dimensions of its expanded side it groups.
pub fn reassociation(op: &OperationRef) -> Option<Vec<Vec<usize>>> {
    let groups = ArrayAttribute::try_from(op.attribute("reassociation").ok()?).ok()?;
    (0..groups.len())
        .map(|g| {
            let group = ArrayAttribute::try_from(groups.element(g).ok()?).ok()?;
            (0..group.len())
                .map(|i| {
                    let d = IntegerAttribute::try_from(group.element(i).ok()?).ok()?;
                    usize::try_from(d.value()).ok()
                })
                .collect()
        })
        .collect()
}

/// The constant an `arith.constant` of integer or index type defines.
pub fn constant(value: Value) -> Option<i64> {
    let owner = result_owner(value)?;
    if owner.name().as_string_ref().as_str() != Ok("arith.constant") {
        return None;
    }
    IntegerAttribute::try_from(owner.attribute("value").ok()?)
        .ok()
        .map(|a| a.value())
}

/// The only use of `value`: its user and the operand's index; `None` for none or several.
pub fn sole_use<'c, 'a>(value: Value<'c, 'a>) -> Option<(OperationRef<'c, 'a>, usize)> {
    // SAFETY: `value` is live; a use list ends with a null use; the owner of a use is a live op.
    unsafe {
        let first = mlirValueGetFirstUse(value.to_raw());
        if mlirOpOperandIsNull(first) || !mlirOpOperandIsNull(mlirOpOperandGetNextUse(first)) {
            return None;
        }
        let user = OperationRef::from_raw(mlirOpOperandGetOwner(first));
        Some((user, mlirOpOperandGetOperandNumber(first) as usize))
    }
}

/// Whether `ancestor` is `op` or contains it.
pub fn within(op: MlirOperation, ancestor: MlirOperation) -> bool {
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

/// The op defining `value`; `None` for a block argument. (Checked first: melior's failed
/// conversion prints the value, and printing a block argument numbers its whole function.)
pub fn result_owner<'c, 'a>(value: Value<'c, 'a>) -> Option<OperationRef<'c, 'a>> {
    value
        .is_operation_result()
        .then(|| OperationResult::try_from(value).ok())
        .flatten()
        .map(|r| r.owner())
}

/// How many uses the results of `op` have.
pub fn use_count(op: &OperationRef) -> usize {
    let mut count = 0;
    // SAFETY: `op` is live.
    unsafe { for_each_result_use(op.to_raw(), |_, _, _| count += 1) };
    count
}

/// Calls `f` on every use of every result of `op`: the user and the operand's index.
///
/// # Safety
/// `op` is a live op.
pub unsafe fn for_each_result_use(
    op: MlirOperation,
    mut f: impl FnMut(usize, MlirOperation, isize),
) {
    // SAFETY: indices are within the op's count; a use list ends with a null use.
    unsafe {
        for i in 0..mlirOperationGetNumResults(op) {
            let mut usage = mlirValueGetFirstUse(mlirOperationGetResult(op, i));
            while !mlirOpOperandIsNull(usage) {
                f(
                    i as usize,
                    mlirOpOperandGetOwner(usage),
                    mlirOpOperandGetOperandNumber(usage) as isize,
                );
                usage = mlirOpOperandGetNextUse(usage);
            }
        }
    }
}

/// The tensor the op result `value` is computed into (its buffer, once bufferised): a
/// structured op's init, an inserted slice's destination, a loop's initial value; `None` for
/// other ops and block arguments.
///
/// # Safety
/// `value` is a live value.
pub unsafe fn computed_into(value: MlirValue) -> Option<MlirValue> {
    // SAFETY: `value` is live, so is the op defining it; operand indices are checked.
    unsafe {
        if !mlirValueIsAOpResult(value) {
            return None;
        }
        let op = mlirOpResultGetOwner(value);
        let result = mlirOpResultGetResultNumber(value) as isize;
        let operands = mlirOperationGetNumOperands(op);
        let name = op_name(&OperationRef::from_raw(op));
        let operand = match name.as_str() {
            "tensor.insert_slice" => 1,
            "scf.for" => 3 + result,
            "scf.forall" => operands - mlirOperationGetNumResults(op) + result,
            _ if name.starts_with("linalg.") => {
                let segments = OperationRef::from_raw(op)
                    .attribute("operandSegmentSizes")
                    .ok()
                    .and_then(|a| DenseI32ArrayAttribute::try_from(a).ok())?;
                segments.element(0).ok()? as isize + result
            }
            _ => return None,
        };
        (0..operands)
            .contains(&operand)
            .then(|| mlirOperationGetOperand(op, operand))
    }
}

/// `op` or the ancestor of it that lies in `block`; `None` if `op` is not within `block`.
///
/// # Safety
/// `op` is a live op.
pub unsafe fn holder_in(op: MlirOperation, block: MlirBlock) -> Option<MlirOperation> {
    let mut current = op;
    // SAFETY: `op` is live; walking up its parents ends at a null op.
    unsafe {
        while !current.ptr.is_null() {
            if mlirOperationGetBlock(current).ptr == block.ptr {
                return Some(current);
            }
            current = mlirOperationGetParentOperation(current);
        }
    }
    None
}
