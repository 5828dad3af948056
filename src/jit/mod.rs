//! LLVM dialect → LLVM IR → host-tuned O2 → machine code. The MLIR module is translated straight
//! into an inkwell context (one LLVM serves melior and inkwell), every function gets the host's
//! `target-cpu`/`target-features`, a packed entry point is added, O2 runs for the host, and
//! MCJIT compiles it.

mod abi;
mod support;

pub use abi::{Descriptors, EntryFn};

use crate::error::{Error, Result};
use crate::pipeline::Dumps;
use inkwell::{
    AddressSpace, OptimizationLevel,
    attributes::AttributeLoc,
    context::Context as LlvmContext,
    execution_engine::ExecutionEngine,
    module::Module as LlvmModule,
    passes::PassBuilderOptions,
    targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine},
};
use melior::ir::Module;
use std::mem::ManuallyDrop;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The name of the packed entry point: `void fxmlir_entry(void **descriptors)`.
pub const ENTRY: &str = "fxmlir_entry";

/// Host CPU name and features, read once.
pub struct Host {
    pub triple: String,
    pub cpu: String,
    pub features: String,
}

pub fn host() -> Result<&'static Host> {
    static HOST: OnceLock<std::result::Result<Host, String>> = OnceLock::new();
    HOST.get_or_init(|| {
        Target::initialize_native(&InitializationConfig::default())?;
        Ok(Host {
            triple: TargetMachine::get_default_triple()
                .as_str()
                .to_string_lossy()
                .into_owned(),
            cpu: TargetMachine::get_host_cpu_name().to_string(),
            features: TargetMachine::get_host_cpu_features().to_string(),
        })
    })
    .as_ref()
    .map_err(|e| Error::Llvm(format!("cannot initialise the native target: {e}")))
}

fn target_machine(host: &Host) -> Result<TargetMachine> {
    let triple = inkwell::targets::TargetTriple::create(&host.triple);
    let target = Target::from_triple(&triple).map_err(|e| Error::Llvm(e.to_string()))?;
    target
        .create_target_machine(
            &triple,
            &host.cpu,
            &host.features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| Error::Llvm(format!("no target machine for {}", host.triple)))
}

/// Machine code for one graph, with the LLVM context and engine that own it.
pub struct Kernel {
    // Field order matters: the engine must go before the context it borrows.
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    context: ManuallyDrop<Box<LlvmContext>>,
    entry: EntryFn,
}

// SAFETY: after construction the engine is only used to keep the code alive; calls go through
// `entry`, a plain function pointer to reentrant machine code. Nothing mutates the engine or
// its context until `drop`, which needs `&mut self`.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SAFETY: each field is dropped exactly once, the engine (and its module) first.
        unsafe {
            ManuallyDrop::drop(&mut self.engine);
            ManuallyDrop::drop(&mut self.context);
        }
    }
}

impl Kernel {
    pub fn entry(&self) -> EntryFn {
        self.entry
    }
}

/// Timings of the LLVM side of a compile.
#[derive(Debug, Default, Clone)]
pub struct JitTimings {
    pub translate: Duration,
    pub optimize: Duration,
    pub codegen: Duration,
}

/// Translates an LLVM-dialect module whose function `name` has the C interface, optimises it
/// and JIT-compiles it. `arg_count` is the number of memref arguments.
pub fn compile(
    module: &Module,
    name: &str,
    arg_count: usize,
    dumps: Option<&Dumps>,
) -> Result<(Kernel, JitTimings)> {
    let host = host()?;
    let mut timings = JitTimings::default();
    let context: Box<LlvmContext> = Box::new(LlvmContext::create());
    // SAFETY: the context lives in a Box owned by the returned Kernel, which drops the engine
    // (the only holder of 'static borrows) before the context.
    let ctx: &'static LlvmContext = unsafe { &*(context.as_ref() as *const LlvmContext) };

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
    // SAFETY: `raw` is a fresh module in `ctx`; inkwell takes ownership.
    let llvm: LlvmModule<'static> =
        unsafe { LlvmModule::new(raw as llvm_sys::prelude::LLVMModuleRef) };
    timings.translate = start.elapsed();

    let machine = target_machine(host)?;
    llvm.set_triple(&machine.get_triple());
    llvm.set_data_layout(&machine.get_target_data().get_data_layout());
    let cpu = ctx.create_string_attribute("target-cpu", &host.cpu);
    let features = ctx.create_string_attribute("target-features", &host.features);
    for function in llvm.get_functions() {
        if function.count_basic_blocks() > 0 {
            function.add_attribute(AttributeLoc::Function, cpu);
            function.add_attribute(AttributeLoc::Function, features);
        }
    }
    add_entry(ctx, &llvm, name, arg_count, cpu, features)?;
    if let Some(d) = dumps {
        d.write("unoptimized.ll", &llvm.print_to_string().to_string())?;
    }

    let start = Instant::now();
    // O2, not O3: on fused linalg loop nests O3's extra unrolling and vectorisation cost 5-13x
    // the optimisation and codegen time and measured no faster (often slower); matrix
    // products arrive already vectorised by the schedule stage.
    llvm.run_passes("default<O2>", &machine, PassBuilderOptions::create())
        .map_err(|e| Error::Llvm(format!("optimisation failed: {e}")))?;
    timings.optimize = start.elapsed();
    if let Some(d) = dumps {
        d.write("ll", &llvm.print_to_string().to_string())?;
    }
    llvm.verify()
        .map_err(|e| Error::Llvm(format!("invalid LLVM IR: {e}")))?;

    let start = Instant::now();
    let declared: Vec<String> = llvm
        .get_functions()
        .filter(|f| f.count_basic_blocks() == 0)
        .map(|f| f.get_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("llvm."))
        .collect();
    let engine = llvm
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| Error::Llvm(format!("cannot create the JIT: {e}")))?;
    for symbol in &declared {
        let address = abi::resolve(symbol)
            .ok_or_else(|| Error::Llvm(format!("unresolved external symbol `{symbol}`")))?;
        let function = llvm
            .get_function(symbol)
            .ok_or_else(|| Error::Llvm(format!("`{symbol}` vanished from the module")))?;
        engine.add_global_mapping(&function, address);
    }
    let address = engine
        .get_function_address(ENTRY)
        .map_err(|e| Error::Llvm(format!("no entry point: {e:?}")))?;
    timings.codegen = start.elapsed();
    if address == 0 {
        return Err(Error::Llvm(
            "the entry point has a null address".to_string(),
        ));
    }
    // SAFETY: `address` is the JIT-compiled `fxmlir_entry`, whose LLVM type is `void (ptr)`.
    let entry: EntryFn = unsafe { std::mem::transmute::<usize, EntryFn>(address) };
    Ok((
        Kernel {
            engine: ManuallyDrop::new(engine),
            context: ManuallyDrop::new(context),
            entry,
        },
        timings,
    ))
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
