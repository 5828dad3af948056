//! The `outline` stage: the computations of each function move into private functions of their
//! own, called where they were; then `duplicate-function-elimination` keeps one of each set of
//! identical functions.
//!
//! This is for compile time. Without it the graph function holds every op too small to run in
//! parallel, and LLVM optimises and compiles it as one unit: on BERT (2 layers) that function
//! was three quarters of the module and bounded the compile however many threads compiled the
//! rest. Outlined, the computations are units the parallel compile balances across threads,
//! and a model's repeated layers (the same ops on the same shapes and layouts) compile once
//! (the stage runs on buffers before the `loops` stage, so once through that stage too).
//!
//! What stays in a function is its buffer management: allocations, deallocations, views and
//! reshapes of buffers, constants and the return. Every other top-level op (a structured op, a
//! thread chunk loop, a copy) is outlined as a function of its own, together with the ops that use
//! the values it defines (a register-tiled loop and the vector code storing its accumulators):
//! one op per function keeps the functions small and the repeated ones identical. An op whose
//! values a kept op uses stays too. An outlined function takes the values its ops use from outside as
//! arguments, in order of first use, except constants, which are cloned into it so that LLVM
//! still sees constant loop bounds and steps. Outlined functions are internal and never
//! inlined: inlining them back would undo both gains. (After OpenMP's translation, a function
//! that only starts a parallel region, whose body became a function of its own, is inlined
//! into the entry point; see `jit::inline_into_entry`.)
//!
//! Outlining hides from LLVM where each memref comes from, so it would have to assume any two
//! may overlap, and versions every vectorised loop with run-time overlap checks (code that
//! costs compile time and a scalar fallback). Here the buffers are known: a memref argument
//! whose root (followed through views to an allocation, a global or an argument of the graph
//! function) is the root of no other argument is recorded in [`NOALIAS`], and [`mark_noalias`]
//! turns that into LLVM's `noalias` on its data pointer once the function is in the LLVM
//! dialect. That is sound because distinct allocations and globals are disjoint, the graph's
//! outputs are fresh buffers, and its inputs, which may overlap one another, are never written
//! (`bufferization.to_tensor` without `writable`); `noalias` only forbids overlaps where one
//! side writes.

use super::schedule::items;
use crate::error::{Error, Result};
use melior::{
    Context, StringRef,
    ir::{
        Attribute, Block, BlockLike, BlockRef, Identifier, Module, OperationRef, Region,
        RegionLike, Type, Value, ValueLike,
        attribute::AttributeLike,
        attribute::{
            DenseI64ArrayAttribute, FlatSymbolRefAttribute, StringAttribute, TypeAttribute,
        },
        block::BlockArgument,
        operation::{OperationLike, OperationResult, WalkOrder, WalkResult},
        r#type::{FunctionType, MemRefType, ShapedTypeLike, TypeLike},
    },
};
use mlir_sys::{
    MlirOperation, MlirValue, mlirBlockGetArgument, mlirBlockGetNextInRegion,
    mlirBlockGetNumArguments, mlirOpOperandGetNextUse, mlirOpOperandGetOperandNumber,
    mlirOpOperandGetOwner, mlirOpOperandIsNull, mlirOperationClone, mlirOperationGetNumOperands,
    mlirOperationGetNumRegions, mlirOperationGetNumResults, mlirOperationGetOperand,
    mlirOperationGetParentOperation, mlirOperationGetRegion, mlirOperationGetResult,
    mlirOperationMoveBefore, mlirOperationRemoveAttributeByName, mlirOperationSetAttributeByName,
    mlirOperationSetOperand, mlirRegionGetFirstBlock, mlirValueGetFirstUse,
};
use std::collections::{HashMap, HashSet};

/// Top-level ops that stay in their function: buffer management and constants.
const KEPT: &[&str] = &[
    "arith.constant",
    "ub.poison",
    "memref.alloc",
    "memref.alloca",
    "memref.dealloc",
    "memref.get_global",
    "memref.subview",
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.reinterpret_cast",
    "memref.cast",
    "func.call",
    "func.return",
];

/// Ops cloned into an outlined function rather than passed to it.
const CLONED: &[&str] = &["arith.constant", "ub.poison"];

/// Views: their result is part of the buffer of their first operand.
const VIEWS: &[&str] = &[
    "memref.subview",
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.reinterpret_cast",
    "memref.cast",
    "memref.view",
];

/// Discardable attribute of an outlined function: the positions, in its LLVM-dialect
/// signature (each memref expanded into its descriptor's fields), of the data pointers of the
/// memref arguments that overlap no other argument. See [`mark_noalias`].
pub const NOALIAS: &str = "fxmlir.noalias";

/// Attributes of an outlined function, which `func-to-llvm` carries over to the `llvm.func`:
/// internal linkage and LLVM's `noinline`. (`func.func`'s own `no_inline` is for MLIR's
/// inliner and is dropped by the conversion.)
const ATTRIBUTES: &[(&str, &str)] = &[
    ("llvm.linkage", "#llvm.linkage<internal>"),
    ("passthrough", "[\"noinline\"]"),
];

fn failure(message: String) -> Error {
    Error::stage("outline", message)
}

pub(super) fn op_name(op: &OperationRef) -> String {
    op.name().as_string_ref().as_str().unwrap_or("").to_string()
}

fn key(value: MlirValue) -> usize {
    value.ptr as usize
}

fn op_key(op: MlirOperation) -> usize {
    op.ptr as usize
}

/// Calls `f` on every result of `op` and every argument of the blocks of its regions.
///
/// # Safety
/// `op` is a live operation.
unsafe fn for_each_definition(op: MlirOperation, mut f: impl FnMut(MlirValue)) {
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
fn for_each_use(group: &[OperationRef], mut f: impl FnMut(MlirOperation, isize, MlirValue)) {
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
fn captured(group: &[OperationRef]) -> Vec<MlirValue> {
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

/// The op of `function`'s body that is or holds `op` (an op nested in `function`).
///
/// # Safety
/// `op` is a live op nested in `function`.
unsafe fn top_level(function: MlirOperation, mut op: MlirOperation) -> MlirOperation {
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

/// Calls `f` on every use of every result of `op`: the user and the operand's index.
///
/// # Safety
/// `op` is a live op.
unsafe fn for_each_result_use(op: MlirOperation, mut f: impl FnMut(usize, MlirOperation, isize)) {
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

/// How many uses the results of `op` have.
pub(super) fn use_count(op: &OperationRef) -> usize {
    let mut count = 0;
    // SAFETY: `op` is live.
    unsafe { for_each_result_use(op.to_raw(), |_, _, _| count += 1) };
    count
}

/// The position in `ops` (the top-level ops of `function`, by key) of the last op that uses a
/// result of `op`, itself or an op nested in it; `None` if nothing uses its results.
fn last_use(
    function: MlirOperation,
    positions: &HashMap<usize, usize>,
    op: MlirOperation,
) -> Option<usize> {
    let mut last = None;
    // SAFETY: `op` and every user of its results are live ops of `function`.
    unsafe {
        for_each_result_use(op, |_, user, _| {
            let user = top_level(function, user);
            last = last.max(positions.get(&op_key(user)).copied());
        });
    }
    last
}

/// The groups of `function`'s top-level ops to outline: each op that is not kept, together with
/// the ops up to the last one using a value it (or an op after it in the group) defines, so that
/// no value a group defines is used outside it. An op whose results are used by a kept op stays
/// in the function.
fn groups<'c, 'a>(
    function: OperationRef<'c, 'a>,
    block: BlockRef<'c, 'a>,
) -> Vec<Vec<OperationRef<'c, 'a>>> {
    let mut ops = Vec::new();
    let mut next = block.first_operation();
    while let Some(op) = next {
        next = op.next_in_block();
        ops.push(op);
    }
    let positions: HashMap<usize, usize> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| (op_key(op.to_raw()), i))
        .collect();
    let kept = |op: &OperationRef| KEPT.contains(&op_name(op).as_str());
    let mut groups = Vec::new();
    let mut start = 0;
    while start < ops.len() {
        if kept(&ops[start]) {
            start += 1;
            continue;
        }
        let mut end = start;
        let mut i = start;
        let mut closed = true;
        while i <= end {
            if kept(&ops[i]) {
                closed = false;
                break;
            }
            end = end.max(last_use(function.to_raw(), &positions, ops[i].to_raw()).unwrap_or(i));
            i += 1;
        }
        if closed {
            groups.push(ops[start..=end].to_vec());
            start = end + 1;
        } else {
            start += 1;
        }
    }
    groups
}

/// The op defining `value` if it is one to clone: named in `cloned`, without operands.
fn cloned_definition<'c, 'a>(
    value: Value<'c, 'a>,
    cloned: &[&str],
) -> Option<OperationRef<'c, 'a>> {
    let owner = result_owner(value)?;
    (cloned.contains(&op_name(&owner).as_str()) && owner.operand_count() == 0).then_some(owner)
}

/// Whether `ancestor` is `op` or contains it.
pub(super) fn within(op: MlirOperation, ancestor: MlirOperation) -> bool {
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
pub(super) fn result_owner<'c, 'a>(value: Value<'c, 'a>) -> Option<OperationRef<'c, 'a>> {
    value
        .is_operation_result()
        .then(|| OperationResult::try_from(value).ok())
        .flatten()
        .map(|r| r.owner())
}

/// The public functions defined in `module` (the graph function; private ones, such as
/// functions outlined before, are left out), with their names and entry blocks.
pub(super) fn public_functions<'c, 'a>(
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
            .ok_or_else(|| failure("a function without a name".to_string()))?;
        functions.push((op, name, block));
    }
    Ok(functions)
}

/// `sym_visibility = "private"` and `extra` (name, attribute text), for a new function.
pub(super) fn private_attributes<'c>(
    context: &'c Context,
    extra: &[(&str, &str)],
) -> Result<Vec<(Identifier<'c>, Attribute<'c>)>> {
    let mut attributes = vec![(
        Identifier::new(context, "sym_visibility"),
        StringAttribute::new(context, "private").into(),
    )];
    for (name, value) in extra {
        let attribute = Attribute::parse(context, value)
            .ok_or_else(|| failure(format!("cannot parse the attribute {value}")))?;
        attributes.push((Identifier::new(context, name), attribute));
    }
    Ok(attributes)
}

/// Outlines the computations of every public function defined in `module` (private ones,
/// such as functions outlined before, are left alone, so running the stage again changes
/// nothing); returns how many functions it made.
pub fn outline(context: &Context, module: &mut Module) -> Result<usize> {
    let copies = strided_copies_to_linalg(context, module)?;
    tracing::debug!(copies, "strided memref.copy ops made linalg.copy");
    let attributes = private_attributes(context, ATTRIBUTES)?;
    let mut count = 0;
    for (function, name, block) in public_functions(module)? {
        for group in groups(function, block) {
            let callee = Callee {
                name: format!("{name}_outlined{count}"),
                attributes: &attributes,
                cloned: CLONED,
            };
            outline_group(context, &module.body(), function, block, &group, &callee)?;
            count += 1;
        }
    }
    Ok(count)
}

/// Rewrites each `memref.copy` one of whose buffers is strided (a layout other than the
/// identity) into a `linalg.copy`. The LLVM lowering hands such a copy to the runtime's generic
/// `memrefCopy` (`jit::support::memref_copy`), element by element through the descriptors,
/// where `convert-linalg-to-loops` makes a loop nest LLVM vectorises: stacking strided slices
/// (a grouped convolution's patches, for its weight gradient) spent 6% of resnext50's backward
/// there. Returns how many copies it rewrote.
fn strided_copies_to_linalg(context: &Context, module: &Module) -> Result<usize> {
    let mut copies = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        // A memref type prints a layout only when it is not the identity.
        let strided = op
            .operands()
            .any(|v| MemRefType::try_from(v.r#type()).is_ok_and(|t| t.to_string().contains(',')));
        if op_name(&op) == "memref.copy" && strided {
            copies.push(op.to_raw());
        }
        WalkResult::Advance
    });
    let segments = Attribute::parse(context, "array<i32: 1, 1>")
        .ok_or_else(|| Error::stage("outline", "cannot parse operand segment sizes"))?;
    let rewriter = melior::IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    for raw in &copies {
        // SAFETY: `raw` was collected from the live module above; each copy is replaced and
        // erased once, after the walk.
        let copy = unsafe { OperationRef::from_raw(*raw) };
        let operands: Vec<Value> = copy.operands().collect();
        let linalg = melior::ir::operation::OperationBuilder::new("linalg.copy", copy.location())
            .add_operands(&operands)
            .add_attributes(&[(Identifier::new(context, "operandSegmentSizes"), segments)])
            .add_regions([Region::new()])
            .build()
            .map_err(|e| Error::stage("outline", format!("linalg.copy: {e}")))?;
        // SAFETY: a freshly built linalg named op with one empty region, which the C API fills
        // with the op's body.
        unsafe { mlir_sys::mlirLinalgFillBuiltinNamedOpRegion(linalg.to_raw()) };
        let block = copy
            .block()
            .ok_or_else(|| Error::stage("outline", "a copy outside any block"))?;
        block.insert_operation_before(copy, linalg);
        rewriter.erase_op(copy);
    }
    Ok(copies.len())
}

/// The function [`outline_group`] makes.
pub(super) struct Callee<'c, 'n> {
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
pub(super) fn outline_group<'c, 'a>(
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
                    .map_err(|e| failure(e.to_string()))?
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
            .ok_or_else(|| failure(format!("cannot parse the attribute {text}")))?;
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
        let with = call.result(i).map_err(|e| failure(e.to_string()))?.to_raw();
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
fn root<'c: 'a, 'a>(function: MlirOperation, mut value: Value<'c, 'a>) -> Option<String> {
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
fn disjoint_pointers(function: OperationRef, arguments: &[Value]) -> Option<Vec<i64>> {
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

/// Gives the data pointers [`NOALIAS`] lists LLVM's `noalias`, on every `llvm.func` of
/// `module` (run after the conversion to the LLVM dialect, which drops argument attributes of
/// memrefs); the list itself is removed.
pub fn mark_noalias(context: &Context, module: &mut Module) -> Result<usize> {
    let mut marked = 0;
    let mut next = module.body().first_operation();
    while let Some(op) = next {
        next = op.next_in_block();
        let Ok(list) = op.attribute(NOALIAS) else {
            continue;
        };
        let positions = DenseI64ArrayAttribute::try_from(list)
            .map_err(|e| failure(format!("{NOALIAS}: {e}")))?;
        let positions: HashSet<i64> = (0..positions.len())
            .filter_map(|i| positions.element(i).ok())
            .collect();
        let entry = op.region(0).ok().and_then(|r| r.first_block());
        let count = entry.map_or(0, |b| b.argument_count());
        let pointer = |p: i64| {
            usize::try_from(p)
                .ok()
                .and_then(|p| entry?.argument(p).ok())
                .is_some_and(|a| a.r#type().to_string() == "!llvm.ptr")
        };
        if op_name(&op) != "llvm.func" || !positions.iter().all(|&p| pointer(p)) {
            return Err(failure(format!(
                "{NOALIAS} on {} does not match its signature",
                op_name(&op)
            )));
        }
        let text = format!(
            "[{}]",
            (0..count as i64)
                .map(|i| if positions.contains(&i) {
                    "{llvm.noalias}"
                } else {
                    "{}"
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
        let attribute = Attribute::parse(context, &text)
            .ok_or_else(|| failure(format!("cannot parse the attribute {text}")))?;
        // SAFETY: `op` is a live op of `module`, which this function borrows mutably; the
        // attribute and the names outlive the calls.
        unsafe {
            mlirOperationSetAttributeByName(
                op.to_raw(),
                StringRef::new("arg_attrs").to_raw(),
                attribute.to_raw(),
            );
            mlirOperationRemoveAttributeByName(op.to_raw(), StringRef::new(NOALIAS).to_raw());
        }
        marked += positions.len();
    }
    Ok(marked)
}
