//! LLVM dialect → LLVM IR → target-tuned O2 → object code → ORC. The MLIR module is translated
//! straight into an inkwell context (one LLVM serves melior and inkwell), every function gets the
//! target's `target-cpu`/`target-features`, a packed entry point is added, O2 runs for the target and
//! the target machine emits relocatable objects (one per part of a large module, compiled in
//! parallel by `jit::split`): the artefacts the compile cache stores. [`load`] links a kernel's
//! objects into an ORC LLJIT of its own, resolving external symbols through `abi::resolve`,
//! which ORC asks before its own search of the process.

mod abi;
pub(crate) mod alloc;
pub mod host;
mod openmp;
mod perfmap;
mod split;
mod support;
pub(crate) mod veclib;

pub use abi::{Descriptors, EntryFn};

/// Stack of a thread that compiles (a part of a module, or a whole graph in the background):
/// MLIR and LLVM recurse over large functions, and a spawned thread's default (2 MiB) is a
/// quarter of the main thread's.
pub const COMPILE_STACK: usize = 16 << 20;

use crate::dumps::Dumps;
use crate::error::{Error, Result};
use crate::target::Target;
use inkwell::{
    AddressSpace, OptimizationLevel,
    attributes::{Attribute, AttributeLoc},
    context::Context as LlvmContext,
    module::{Linkage, Module as LlvmModule},
    passes::PassBuilderOptions,
    targets::{CodeModel, RelocMode, TargetMachine},
};
use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetExecutionSession, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup,
    LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCLookupSet, LLVMOrcCSymbolMapPair, LLVMOrcCreateCustomCAPIDefinitionGenerator,
    LLVMOrcDefinitionGeneratorRef, LLVMOrcDisposeMaterializationUnit,
    LLVMOrcExecutionSessionSetErrorReporter, LLVMOrcJITDylibAddGenerator, LLVMOrcJITDylibDefine,
    LLVMOrcJITDylibLookupFlags, LLVMOrcJITDylibRef, LLVMOrcLookupKind, LLVMOrcLookupStateRef,
    LLVMOrcRetainSymbolStringPoolEntry, LLVMOrcSymbolStringPoolEntryStr,
};
use melior::ir::Module;
use std::ffi::{CStr, CString, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The name of the packed entry point: `void fxmlir_entry(void **descriptors)`.
pub const ENTRY: &str = "fxmlir_entry";

/// A target machine for `target`. Position-independent code in the small code model: JITLink
/// places an object's sections together anywhere in the address space and reaches external
/// functions through the GOT and stubs it builds.
fn target_machine(target: &Target) -> Result<TargetMachine> {
    crate::target::initialize_llvm()?;
    let triple = inkwell::targets::TargetTriple::create(&target.triple);
    let llvm_target =
        inkwell::targets::Target::from_triple(&triple).map_err(|e| Error::Llvm(e.to_string()))?;
    llvm_target
        .create_target_machine(
            &triple,
            &target.cpu,
            &target.llvm_features,
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Small,
        )
        .ok_or_else(|| Error::Llvm(format!("no target machine for {}", target.triple)))
}

/// Machine code for one graph, linked into an LLJIT that owns its memory.
pub struct Kernel {
    /// Owns the code `entry` points into; only its drop matters.
    _jit: Jit,
    entry: EntryFn,
}

impl Kernel {
    pub fn entry(&self) -> EntryFn {
        self.entry
    }
}

/// An ORC LLJIT holding one kernel's linked object, disposed (code memory freed) on drop, and
/// the errors its execution session reported (the causes behind a failed lookup), which must
/// outlive the LLJIT: fields drop after `Drop::drop` has disposed of it.
struct Jit(LLVMOrcLLJITRef, Box<Mutex<Vec<String>>>);

// SAFETY: after `load` the LLJIT is never used again except by `drop`, which needs `&mut self`;
// calls go through `Kernel::entry`, a plain function pointer to reentrant machine code.
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

impl Jit {
    /// The address of an exported symbol, linking the objects at the first call.
    fn lookup(&self, name: &str) -> std::result::Result<u64, String> {
        let name = CString::new(name).map_err(|e| e.to_string())?;
        let mut address = 0;
        // SAFETY: a lookup in a live LLJIT with a valid C string, writing the address.
        let err = unsafe { LLVMOrcLLJITLookup(self.0, &mut address, name.as_ptr()) };
        // SAFETY: `err` is the live (or null) error just returned.
        unsafe { take_error(err) }.map(|()| address)
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from LLVMOrcCreateLLJIT and is disposed exactly once, here.
        let err = unsafe { LLVMOrcDisposeLLJIT(self.0) };
        // SAFETY: `err` is the live (or null) error the call above returned.
        if let Err(e) = unsafe { take_error(err) } {
            tracing::warn!("disposing of a kernel's JIT: {e}");
        }
    }
}

/// Ok for a null error; otherwise the message of an error, which this consumes.
///
/// # Safety
/// `err` must be null or a live error that nothing else consumes.
unsafe fn take_error(err: LLVMErrorRef) -> std::result::Result<(), String> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: per the contract, `err` is live; LLVMGetErrorMessage consumes it and returns a
    // C string that is freed with LLVMDisposeErrorMessage.
    unsafe {
        let message = LLVMGetErrorMessage(err);
        let text = CStr::from_ptr(message).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(message);
        Err(text)
    }
}

/// Timings of the LLVM side of a compile.
#[derive(Debug, Default, Clone)]
pub struct JitTimings {
    pub translate: Duration,
    /// Wall time until every part is optimised.
    pub optimize: Duration,
    /// Wall time of the rest: machine code emission into object files.
    pub codegen: Duration,
}

/// Translates an LLVM-dialect module whose function `name` has the C interface, optimises it
/// and emits relocatable objects for `target`, one per part of a large module compiled in
/// parallel (load them together with [`load`]). `arg_count` is the number of memref arguments.
/// LLVM unrolls only the loops the `loops` stage marked (see [`crate::pipeline::windows`]).
pub fn compile(
    module: &Module,
    name: &str,
    arg_count: usize,
    dumps: Option<&Dumps>,
    target: &Target,
) -> Result<(Vec<Vec<u8>>, JitTimings)> {
    let mut timings = JitTimings::default();
    let ctx = LlvmContext::create();

    let start = Instant::now();
    // SAFETY: `module` is a valid LLVM-dialect module and `ctx` a live LLVM context of the same
    // LLVM build; the translation returns a new module owned by that context (or null).
    let raw = unsafe {
        mlir_sys::mlirTranslateModuleToLLVMIR(
            module.as_operation().to_raw(),
            ctx.raw() as mlir_sys::LLVMContextRef,
        )
    };
    if raw.is_null() {
        return Err(Error::Llvm(
            "translation of the LLVM dialect to LLVM IR failed".to_string(),
        ));
    }
    // SAFETY: `raw` is a fresh module in `ctx`; inkwell takes ownership, and the module is
    // dropped before `ctx` (declared later, dropped earlier).
    let llvm: LlvmModule<'_> = unsafe { LlvmModule::new(raw as llvm_sys::prelude::LLVMModuleRef) };
    timings.translate = start.elapsed();

    let machine = target_machine(target)?;
    llvm.set_triple(&machine.get_triple());
    llvm.set_data_layout(&machine.get_target_data().get_data_layout());
    let cpu = ctx.create_string_attribute("target-cpu", &target.cpu);
    let features = ctx.create_string_attribute("target-features", &target.llvm_features);
    for function in llvm.get_functions() {
        if function.count_basic_blocks() > 0 {
            function.add_attribute(AttributeLoc::Function, cpu);
            function.add_attribute(AttributeLoc::Function, features);
        }
        // A parallel region outlined by the OpenMP translation (`<f>..omp_par`) keeps the
        // vector width its function asked for (`polynomials::inline`).
        let name = function.get_name().to_string_lossy().into_owned();
        if let Some((parent, _)) = name.split_once("..omp_par")
            && let Some(width) = llvm
                .get_function(parent)
                .and_then(|f| f.get_string_attribute(AttributeLoc::Function, "prefer-vector-width"))
        {
            function.add_attribute(AttributeLoc::Function, width);
        }
    }
    add_entry(&ctx, &llvm, name, arg_count, cpu, features)?;
    inline_into_entry(&ctx, &llvm, name, &machine)?;
    openmp::check(&llvm)?;
    let vectorised = veclib::annotate(&ctx, &llvm, target)?;
    tracing::debug!(calls = vectorised, "math calls given libmvec variants");
    if let Some(d) = dumps {
        d.write("unoptimized.ll", &llvm.print_to_string().to_string())?;
    }

    let output = split::optimise(&llvm, target, dumps.is_some())?;
    timings.optimize = output.optimize;
    timings.codegen = output.codegen;
    if let Some(d) = dumps {
        d.write("ll", &joined_ir(&output.parts))?;
    }
    Ok((
        output.parts.into_iter().map(|p| p.object).collect(),
        timings,
    ))
}

/// The optimised IR of a module's parts: as is for one part, else each part after a
/// `; part N` line.
fn joined_ir(parts: &[split::Part]) -> String {
    match parts {
        [one] => one.ir.clone().unwrap_or_default(),
        _ => parts
            .iter()
            .enumerate()
            .map(|(i, p)| format!("; part {i}\n{}", p.ir.as_deref().unwrap_or_default()))
            .collect(),
    }
}

/// Links the objects of a kernel from [`compile`] (or the compile cache) into a fresh LLJIT,
/// all in its one JITDylib so that calls between parts link, and finds the entry point.
/// External symbols resolve through `abi::resolve`; an object that does not parse, or
/// references a symbol it cannot resolve, is an error, never a crash.
pub fn load<O: AsRef<[u8]>>(objects: &[O]) -> Result<Kernel> {
    crate::target::initialize_llvm()?;
    let mut raw: LLVMOrcLLJITRef = std::ptr::null_mut();
    // SAFETY: a null builder asks for a default one; on success `raw` is an LLJIT we own.
    let err = unsafe { LLVMOrcCreateLLJIT(&mut raw, std::ptr::null_mut()) };
    // SAFETY: `err` is the live (or null) error just returned.
    unsafe { take_error(err) }.map_err(|e| Error::Llvm(format!("cannot create the JIT: {e}")))?;
    let jit = Jit(raw, Box::default());
    // SAFETY: `jit.0` is a live LLJIT. The reporter's context is the error list `jit` owns,
    // alive (at a stable address) until after the LLJIT is disposed of. The main JITDylib
    // belongs to the LLJIT; it takes ownership of the generator (whose callback needs no
    // context).
    let dylib = unsafe {
        LLVMOrcExecutionSessionSetErrorReporter(
            LLVMOrcLLJITGetExecutionSession(jit.0),
            report_session_error,
            std::ptr::from_ref::<Mutex<Vec<String>>>(&jit.1)
                .cast_mut()
                .cast(),
        );
        let dylib = LLVMOrcLLJITGetMainJITDylib(jit.0);
        LLVMOrcJITDylibAddGenerator(
            dylib,
            LLVMOrcCreateCustomCAPIDefinitionGenerator(
                define_externals,
                std::ptr::null_mut(),
                dispose_generator,
            ),
        );
        dylib
    };
    for object in objects {
        let object = object.as_ref();
        // SAFETY: `dylib` is the live LLJIT's main JITDylib; the JIT takes ownership of the
        // copied object buffer.
        let err = unsafe {
            let buffer = llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy(
                object.as_ptr().cast(),
                object.len(),
                c"fxmlir-kernel".as_ptr(),
            );
            LLVMOrcLLJITAddObjectFile(jit.0, dylib, buffer)
        };
        // SAFETY: `err` is the live (or null) error just returned.
        unsafe { take_error(err) }
            .map_err(|e| Error::Llvm(format!("cannot add an object to the JIT: {e}")))?;
    }
    // Linking happens at the first lookup, which resolves the objects' external symbols
    // through the generator.
    let address = jit.lookup(ENTRY).map_err(|e| {
        let causes = jit.1.lock().map(|c| c.join("; ")).unwrap_or_default();
        if causes.is_empty() {
            Error::Llvm(format!("cannot link the kernel: {e}"))
        } else {
            Error::Llvm(format!("cannot link the kernel: {causes} ({e})"))
        }
    })?;
    if perfmap::enabled() {
        perfmap::record(objects, &|name| jit.lookup(name).ok());
    }
    if address == 0 {
        return Err(Error::Llvm(
            "the entry point has a null address".to_string(),
        ));
    }
    // SAFETY: `address` is the linked `fxmlir_entry`, whose LLVM type is `void (ptr)`; the code
    // lives as long as `jit`, which the returned Kernel owns.
    let entry: EntryFn = unsafe { std::mem::transmute::<usize, EntryFn>(address as usize) };
    Ok(Kernel { _jit: jit, entry })
}

/// ORC's definition generator for a kernel's JITDylib: every symbol the object needs and does
/// not define is looked up with [`abi::resolve`] and defined as an absolute symbol. A symbol it
/// cannot resolve stays undefined, so the link fails with ORC's "symbols not found" error.
extern "C" fn define_externals(
    _generator: LLVMOrcDefinitionGeneratorRef,
    _context: *mut c_void,
    _state: *mut LLVMOrcLookupStateRef,
    _kind: LLVMOrcLookupKind,
    dylib: LLVMOrcJITDylibRef,
    _flags: LLVMOrcJITDylibLookupFlags,
    names: LLVMOrcCLookupSet,
    count: usize,
) -> LLVMErrorRef {
    let mut symbols = Vec::new();
    for i in 0..count {
        // SAFETY: ORC passes `count` valid lookup-set elements whose names are live pool
        // entries; the returned C string lives as long as the entry.
        let (entry, name) = unsafe {
            let entry = (*names.add(i)).Name;
            (
                entry,
                CStr::from_ptr(LLVMOrcSymbolStringPoolEntryStr(entry)),
            )
        };
        let Some(address) = name.to_str().ok().and_then(abi::resolve) else {
            continue;
        };
        // SAFETY: LLVMOrcAbsoluteSymbols takes ownership of one reference to each name.
        unsafe { LLVMOrcRetainSymbolStringPoolEntry(entry) };
        symbols.push(LLVMOrcCSymbolMapPair {
            Name: entry,
            Sym: LLVMJITEvaluatedSymbol {
                Address: address as u64,
                Flags: LLVMJITSymbolFlags {
                    GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported
                        as u8
                        | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
                    TargetFlags: 0,
                },
            },
        });
    }
    if symbols.is_empty() {
        return std::ptr::null_mut();
    }
    // SAFETY: `symbols` holds retained names and addresses; the unit takes them over. Defining
    // it in `dylib` (the JITDylib being searched) transfers the unit on success; on failure it
    // stays ours to dispose of, and the error goes back to ORC.
    unsafe {
        let unit = LLVMOrcAbsoluteSymbols(symbols.as_mut_ptr(), symbols.len());
        let err = LLVMOrcJITDylibDefine(dylib, unit);
        if !err.is_null() {
            LLVMOrcDisposeMaterializationUnit(unit);
        }
        err
    }
}

/// The generator keeps no state.
extern "C" fn dispose_generator(_context: *mut c_void) {}

/// Errors ORC reports outside a lookup (a lookup returns its own failure to [`load`]).
extern "C" fn report_session_error(context: *mut c_void, err: LLVMErrorRef) {
    // SAFETY: ORC hands the reporter ownership of a live error.
    if let Err(e) = unsafe { take_error(err) } {
        tracing::debug!("ORC: {e}");
        // SAFETY: the context is the error list of the `Jit` whose session reports, which
        // outlives the session (see `load`).
        let errors = unsafe { &*context.cast::<Mutex<Vec<String>>>() };
        if let Ok(mut errors) = errors.lock() {
            errors.push(e);
        }
    }
}

/// Fork wrappers of at most this many instructions (before optimisation) are inlined into the
/// entry point: an outlined parallel op is one (a few stores and the fork).
const MAX_INLINED_FORK: usize = 64;

/// Inlines the graph function `name` and its C-interface wrapper into the entry point, so that
/// the descriptors' fields are loaded where they are used. As calls, they pass every memref
/// as a descriptor expanded into scalars, hundreds of arguments for a model, and instruction
/// selection of such a call and of the callee's formal arguments grows faster than linearly:
/// on BERT (57 memrefs, 400 scalars) those two functions were a third of code generation.
/// The outlined functions that only start a parallel region go into the entry point too (the
/// region itself stays a function of its own): each function costs LLVM a pass pipeline of
/// its own, and a fork wrapper is a few instructions (3% fewer compile instructions over the
/// model cases).
fn inline_into_entry(
    ctx: &LlvmContext,
    llvm: &LlvmModule<'_>,
    name: &str,
    machine: &TargetMachine,
) -> Result<()> {
    let always = ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("alwaysinline"), 0);
    for wrapper in [name.to_string(), format!("_mlir_ciface_{name}")] {
        let function = llvm
            .get_function(&wrapper)
            .ok_or_else(|| Error::Llvm(format!("`{wrapper}` is missing")))?;
        function.set_linkage(Linkage::Internal);
        function.add_attribute(AttributeLoc::Function, always);
    }
    for function in openmp::forking_functions(llvm) {
        if split::instruction_count(function) <= MAX_INLINED_FORK {
            function.remove_enum_attribute(
                AttributeLoc::Function,
                Attribute::get_named_enum_kind_id("noinline"),
            );
            function.add_attribute(AttributeLoc::Function, always);
        }
    }
    llvm.run_passes("always-inline", machine, PassBuilderOptions::create())
        .map_err(|e| Error::Llvm(format!("inlining into the entry point failed: {e}")))
}

/// Adds `void fxmlir_entry(ptr argv)` calling `_mlir_ciface_<name>(argv[0], …, argv[n-1])`.
fn add_entry<'ctx>(
    ctx: &'ctx LlvmContext,
    llvm: &LlvmModule<'ctx>,
    name: &str,
    arg_count: usize,
    cpu: inkwell::attributes::Attribute,
    features: inkwell::attributes::Attribute,
) -> Result<()> {
    let err = |e: inkwell::builder::BuilderError| Error::Llvm(e.to_string());
    let ciface = llvm
        .get_function(&format!("_mlir_ciface_{name}"))
        .ok_or_else(|| Error::Llvm(format!("`_mlir_ciface_{name}` is missing")))?;
    let ptr = ctx.ptr_type(AddressSpace::default());
    let entry = llvm.add_function(ENTRY, ctx.void_type().fn_type(&[ptr.into()], false), None);
    entry.add_attribute(AttributeLoc::Function, cpu);
    entry.add_attribute(AttributeLoc::Function, features);
    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(entry, "entry"));
    let argv = entry
        .get_nth_param(0)
        .ok_or_else(|| Error::Llvm("entry has no parameter".to_string()))?
        .into_pointer_value();
    let mut args = Vec::with_capacity(arg_count);
    for i in 0..arg_count {
        let index = ctx.i64_type().const_int(i as u64, false);
        // SAFETY: argv points to `arg_count` pointers; `i` is in range by construction.
        let slot = unsafe { builder.build_gep(ptr, argv, &[index], "slot") }.map_err(err)?;
        args.push(builder.build_load(ptr, slot, "desc").map_err(err)?.into());
    }
    builder.build_call(ciface, &args, "").map_err(err)?;
    builder.build_return(None).map_err(err)?;
    Ok(())
}
