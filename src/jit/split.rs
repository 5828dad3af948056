//! Parallel optimisation and code generation. A module's functions are independent units (the
//! entry point with the graph function inlined, one function per outlined computation and one
//! outlined OpenMP region per parallel op, reached only through `__kmpc_fork_call`), so a large
//! module is cut into parts balanced by instruction count. The first part is the module itself,
//! on the calling thread; each other part is the whole module parsed from bitcode into a
//! context of its own (LLVM contexts are not thread-safe) on a thread of its own. In each, the
//! other parts' functions are turned into declarations; it is optimised and compiled to an
//! object, and the objects link together in the kernel's JIT.

use super::target_machine;
use crate::error::{Error, Result};
use crate::target::Target;
use inkwell::{
    attributes::{Attribute, AttributeLoc},
    context::Context as LlvmContext,
    memory_buffer::MemoryBuffer,
    module::{Linkage, Module as LlvmModule},
    passes::PassBuilderOptions,
    targets::FileType,
    values::{AsValueRef, FunctionValue},
};
use llvm_sys::LLVMTypeKind;
use llvm_sys::core::{
    LLVMAddFunction, LLVMAddGlobal, LLVMDeleteBasicBlock, LLVMDeleteFunction, LLVMDeleteGlobal,
    LLVMGetFirstBasicBlock, LLVMGetFirstInstruction, LLVMGetNextInstruction, LLVMGetPoison,
    LLVMGetTypeKind, LLVMGetValueName2, LLVMGlobalGetValueType, LLVMInstructionEraseFromParent,
    LLVMReplaceAllUsesWith, LLVMSetInitializer, LLVMSetValueName2, LLVMTypeOf,
};
use llvm_sys::prelude::{LLVMModuleRef, LLVMValueRef};
use std::collections::HashMap;
use std::ffi::CString;
use std::time::{Duration, Instant};

/// A module stays one part unless its functions other than the largest (the most that can be
/// compiled beside it) have this many instructions. Splitting costs a bitcode round trip and a
/// parse per part, about 1 ms per 1000 instructions, while O2 and code generation take
/// 0.1-0.4 ms per instruction; small kernels (an entry point and a few short loop nests)
/// stay whole.
const MIN_SPLIT_INSTRUCTIONS: usize = 1000;

/// One part's optimised IR (when asked for) and object.
pub struct Part {
    pub ir: Option<String>,
    pub object: Vec<u8>,
}

/// What [`optimise`] produced, with the wall time of its two phases.
pub struct Output {
    pub parts: Vec<Part>,
    pub optimize: Duration,
    pub codegen: Duration,
}

/// Optimises `llvm` (O2 for `target`) and emits its objects:
/// one part for a small module or a single-core host, else one part per core (at most one per
/// function), compiled in parallel. `llvm` itself becomes the first part (optimised in place on
/// this thread, its other parts' functions reduced to declarations), so only the other parts
/// are read back from bitcode. `print` keeps each part's optimised IR.
pub fn optimise(llvm: &LlvmModule<'_>, target: &Target, print: bool) -> Result<Output> {
    let sizes = function_sizes(llvm);
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    let largest = sizes.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parts = cores.min(sizes.len());
    // Parts link by name: every function and every global defined in one part only (all but
    // private constants) must have one.
    let linkable = sizes.iter().all(|(name, _)| !name.is_empty())
        && llvm.get_globals().all(|g| {
            let copied =
                g.is_constant() && matches!(g.get_linkage(), Linkage::Internal | Linkage::Private);
            g.is_declaration()
                || copied
                || g.get_linkage() == Linkage::Appending
                || !g.get_name().to_bytes().is_empty()
        });
    if parts < 2 || total - largest < MIN_SPLIT_INSTRUCTIONS || !linkable {
        return whole(llvm, target, print);
    }
    let groups = partition(&sizes, parts);
    tracing::debug!(instructions = total, parts, "compiling the module in parts");

    let start = Instant::now();
    expose_internals(llvm);
    let bitcode = llvm.write_bitcode_to_memory();
    let bitcode = bitcode.as_slice();
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..parts)
            .map(|part| {
                let groups = &groups;
                std::thread::Builder::new()
                    .name(format!("fxmlir-llvm-{part}"))
                    .stack_size(super::COMPILE_STACK)
                    .spawn_scoped(scope, move || {
                        let ctx = LlvmContext::create();
                        let buffer =
                            MemoryBuffer::create_from_memory_range_copy(bitcode, "fxmlir-part");
                        let llvm =
                            LlvmModule::parse_bitcode_from_buffer(&buffer, &ctx).map_err(|e| {
                                Error::Llvm(format!("cannot read a module part back: {e}"))
                            })?;
                        compile_part(&llvm, groups, part, target, print)
                    })
            })
            .collect();
        let first = compile_part(llvm, &groups, 0, target, print);
        // Every started thread is joined before any failure is returned.
        let joined: Vec<Result<_>> = std::iter::once(first)
            .chain(workers.into_iter().map(|spawned| {
                spawned
                    .map_err(|e| Error::Llvm(format!("cannot start a compile thread: {e}")))?
                    .join()
                    .map_err(|_| Error::Llvm("a compile thread panicked".to_string()))?
            }))
            .collect();
        joined.into_iter().collect::<Result<Vec<_>>>()
    })?;
    let wall = start.elapsed();
    let optimize = results
        .iter()
        .map(|(_, optimised)| optimised.duration_since(start))
        .max()
        .unwrap_or_default();
    Ok(Output {
        parts: results.into_iter().map(|(part, _)| part).collect(),
        optimize,
        codegen: wall.saturating_sub(optimize),
    })
}

/// The module as one part, compiled on this thread.
fn whole(llvm: &LlvmModule<'_>, target: &Target, print: bool) -> Result<Output> {
    let start = Instant::now();
    let (part, optimised) = optimise_and_emit(llvm, target, print)?;
    Ok(Output {
        parts: vec![part],
        optimize: optimised.duration_since(start),
        codegen: optimised.elapsed(),
    })
}

/// Runs O2 on `llvm` (loop unrolling only where loop metadata asks for it), verifies it and
/// emits an object; returns the part and when O2 ended.
fn optimise_and_emit(
    llvm: &LlvmModule<'_>,
    target: &Target,
    print: bool,
) -> Result<(Part, Instant)> {
    let machine = target_machine(target)?;
    // O2, not O3: on fused linalg loop nests O3's extra unrolling and vectorisation cost 5-13x
    // the optimisation and codegen time and measured no faster (often slower); matrix
    // products arrive already vectorised by the schedule stage. Loop unrolling is off: with
    // it off O2 still unrolls the loops whose metadata forces it, which are the window loops
    // `pipeline::windows` marks (everywhere else it cost compile time for no run-time gain).
    let options = PassBuilderOptions::create();
    options.set_loop_unrolling(false);
    llvm.run_passes("default<O2>", &machine, options)
        .map_err(|e| Error::Llvm(format!("optimisation failed: {e}")))?;
    select_entry_fast(llvm);
    let optimised = Instant::now();
    let ir = print.then(|| llvm.print_to_string().to_string());
    llvm.verify()
        .map_err(|e| Error::Llvm(format!("invalid LLVM IR: {e}")))?;
    let object = machine
        .write_to_memory_buffer(llvm, FileType::Object)
        .map_err(|e| Error::Llvm(format!("code generation failed: {e}")))?
        .as_slice()
        .to_vec();
    Ok((Part { ir, object }, optimised))
}

/// Marks the optimised entry point (in this part) `optnone`, which makes code generation select
/// its instructions the fast way. After `outline` the entry is straight-line code (descriptor
/// loads, buffer allocations and a call per computation), where the full instruction selection
/// gains nothing at run time but costs more than any other function: on BERT, about a third of
/// its part's code generation. An entry of more than one block (a loop left in the graph
/// function, as when outlining was skipped) keeps the full code generation.
fn select_entry_fast(llvm: &LlvmModule<'_>) {
    let Some(entry) = llvm.get_function(super::ENTRY) else {
        return;
    };
    if entry.count_basic_blocks() != 1 {
        return;
    }
    let ctx = llvm.get_context();
    for name in ["noinline", "optnone"] {
        let kind = Attribute::get_named_enum_kind_id(name);
        entry.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(kind, 0));
    }
}

/// Part `part` of the whole module `llvm` (the original or a copy of its own): the functions
/// of other parts reduced to declarations and mutable globals defined in part 0 only, then
/// compiled.
fn compile_part(
    llvm: &LlvmModule<'_>,
    groups: &HashMap<String, usize>,
    part: usize,
    target: &Target,
    print: bool,
) -> Result<(Part, Instant)> {
    let others: Vec<_> = llvm
        .get_functions()
        .filter(|f| {
            let name = f.get_name().to_string_lossy();
            groups.get(name.as_ref()).is_some_and(|&g| g != part)
        })
        .collect();
    for function in others {
        // SAFETY: `function` is a live function of `llvm`, which nothing else uses; it is not
        // touched after `redeclare` deletes it.
        unsafe {
            delete_body(function.as_value_ref());
            redeclare(llvm.as_mut_ptr(), function.as_value_ref(), true);
        }
    }
    if part != 0 {
        let defined: Vec<_> = llvm
            .get_globals()
            .filter(|g| !g.is_declaration() && g.get_linkage() == Linkage::External)
            .collect();
        for global in defined {
            // SAFETY: `global` is a live global variable; a null initializer makes it a
            // declaration, which part 0's definition satisfies at link time. It is not
            // touched after `redeclare` deletes it.
            unsafe {
                LLVMSetInitializer(global.as_value_ref(), std::ptr::null_mut());
                redeclare(llvm.as_mut_ptr(), global.as_value_ref(), false);
            }
        }
    }
    let start = Instant::now();
    let (compiled, optimised) = optimise_and_emit(llvm, target, print)?;
    tracing::debug!(
        part,
        optimise_ms = optimised.duration_since(start).as_secs_f64() * 1e3,
        codegen_ms = optimised.elapsed().as_secs_f64() * 1e3,
        "module part compiled"
    );
    Ok((compiled, optimised))
}

/// Gives every function definition, and every global definition but private constants,
/// external linkage, so that each is defined in exactly one part and reachable from the
/// others (see [`redeclare`] for how the others refer to it). Internal constants stay, copied
/// into every part that uses them.
fn expose_internals(llvm: &LlvmModule<'_>) {
    for function in llvm.get_functions() {
        if function.count_basic_blocks() > 0 && function.get_linkage() != Linkage::External {
            function.set_linkage(Linkage::External);
        }
    }
    for global in llvm.get_globals() {
        let linkage = global.get_linkage();
        let copied =
            global.is_constant() && matches!(linkage, Linkage::Internal | Linkage::Private);
        if !global.is_declaration()
            && !copied
            && !matches!(linkage, Linkage::External | Linkage::Appending)
        {
            global.set_linkage(Linkage::External);
        }
    }
}

/// The name and instruction count of every function with a body.
fn function_sizes(llvm: &LlvmModule<'_>) -> Vec<(String, usize)> {
    llvm.get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
        .map(|f| {
            (
                f.get_name().to_string_lossy().into_owned(),
                instruction_count(f),
            )
        })
        .collect()
}

/// How many instructions `function` has.
pub fn instruction_count(function: FunctionValue<'_>) -> usize {
    function
        .get_basic_block_iter()
        .map(|b| b.get_instructions().count())
        .sum()
}

/// Assigns functions to `parts` groups, largest first to the lightest group.
fn partition(sizes: &[(String, usize)], parts: usize) -> HashMap<String, usize> {
    let mut order: Vec<&(String, usize)> = sizes.iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut load = vec![0usize; parts];
    let mut groups = HashMap::new();
    for (name, size) in order {
        let lightest = (0..parts).min_by_key(|&g| (load[g], g)).unwrap_or(0);
        load[lightest] += size;
        groups.insert(name.clone(), lightest);
    }
    groups
}

/// Replaces the declaration `old` (a function if `function`, else a global variable) by a new
/// one of the same name and type. What was internal or hidden before the split is still
/// `dso_local` (the C API cannot clear that flag), so code would reach it PC-relatively with a
/// 32-bit displacement; but JITLink may place two parts' objects more than 2 GiB apart, and
/// such a fixup then fails to link. The new declaration is preemptible, reached through a GOT
/// entry or stub that the linker builds beside the referring code.
///
/// # Safety
/// `module` must be live and own `old`, a declaration no other thread uses; `old` is deleted.
unsafe fn redeclare(module: LLVMModuleRef, old: LLVMValueRef, function: bool) {
    // SAFETY: per the contract; the old declaration is renamed first so that the new one takes
    // its name, loses every use to the new one, and only then is deleted.
    unsafe {
        let mut length = 0;
        let name = LLVMGetValueName2(old, &mut length);
        let name = std::slice::from_raw_parts(name.cast::<u8>(), length).to_vec();
        let name = CString::new(name).unwrap_or_default();
        LLVMSetValueName2(old, c"".as_ptr(), 0);
        let ty = LLVMGlobalGetValueType(old);
        let new = if function {
            LLVMAddFunction(module, name.as_ptr(), ty)
        } else {
            LLVMAddGlobal(module, ty, name.as_ptr())
        };
        LLVMReplaceAllUsesWith(old, new);
        if function {
            LLVMDeleteFunction(old);
        } else {
            LLVMDeleteGlobal(old);
        }
    }
}

/// Turns a function definition into a declaration: every value an instruction defines is
/// replaced by poison, then the instructions (terminators included, so no block is still
/// used) and the blocks are deleted. The function's linkage is left as is.
///
/// # Safety
/// `function` must be a live function of a module no other thread uses.
unsafe fn delete_body(function: LLVMValueRef) {
    // SAFETY: per the contract every block and instruction visited is live; values lose their
    // uses before their instructions are erased, and blocks lose theirs (terminators) before
    // they are deleted, so nothing is left pointing to freed IR.
    unsafe {
        let mut instructions = Vec::new();
        let mut blocks = Vec::new();
        let mut block = LLVMGetFirstBasicBlock(function);
        while !block.is_null() {
            blocks.push(block);
            let mut instruction = LLVMGetFirstInstruction(block);
            while !instruction.is_null() {
                instructions.push(instruction);
                instruction = LLVMGetNextInstruction(instruction);
            }
            block = llvm_sys::core::LLVMGetNextBasicBlock(block);
        }
        for &instruction in &instructions {
            let ty = LLVMTypeOf(instruction);
            if LLVMGetTypeKind(ty) != LLVMTypeKind::LLVMVoidTypeKind {
                LLVMReplaceAllUsesWith(instruction, LLVMGetPoison(ty));
            }
        }
        for instruction in instructions {
            LLVMInstructionEraseFromParent(instruction);
        }
        for block in blocks {
            LLVMDeleteBasicBlock(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_balances_by_size() {
        let sizes: Vec<(String, usize)> = [("a", 100), ("b", 60), ("c", 50), ("d", 5), ("e", 1)]
            .iter()
            .map(|(n, s)| (n.to_string(), *s))
            .collect();
        let groups = partition(&sizes, 2);
        let mut load = [0; 2];
        for (name, size) in &sizes {
            load[groups[name]] += size;
        }
        assert_eq!(load, [106, 110]);
    }

    /// A part refers to another part's function (its address taken, as `__kmpc_fork_call`'s
    /// argument) and mutable global through preemptible declarations: nothing `dso_local`
    /// that the part does not define, or JITLink may fail to reach it.
    #[test]
    fn cross_part_references_are_preemptible() {
        let text = r#"
@counter = internal global i32 0
declare void @fork(ptr)
define internal void @work() {
  %c = load i32, ptr @counter
  %d = add i32 %c, 1
  store i32 %d, ptr @counter
  ret void
}
define void @main() {
  call void @fork(ptr @work)
  store i32 7, ptr @counter
  ret void
}
"#;
        let ctx = LlvmContext::create();
        let buffer = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "test");
        let llvm = ctx.create_module_from_ir(buffer).unwrap();
        expose_internals(&llvm);
        let groups: HashMap<String, usize> =
            [("work".to_string(), 0), ("main".to_string(), 1)].into();
        let target = Target::host().unwrap();
        let (part, _) = compile_part(&llvm, &groups, 1, &target, true).unwrap();
        let ir = part.ir.unwrap();
        assert!(ir.contains("declare void @work()"), "{ir}");
        assert!(ir.contains("@counter = external "), "{ir}");
        assert!(!ir.contains("dso_local"), "{ir}");
        assert!(!part.object.is_empty());
    }

    /// Only a straight-line entry point is left to fast instruction selection: one with a loop
    /// (outlining skipped) keeps the full code generation.
    #[test]
    fn only_a_straight_line_entry_is_selected_fast() {
        let straight = r#"
declare void @work(ptr)
define void @fxmlir_entry(ptr %argv) {
  call void @work(ptr %argv)
  ret void
}
"#;
        let looping = r#"
define void @fxmlir_entry(ptr %argv) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %p = getelementptr float, ptr %argv, i64 %i
  store float 0.0, ptr %p
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 64
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"#;
        for (text, fast) in [(straight, true), (looping, false)] {
            let ctx = LlvmContext::create();
            let buffer = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "test");
            let llvm = ctx.create_module_from_ir(buffer).unwrap();
            select_entry_fast(&llvm);
            let entry = llvm.get_function(super::super::ENTRY).unwrap();
            let optnone = Attribute::get_named_enum_kind_id("optnone");
            let marked = entry
                .get_enum_attribute(AttributeLoc::Function, optnone)
                .is_some();
            assert_eq!(marked, fast, "{}", llvm.print_to_string().to_string());
            llvm.verify().unwrap();
        }
    }
}
