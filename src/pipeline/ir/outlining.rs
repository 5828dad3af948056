//! Moving a group of ops into a private function of its own, called where they were: the
//! values the group uses from outside become arguments (constants are cloned in), the
//! arguments whose buffers overlap no other are recorded for LLVM's `noalias` ([`NOALIAS`]).
//! The `outline` stage outlines every computation this way; the schedule isolates products.

use super::items;
use super::ops::{for_each_result_use, op_name, result_owner};
use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{
        Attribute, Block, BlockLike, BlockRef, Identifier, Module, OperationRef, Region,
        RegionLike, Type, Value, ValueLike,
        attribute::{FlatSymbolRefAttribute, StringAttribute, TypeAttribute},
        block::BlockArgument,
        operation::{OperationLike, WalkOrder, WalkResult},
        r#type::{FunctionType, MemRefType, ShapedTypeLike, TypeLike},
    },
};
use mlir_sys::{
    MlirOperation, MlirValue, mlirBlockGetArgument, mlirBlockGetNextInRegion,
    mlirBlockGetNumArguments, mlirOperationClone, mlirOperationGetNumOperands,
    mlirOperationGetNumRegions, mlirOperationGetNumResults, mlirOperationGetOperand,
    mlirOperationGetParentOperation, mlirOperationGetRegion, mlirOperationGetResult,
    mlirOperationMoveBefore, mlirOperationSetOperand, mlirRegionGetFirstBlock,
};
use std::collections::{HashMap, HashSet};

/// Outlining is the `outline` stage's work (the schedule's isolation of products too, whose
/// failures skip a stage all the same): its errors name that stage.
const STAGE: &str = "outline";

pub fn key(value: MlirValue) -> usize {
    value.ptr as usize
}

pub fn op_key(op: MlirOperation) -> usize {
    op.ptr as usize
}

/// Calls `f` on every result of `op` and every argument of the blocks of its regions.
///
/// # Safety
/// `op` is a live operation.
pub unsafe fn for_each_definition(op: MlirOperation, mut f: impl FnMut(MlirValue)) {
    // SAFETY: indices are within the op's counts; blocks are walked to the region's end.
    unsafe {
        for i in 0..mlirOperationGetNumResults(op) {
            f(mlirOperationGetResult(op, i));
        }
        for r in 0..mlirOperationGetNumRegions(op) {
            let mut block = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r));
            while !block.ptr.is_null() {
                for a in 0..mlirBlockGetNumArguments(block) {
                    f(mlirBlockGetArgument(block, a));
                }
                block = mlirBlockGetNextInRegion(block);
            }
        }
    }
}

/// Calls `f` on every operand of every op in `group`, nested ops included, in order.
pub fn for_each_use(group: &[OperationRef], mut f: impl FnMut(MlirOperation, isize, MlirValue)) {
    for op in group {
        op.walk(WalkOrder::PreOrder, |nested| {
            let raw = nested.to_raw();
            // SAFETY: `raw` is a live op during the walk; indices are within its count.
            unsafe {
                for i in 0..mlirOperationGetNumOperands(raw) {
                    f(raw, i, mlirOperationGetOperand(raw, i));
                }
            }
            WalkResult::Advance
        });
    }
}

/// The values the ops of `group` use but do not define, each once, in order of first use.
pub fn captured(group: &[OperationRef]) -> Vec<MlirValue> {
    let mut defined = HashSet::new();
    for op in group {
        op.walk(WalkOrder::PreOrder, |nested| {
            // SAFETY: `nested` is live during the walk.
            unsafe { for_each_definition(nested.to_raw(), |v| _ = defined.insert(key(v))) };
            WalkResult::Advance
        });
    }
    let mut seen = HashSet::new();
    let mut values = Vec::new();
    for_each_use(group, |_, _, value| {
        if !defined.contains(&key(value)) && seen.insert(key(value)) {
            values.push(value);
        }
    });
    values
}

/// The op defining `value` if it is one to clone: named in `cloned`, without operands.
pub fn cloned_definition<'c, 'a>(
    value: Value<'c, 'a>,
    cloned: &[&str],
) -> Option<OperationRef<'c, 'a>> {
    let owner = result_owner(value)?;
    (cloned.contains(&op_name(&owner).as_str()) && owner.operand_count() == 0).then_some(owner)
}

/// The public functions defined in `module` (the graph function; private ones, such as
/// functions outlined before, are left out), with their names and entry blocks.
pub fn public_functions<'c, 'a>(
    module: &'a Module<'c>,
) -> Result<Vec<(OperationRef<'c, 'a>, String, BlockRef<'c, 'a>)>> {
    let mut functions = Vec::new();
    let mut next = module.body().first_operation();
    while let Some(op) = next {
        next = op.next_in_block();
        let private = op
            .attribute("sym_visibility")
            .ok()
            .and_then(|a| StringAttribute::try_from(a).ok())
            .is_some_and(|v| v.value() == "private");
        if op_name(&op) != "func.func" || private {
            continue;
        }
        let Some(block) = op.region(0).ok().and_then(|r| r.first_block()) else {
            continue;
        };
        let name = op
            .attribute("sym_name")
            .ok()
            .and_then(|a| StringAttribute::try_from(a).ok())
            .map(|s| s.value().to_string())
            .ok_or_else(|| Error::stage(STAGE, "a function without a name".to_string()))?;
        functions.push((op, name, block));
    }
    Ok(functions)
}

/// `sym_visibility = "private"` and `extra` (name, attribute text), for a new function.
pub fn private_attributes<'c>(
    context: &'c Context,
    extra: &[(&str, &str)],
) -> Result<Vec<(Identifier<'c>, Attribute<'c>)>> {
    let mut attributes = vec![(
        Identifier::new(context, "sym_visibility"),
        StringAttribute::new(context, "private").into(),
    )];
    for (name, value) in extra {
        let attribute = Attribute::parse(context, value)
            .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the attribute {value}")))?;
        attributes.push((Identifier::new(context, name), attribute));
    }
    Ok(attributes)
}

/// Discardable attribute of an outlined function: the positions, in its LLVM-dialect
/// signature (each memref expanded into its descriptor's fields), of the data pointers of the
/// memref arguments that overlap no other argument. See `outline::mark_noalias`.
pub const NOALIAS: &str = "fxmlir.noalias";

/// The function [`outline_group`] makes.
pub struct Callee<'c, 'n> {
    pub name: String,
    pub attributes: &'n [(Identifier<'c>, Attribute<'c>)],
    /// Ops cloned into the function when it uses their results (those without operands),
    /// rather than passed to it.
    pub cloned: &'n [&'n str],
}

/// Moves the ops of `group` (ops of `block`, the body of `function`, in block order) into a
/// new function placed after `function` in the module body, and calls it where the last of
/// them was. The function takes the values the group uses from outside as arguments (or
/// clones their definitions, see [`Callee::cloned`]) and returns those it defines that other
/// ops use. Returns `false`, changing nothing, if such a use comes before the group's last op.
pub fn outline_group<'c, 'a>(
    context: &'c Context,
    module_body: &BlockRef<'c, 'a>,
    function: OperationRef<'c, 'a>,
    block: BlockRef<'c, 'a>,
    group: &[OperationRef<'c, 'a>],
    callee: &Callee<'c, '_>,
) -> Result<bool> {
    let Some(last) = group.last() else {
        return Ok(true);
    };
    let location = last.location();
    let members: HashSet<usize> = group.iter().map(|op| op_key(op.to_raw())).collect();
    // The group's values used outside it: (value, its uses there as (user, operand index)),
    // and the ops of `block` that hold those uses.
    let mut results: Vec<(MlirValue, Vec<(MlirOperation, isize)>)> = Vec::new();
    let mut holders = HashSet::new();
    for op in group {
        // SAFETY: the group's ops and their users are live ops of `function`.
        unsafe {
            for_each_result_use(op.to_raw(), |i, user, index| {
                let holder = op_key(top_level(function.to_raw(), user));
                if members.contains(&holder) {
                    return;
                }
                holders.insert(holder);
                let value = mlirOperationGetResult(op.to_raw(), i as isize);
                match results.iter_mut().find(|(v, _)| key(*v) == key(value)) {
                    Some((_, uses)) => uses.push((user, index)),
                    None => results.push((value, vec![(user, index)])),
                }
            });
        }
    }
    // The call replaces the group's last op: every holder must come after it.
    let mut next = last.next_in_block();
    while let Some(op) = next.filter(|_| !holders.is_empty()) {
        holders.remove(&op_key(op.to_raw()));
        next = op.next_in_block();
    }
    if !holders.is_empty() {
        return Ok(false);
    }
    // One pass over the captured values: clones in the entry block, or arguments.
    let entry = Block::new(&[]);
    let mut arguments: Vec<Value<'c, 'a>> = Vec::new();
    let mut replacements: HashMap<usize, MlirValue> = HashMap::new();
    for raw in captured(group) {
        // SAFETY: the captured values are live values of `function`.
        let value = unsafe { Value::from_raw(raw) };
        let replacement = match cloned_definition(value, callee.cloned) {
            Some(definition) => {
                // SAFETY: cloning a live op gives a new op with no parent, which the block
                // takes.
                let clone = unsafe {
                    melior::ir::Operation::from_raw(mlirOperationClone(definition.to_raw()))
                };
                let clone = entry.append_operation(clone);
                let index = (0..definition.result_count())
                    .find(|&i| {
                        definition
                            .result(i)
                            .is_ok_and(|r| r.to_raw().ptr == raw.ptr)
                    })
                    .unwrap_or(0);
                clone
                    .result(index)
                    .map_err(|e| Error::stage(STAGE, e.to_string()))?
                    .to_raw()
            }
            None => {
                arguments.push(value);
                entry.add_argument(value.r#type(), location).to_raw()
            }
        };
        replacements.insert(key(raw), replacement);
    }
    let types: Vec<Type> = arguments.iter().map(|v| v.r#type()).collect();
    // SAFETY: the results are live values of the group's ops.
    let returned: Vec<Value<'c, 'a>> = results
        .iter()
        .map(|(v, _)| unsafe { Value::from_raw(*v) })
        .collect();
    let result_types: Vec<Type> = returned.iter().map(|v| v.r#type()).collect();
    let mut attributes = callee.attributes.to_vec();
    if let Some(positions) = disjoint_pointers(function, &arguments)
        && !positions.is_empty()
    {
        let text = format!("array<i64: {}>", items(&positions));
        let attribute = Attribute::parse(context, &text)
            .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the attribute {text}")))?;
        attributes.push((Identifier::new(context, NOALIAS), attribute));
    }
    let terminator = entry.append_operation(melior::dialect::func::r#return(&returned, location));
    let region = Region::new();
    region.append_block(entry);
    let new_function = melior::dialect::func::func(
        context,
        StringAttribute::new(context, &callee.name),
        TypeAttribute::new(FunctionType::new(context, &types, &result_types).into()),
        region,
        &attributes,
        location,
    );
    module_body.insert_operation_after(function, new_function);

    let call = block.insert_operation_before(
        *last,
        melior::dialect::func::call(
            context,
            FlatSymbolRefAttribute::new(context, &callee.name),
            &arguments,
            &result_types,
            location,
        ),
    );
    for (i, (_, uses)) in results.iter().enumerate() {
        let with = call
            .result(i)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?
            .to_raw();
        for &(user, index) in uses {
            // SAFETY: `user` is live and outside the group; the call's result has the type of
            // the group's value it replaces.
            unsafe { mlirOperationSetOperand(user, index, with) };
        }
    }
    for op in group {
        // SAFETY: `op` is live and owned by `block`; moving it hands it to the new function's
        // entry block, ahead of its terminator, keeping the group's order.
        unsafe { mlirOperationMoveBefore(op.to_raw(), terminator.to_raw()) };
    }
    for_each_use(group, |user, index, value| {
        if let Some(&with) = replacements.get(&key(value)) {
            // SAFETY: `user` is live; the replacement has the type of the value it replaces (a
            // block argument of that type, or the result of a clone of its definition).
            unsafe { mlirOperationSetOperand(user, index, with) };
        }
    });
    Ok(true)
}

/// Where the buffer of `value` comes from: an allocation, a global (by name: two reads of one
/// global are the same memory) or an argument of `function`, through any views; `None` for
/// anything else (then it may overlap anything).
pub fn root<'c: 'a, 'a>(function: MlirOperation, mut value: Value<'c, 'a>) -> Option<String> {
    loop {
        if value.is_block_argument() {
            let argument = BlockArgument::try_from(value).ok()?;
            let owner = argument.owner().parent_operation()?;
            return (op_key(owner.to_raw()) == op_key(function))
                .then(|| format!("v{}", key(value.to_raw())));
        }
        let owner = result_owner(value)?;
        let name = op_name(&owner);
        if VIEWS.contains(&name.as_str()) {
            value = owner.operand(0).ok()?;
        } else if name == "memref.get_global" {
            let global = owner.attribute("name").ok()?;
            return Some(format!("g{global}"));
        } else if name == "memref.alloc" || name == "memref.alloca" {
            return Some(format!("v{}", key(value.to_raw())));
        } else {
            return None;
        }
    }
}

/// The positions of the data pointers, in the LLVM-dialect signature of a function taking
/// `arguments` (values of `function`), of the memref arguments whose root no other argument
/// shares. `None` if some memref argument's root is unknown (it might overlap any of them) or
/// an argument has a type whose expansion is not known here.
pub fn disjoint_pointers(function: OperationRef, arguments: &[Value]) -> Option<Vec<i64>> {
    let mut roots = Vec::with_capacity(arguments.len());
    for value in arguments {
        let memref = value.r#type().is_mem_ref();
        roots.push(if memref {
            Some(root(function.to_raw(), *value)?)
        } else {
            None
        });
    }
    let mut positions = Vec::new();
    let mut position = 0;
    for (value, root) in arguments.iter().zip(&roots) {
        let ty = value.r#type();
        if let (Ok(memref), Some(root)) = (MemRefType::try_from(ty), root) {
            // Allocated pointer, data pointer, offset, sizes, strides.
            if roots.iter().flatten().filter(|r| *r == root).count() == 1 {
                positions.push(position + 1);
            }
            position += 3 + 2 * memref.rank() as i64;
        } else if ty.is_index() || ty.is_integer() || ty.is_float() || ty.is_vector() {
            position += 1;
        } else {
            return None;
        }
    }
    Some(positions)
}

/// Views: their result is part of the buffer of their first operand.
pub const VIEWS: &[&str] = &[
    "memref.subview",
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.reinterpret_cast",
    "memref.cast",
    "memref.view",
];

/// The op of `function`'s body that is or holds `op` (an op nested in `function`).
///
/// # Safety
/// `op` is a live op nested in `function`.
pub unsafe fn top_level(function: MlirOperation, mut op: MlirOperation) -> MlirOperation {
    // SAFETY: walking up from a live op nested in `function` reaches its body's op.
    unsafe {
        loop {
            let parent = mlirOperationGetParentOperation(op);
            if parent.ptr.is_null() || op_key(parent) == op_key(function) {
                return op;
            }
            op = parent;
        }
    }
}
