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

use super::ir::ops::{for_each_result_use, has_layout, is_pointer, op_name};
use super::ir::outlining::*;
use crate::error::{Error, Result};
use melior::{
    Context, StringRef,
    ir::{
        Attribute, BlockLike, BlockRef, Identifier, Module, OperationRef, Region, RegionLike,
        Value, ValueLike,
        attribute::AttributeLike,
        attribute::DenseI64ArrayAttribute,
        operation::{OperationLike, WalkOrder, WalkResult},
        r#type::MemRefType,
    },
};
use mlir_sys::{
    MlirOperation, mlirOperationRemoveAttributeByName, mlirOperationSetAttributeByName,
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

/// Attributes of an outlined function, which `func-to-llvm` carries over to the `llvm.func`:
/// internal linkage and LLVM's `noinline`. (`func.func`'s own `no_inline` is for MLIR's
/// inliner and is dropped by the conversion.)
const ATTRIBUTES: &[(&str, &str)] = &[
    ("llvm.linkage", "#llvm.linkage<internal>"),
    ("passthrough", "[\"noinline\"]"),
];

/// The stage whose hook runs this module's rewrites: its errors name it.
const STAGE: &str = "outline";

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
        let strided = op
            .operands()
            .any(|v| MemRefType::try_from(v.r#type()).is_ok_and(has_layout));
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
            .map_err(|e| Error::stage(STAGE, format!("{NOALIAS}: {e}")))?;
        let positions: HashSet<i64> = (0..positions.len())
            .filter_map(|i| positions.element(i).ok())
            .collect();
        let entry = op.region(0).ok().and_then(|r| r.first_block());
        let count = entry.map_or(0, |b| b.argument_count());
        let pointer = |p: i64| {
            usize::try_from(p)
                .ok()
                .and_then(|p| entry?.argument(p).ok())
                .is_some_and(|a| is_pointer(a.r#type()))
        };
        if op_name(&op) != "llvm.func" || !positions.iter().all(|&p| pointer(p)) {
            return Err(Error::stage(
                STAGE,
                format!("{NOALIAS} on {} does not match its signature", op_name(&op)),
            ));
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
            .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the attribute {text}")))?;
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
