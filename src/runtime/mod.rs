//! Compiled graphs and their call path: one entry point, one memref descriptor per input and
//! output, data pointers patched in per call (zero copy; the caller owns every buffer). Kernels
//! come from the compile cache ([`cache`]) when an identical graph was compiled before.

pub mod cache;
pub mod dlpack;

use crate::context::Dialect;
use crate::dumps::Dumps;
use crate::error::{Check, Error, NodeSite, Result};
use crate::graph::{Graph, TensorMeta, dims, dims::Poly};
use crate::jit::{
    self, Descriptors, Kernel,
    host::{self, HostCalls},
};
use crate::pipeline::{self, Hook, StageEdit};
use crate::target::Target;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to compile.
#[derive(Debug, Clone)]
pub struct Options {
    /// A named pipeline from [`pipeline::PIPELINES`].
    pub pipeline: String,
    /// Write the interchange file, every stage's MLIR and the LLVM IR here. Kernels are then
    /// always compiled (never taken from a cache), so that every stage is dumped.
    pub dump_dir: Option<PathBuf>,
    /// The on-disk compile cache; `None` keeps kernels in this process only.
    pub cache_dir: Option<PathBuf>,
    /// The CPU to compile for, with the threads the kernel splits its large loops across
    /// (torch's intra-op thread count for the backend).
    pub target: Target,
    /// Stages added to, or replacing stages of, the pipeline, in order.
    pub stages: Vec<StageEdit>,
    /// IRDL dialects loaded into the compile's context before lowering.
    pub dialects: Vec<Dialect>,
    /// Native MLIR plugins, loaded: their passes may be named in stages, their dialects are
    /// registered with the compile's context.
    pub plugins: Vec<crate::native::Plugin>,
    /// Whether kernels check runtime values (indices) and report failures to the call path
    /// (see [`crate::lower::checked_nodes`]); off for modules a plugin's executor takes.
    pub checks: bool,
    /// What else changes the code, as its caller states it (the Python backend: the active
    /// plugins and their options).
    pub extensions_key: String,
}

impl Options {
    /// The default pipeline for `target`, with no dumps and no disk cache.
    pub fn new(target: Target) -> Options {
        Options {
            pipeline: "default".to_string(),
            dump_dir: None,
            cache_dir: None,
            target,
            stages: Vec::new(),
            dialects: Vec::new(),
            plugins: Vec::new(),
            checks: true,
            extensions_key: String::new(),
        }
    }

    /// The options that change the generated code, as one line of the cache key. Every field
    /// is named here, so a new one does not compile until it is either added or marked as not
    /// affecting code.
    pub fn fingerprint(&self) -> String {
        let Options {
            pipeline,
            dump_dir: _,
            cache_dir: _,
            target,
            stages,
            dialects,
            plugins,
            checks,
            extensions_key,
        } = self;
        let digest = |text: &str| cache::hex_digest(text.as_bytes());
        let stages: Vec<String> = stages
            .iter()
            .map(|edit| {
                let hook = match &edit.stage.hook {
                    Hook::Transform(script) => format!(" transform:{}", digest(script)),
                    Hook::Patterns(pdl) => format!(" pdl:{}", digest(pdl)),
                    hook => format!(" {hook:?}"),
                };
                format!(
                    "{:?}:{}:{}:{}{hook}",
                    edit.placement,
                    edit.anchor,
                    edit.stage.name,
                    digest(&edit.stage.pipeline)
                )
            })
            .collect();
        let dialects: Vec<String> = dialects.iter().map(|d| digest(&d.irdl)).collect();
        let plugins: Vec<String> = plugins
            .iter()
            .map(|p| format!("{:?}:{}", p.kind, p.digest))
            .collect();
        format!(
            "pipeline={pipeline:?} target={} stages=[{}] dialects=[{}] plugins=[{}] checks={checks} extensions={extensions_key:?}",
            target.describe(),
            stages.join(" "),
            dialects.join(" "),
            plugins.join(" ")
        )
    }
}

/// Where a compiled graph's kernel came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Lowered, optimised and compiled now.
    Compiled,
    /// The kernel of an identical graph compiled earlier in this process.
    Memory,
    /// Loaded from the on-disk compile cache.
    Disk,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Compiled => "compiled",
            Source::Memory => "memory",
            Source::Disk => "disk",
        }
    }
}

/// One stage's name and duration, in the order they ran.
pub type Timings = Vec<(String, Duration)>;

pub struct CompiledGraph {
    pub name: String,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
    pub timings: Timings,
    pub dumped: Vec<PathBuf>,
    pub source: Source,
    /// Problems met on the way, none of which failed the compile: optimisation stages skipped
    /// (the kernel is slower), compile cache problems (a damaged entry, an unwritable
    /// directory).
    pub warnings: Vec<String>,
    kernel: Arc<Kernel>,
    descriptors: Descriptors,
    /// The nodes whose checks the kernel reports (the status buffer's codes, from 1), and
    /// what PyTorch raises for each; empty when it has none.
    checks: Vec<(NodeSite, Check)>,
    /// The nodes the kernel has its host run ([`crate::lower::host_calls`]), by host call
    /// number.
    pub host_calls: Vec<NodeSite>,
    /// The size symbols of a kernel for every size in their ranges (see
    /// [`Self::call_with_sizes`]); empty for a kernel of fixed sizes.
    pub symbols: Vec<crate::graph::Symbol>,
    /// With symbols, the inputs' then the outputs' sizes and strides as polynomials over them.
    polys: Vec<(Vec<Poly>, Vec<Poly>)>,
}

/// A kernel for a validated graph: the one of an identical graph compiled earlier in this
/// process, else the one in the disk cache, else a new one (lowered, optimised, JIT-compiled
/// and stored in both caches). With a dump directory no cache is consulted, but both are
/// filled. The target must be one whose code runs on this host (see
/// [`Target::check_runs_here`]; [`build`] compiles for any target without running).
pub fn compile(graph: &Graph, json: Option<&str>, options: &Options) -> Result<CompiledGraph> {
    let span = tracing::info_span!("compile", graph = graph.name.as_str());
    let _guard = span.enter();
    options.target.check_runs_here()?;
    let total = Instant::now();
    let key = cache::Key::new(graph, options)?;
    let reuse = options.dump_dir.is_none();
    let mut timings = Timings::new();
    let mut dumped = Vec::new();
    let mut warnings = Vec::new();

    let remembered = if reuse {
        cache::memory_lookup(&key)
    } else {
        None
    };
    let (kernel, source) = if let Some(kernel) = remembered {
        (kernel, Source::Memory)
    } else {
        let start = Instant::now();
        let loaded = match &options.cache_dir {
            Some(dir) if reuse => cache::disk_lookup(dir, &key, &mut warnings),
            _ => None,
        };
        let (kernel, source) = match loaded {
            Some(kernel) => {
                timings.push(("cache-load".to_string(), start.elapsed()));
                (kernel, Source::Disk)
            }
            None => {
                let (kernel, built, files) =
                    build_and_load(graph, json, options, &key, &mut warnings)?;
                timings.extend(built);
                dumped = files;
                (kernel, Source::Compiled)
            }
        };
        let kernel = Arc::new(kernel);
        cache::memory_insert(&key, kernel.clone());
        (kernel, source)
    };
    timings.push(("total".to_string(), total.elapsed()));
    for (stage, t) in &timings {
        tracing::debug!(stage = stage.as_str(), ms = t.as_secs_f64() * 1e3, "timing");
    }

    let inputs: Vec<TensorMeta> = graph.inputs.iter().map(|i| i.meta.clone()).collect();
    let outputs: Vec<TensorMeta> = graph
        .outputs
        .iter()
        .map(|r| graph.meta(r).cloned())
        .collect::<Option<_>>()
        .ok_or_else(|| Error::InvalidGraph("an output has no metadata".to_string()))?;
    let checks = if options.checks {
        crate::lower::checked_nodes(graph)?
    } else {
        Vec::new()
    };
    let status: (&[i64], &[i64]) = (&[1], &[1]);
    let descriptors = Descriptors::new(
        inputs
            .iter()
            .chain(&outputs)
            .map(|m| (m.shape.as_slice(), m.strides.as_slice()))
            .chain((!checks.is_empty()).then_some(status)),
    );
    let host_calls = crate::lower::host_calls(graph)?;
    let polys = match graph.symbols.is_empty() {
        true => Vec::new(),
        false => inputs
            .iter()
            .chain(&outputs)
            .map(|m| {
                let of = |sizes: &[i64]| sizes.iter().map(|&d| dims::poly_of(d)).collect();
                (of(&m.shape), of(&m.strides))
            })
            .collect(),
    };
    tracing::info!(
        graph = graph.name.as_str(),
        source = source.as_str(),
        ms = total.elapsed().as_secs_f64() * 1e3,
        "kernel ready"
    );
    Ok(CompiledGraph {
        name: graph.name.clone(),
        inputs,
        outputs,
        timings,
        dumped,
        source,
        warnings,
        kernel,
        descriptors,
        checks,
        host_calls,
        symbols: graph.symbols.clone(),
        polys,
    })
}

/// The timing of machine code emission (and, for a loaded kernel, linking).
const CODEGEN: &str = "codegen";

/// A kernel's objects compiled from scratch, with its stage timings and dump files.
pub struct Build {
    /// Relocatable objects for the target, one per part of the module.
    pub objects: Vec<Vec<u8>>,
    pub timings: Timings,
    pub dumped: Vec<PathBuf>,
    /// Optimisation stages skipped (the kernel is correct but slower).
    pub warnings: Vec<String>,
}

/// Lowers, runs the pipeline's stages and emits machine code for `options.target`, which need
/// not be this host: nothing is loaded or run, and no cache is read or written. With a dump
/// directory every stage's IR and the LLVM IR are written there, so that another machine's
/// compile can be reproduced and inspected anywhere.
pub fn build(graph: &Graph, json: Option<&str>, options: &Options) -> Result<Build> {
    let (objects, front) = front(graph, json, options, None, |module, dumps, front| {
        let checks = options.checks && !crate::lower::checked_nodes(graph)?.is_empty();
        let arg_count = graph.inputs.len() + graph.outputs.len() + usize::from(checks);
        let _s = tracing::debug_span!("jit").entered();
        let (objects, jt) = jit::compile(module, &graph.name, arg_count, dumps, &options.target)?;
        if let Some(d) = dumps {
            front.dumped.push(d.path("ll"));
        }
        front.timings.push(("translate".to_string(), jt.translate));
        // Wall times: a large module is optimised and compiled in parts, in parallel.
        front.timings.push(("llvm-opt".to_string(), jt.optimize));
        // Object emission (to which loading adds linking).
        front.timings.push((CODEGEN.to_string(), jt.codegen));
        Ok(objects)
    })?;
    Ok(Build {
        objects,
        timings: front.timings,
        dumped: front.dumped,
        warnings: front.warnings,
    })
}

/// The module after the stage named `stage` (no later stage runs, nothing is compiled to
/// machine code): its text, printed with locations, and its bytecode. What a plugin's
/// executor takes (see `fxmlir.plugins.Executor`).
pub fn lower_to(
    graph: &Graph,
    json: Option<&str>,
    options: &Options,
    stage: &str,
) -> Result<(String, Vec<u8>)> {
    let (module, _) = front(graph, json, options, Some(stage), |module, _, _| {
        Ok((
            pipeline::print_module(module),
            melior::ir::operation::OperationLike::write_bytecode(&module.as_operation()),
        ))
    })?;
    Ok(module)
}

/// The graph lowered to MLIR, before any stage: the `00-input` module, printed with
/// locations.
pub fn lowered(graph: &Graph, options: &Options) -> Result<String> {
    in_context(options, |context| {
        let module = crate::lower::lower_graph(context, graph, &options.target, options.checks)?;
        pipeline::verify(context, &module, &graph.name)?;
        Ok(pipeline::print_module(&module))
    })
}

/// Runs the stages of `options` on an MLIR module given as text or bytecode, through the
/// stage named `last` (all of them without one), and prints the result with locations. Its
/// dumps, if any, are named `module.NN-<stage>.mlir`.
pub fn run_stages_on(mlir: &[u8], options: &Options, last: Option<&str>) -> Result<String> {
    let stages = stages_through(options, last)?;
    let dumps = dumps_for(options, "module");
    in_context(options, |context| {
        let diagnostics = pipeline::Diagnostics::capture(context);
        // SAFETY: the string ref points into `mlir`, alive for the call; MLIR's parser reads
        // text or bytecode alike.
        let raw = unsafe {
            mlir_sys::mlirModuleCreateParse(
                context.to_raw(),
                mlir_sys::MlirStringRef {
                    data: mlir.as_ptr().cast(),
                    length: mlir.len(),
                },
            )
        };
        if raw.ptr.is_null() {
            return Err(Error::InvalidGraph(format!(
                "the MLIR does not parse:\n{}",
                diagnostics.take()
            )));
        }
        drop(diagnostics);
        // SAFETY: a module just parsed in `context`, owned from here on.
        let mut module = unsafe { melior::ir::Module::from_raw(raw) };
        run(context, &mut module, &stages, dumps.as_ref(), options)?;
        Ok(pipeline::print_module(&module))
    })
}

/// The stages of `options`'s pipeline with its edits, through the stage named `last` (all
/// without one).
fn stages_through(options: &Options, last: Option<&str>) -> Result<Vec<pipeline::Stage>> {
    let mut stages = pipeline::edited(&options.pipeline, &options.stages)?;
    if let Some(last) = last {
        let at = stages
            .iter()
            .position(|s| s.name == last)
            .ok_or_else(|| Error::PassPipeline {
                pipeline: options.pipeline.clone(),
                message: format!("no stage `{last}` to stop after"),
            })?;
        stages.truncate(at + 1);
    }
    Ok(stages)
}

/// Where the dumps of the graph `graph` go, if `options` asks for dumps.
fn dumps_for(options: &Options, graph: &str) -> Option<Dumps> {
    options.dump_dir.as_ref().map(|dir| Dumps {
        dir: dir.clone(),
        graph: graph.to_string(),
        irdl: crate::context::irdl_of(&options.dialects),
    })
}

/// Runs `stages` on `module` for the target and dialects of `options`.
fn run<'c>(
    context: &'c melior::Context,
    module: &mut melior::ir::Module<'c>,
    stages: &[pipeline::Stage],
    dumps: Option<&Dumps>,
    options: &Options,
) -> Result<pipeline::Ran> {
    let irdl = crate::context::irdl_of(&options.dialects);
    pipeline::run_stages(context, module, stages, dumps, 1, &options.target, &irdl)
}

/// Runs `f` in a fresh context holding fxmlir's dialect, the dialects of `options` and those
/// of its native plugins.
fn in_context<T>(options: &Options, f: impl FnOnce(&melior::Context) -> Result<T>) -> Result<T> {
    let context = crate::context::new_context()?;
    // Alive as long as the context, which refers to the dialects they define.
    let _dialects = crate::context::load_dialects(&context, &options.dialects)?;
    for plugin in &options.plugins {
        plugin.register_dialects(&context);
    }
    f(&context)
}

/// What the stages of a compile leave beside the module: timings, dump files, warnings.
#[derive(Default)]
struct Front {
    timings: Timings,
    dumped: Vec<PathBuf>,
    warnings: Vec<String>,
}

/// Lowers `graph` and runs the pipeline's stages (up to and including `stop`, when given)
/// in a fresh context, dumping as it goes, then hands the module to `finish`.
fn front<T>(
    graph: &Graph,
    json: Option<&str>,
    options: &Options,
    stop: Option<&str>,
    finish: impl FnOnce(&melior::ir::Module, Option<&Dumps>, &mut Front) -> Result<T>,
) -> Result<(T, Front)> {
    let dumps = dumps_for(options, &graph.name);
    let mut front = Front::default();
    if let (Some(d), Some(text)) = (&dumps, json) {
        front.dumped.push(d.write("fx.json", text)?);
    }
    let stages = stages_through(options, stop)?;
    let start = Instant::now();
    in_context(options, |context| {
        front.timings.push(("context".to_string(), start.elapsed()));
        let start = Instant::now();
        let mut module = {
            let _s = tracing::debug_span!("lower").entered();
            crate::lower::lower_graph(context, graph, &options.target, options.checks)?
        };
        pipeline::verify(context, &module, &graph.name)?;
        front.timings.push(("lower".to_string(), start.elapsed()));
        if let Some(d) = &dumps {
            front
                .dumped
                .push(d.write("00-input.mlir", &pipeline::print_module(&module))?);
            front.dumped.push(d.path(crate::dumps::IRDL_SUFFIX));
        }
        let ran = run(context, &mut module, &stages, dumps.as_ref(), options)?;
        front.timings.extend(ran.timings);
        front.warnings = ran.skipped;
        if let Some(d) = &dumps {
            for (i, stage) in stages.iter().enumerate() {
                // Written unless the transform script could not be built.
                let transform = d.path(&pipeline::transform_dump_suffix(i + 1, stage));
                if stage.hook.has_script() && transform.exists() {
                    front.dumped.push(transform);
                }
                front
                    .dumped
                    .push(d.path(&format!("{:02}-{}.mlir", i + 1, stage.name)));
            }
        }
        let value = finish(&module, dumps.as_ref(), &mut front)?;
        Ok((value, front))
    })
}

/// [`build`], then links the objects into a kernel and stores them in the disk cache (if
/// there is one).
fn build_and_load(
    graph: &Graph,
    json: Option<&str>,
    options: &Options,
    key: &cache::Key,
    warnings: &mut Vec<String>,
) -> Result<(Kernel, Timings, Vec<PathBuf>)> {
    let Build {
        objects,
        mut timings,
        dumped,
        warnings: skipped,
    } = build(graph, json, options)?;
    let degraded = !skipped.is_empty();
    warnings.extend(skipped);
    let start = Instant::now();
    let kernel = jit::load(&objects)?;
    // Object emission and linking: `codegen` ends with callable machine code.
    if let Some((_, codegen)) = timings.iter_mut().find(|(stage, _)| stage == CODEGEN) {
        *codegen += start.elapsed();
    }
    // A kernel built with a stage skipped is not stored: every new process compiles it again
    // and reports why it is slower.
    if let (Some(dir), false) = (&options.cache_dir, degraded) {
        let start = Instant::now();
        cache::store(dir, key, &objects, warnings);
        timings.push(("cache-store".to_string(), start.elapsed()));
    }
    Ok((kernel, timings, dumped))
}

impl CompiledGraph {
    /// A new tensor for output `index`, laid out as compiled, in a block of fxmlir's allocator
    /// (see [`dlpack`]); the caller hands it to a DLPack consumer.
    /// For a kernel with size symbols, `sizes` are their values (see [`Self::sized`]).
    pub fn allocate_output(
        &self,
        index: usize,
        sizes: &[i64],
    ) -> Result<*mut dlpack::ManagedTensor> {
        let sized;
        let outputs = if self.symbols.is_empty() && sizes.is_empty() {
            &self.outputs
        } else {
            sized = self.sized(sizes)?.1;
            &sized
        };
        let meta = outputs.get(index).ok_or_else(|| {
            Error::Call(format!(
                "graph `{}` has {} outputs, not {}",
                self.name,
                self.outputs.len(),
                index + 1
            ))
        })?;
        dlpack::allocate(meta)
    }

    /// Runs the kernel on data pointers: the inputs, then the outputs, in graph order.
    ///
    /// # Safety
    /// Each pointer must address a buffer laid out as the matching entry of `inputs`/`outputs`
    /// records (shape, strides, dtype), valid for the duration of the call; output buffers
    /// must not overlap inputs or each other.
    ///
    /// A failed runtime check (an index out of range, an integer division by zero) is
    /// [`Error::Checked`] naming the node,
    /// after the call (the kernel never reads or writes out of bounds).
    ///
    /// `host` runs the kernel's host calls (its collectives, [`Self::host_calls`]); a kernel
    /// that has some cannot run without it, and a host call that fails is
    /// [`Error::HostCall`] naming its node.
    pub unsafe fn call(&self, pointers: &[usize], host: Option<&dyn HostCalls>) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.call_with_sizes(pointers, &[], host) }
    }

    /// The inputs' and outputs' metadata for `sizes`, the values of the kernel's size symbols
    /// in order; an error naming a symbol whose value is outside its range.
    pub fn sized(&self, sizes: &[i64]) -> Result<(Vec<TensorMeta>, Vec<TensorMeta>)> {
        let mut layouts = self.layouts(sizes)?.into_iter();
        let mut concrete = |metas: &[TensorMeta]| -> Vec<TensorMeta> {
            metas
                .iter()
                .zip(layouts.by_ref())
                .map(|(m, (shape, strides))| TensorMeta {
                    shape,
                    strides,
                    ..m.clone()
                })
                .collect()
        };
        let inputs = concrete(&self.inputs);
        Ok((inputs, concrete(&self.outputs)))
    }

    /// The inputs' then the outputs' `(shape, strides)` for `sizes` (see [`Self::sized`]),
    /// evaluated from the polynomials read off the metadata at compile time.
    fn layouts(&self, sizes: &[i64]) -> Result<Vec<(Vec<i64>, Vec<i64>)>> {
        if sizes.len() != self.symbols.len() {
            return Err(Error::Call(format!(
                "graph `{}` has {} size symbols, got {} values",
                self.name,
                self.symbols.len(),
                sizes.len()
            )));
        }
        let mut bindings = std::collections::HashMap::new();
        for (symbol, &value) in self.symbols.iter().zip(sizes) {
            if value < symbol.min || value > symbol.max {
                return Err(Error::Call(format!(
                    "graph `{}`: size {} = {value} is outside the range [{}, {}] it was compiled \
                     for",
                    self.name, symbol.name, symbol.min, symbol.max
                )));
            }
            bindings.insert(symbol.name.clone(), value);
        }
        if self.symbols.is_empty() {
            return Ok(self
                .inputs
                .iter()
                .chain(&self.outputs)
                .map(|m| (m.shape.clone(), m.strides.clone()))
                .collect());
        }
        let evaluate = |polys: &[Poly]| -> Result<Vec<i64>> {
            polys
                .iter()
                .map(|p| {
                    p.eval(&bindings).ok_or_else(|| {
                        Error::Call(format!("graph `{}`: a size overflows", self.name))
                    })
                })
                .collect()
        };
        self.polys
            .iter()
            .map(|(shape, strides)| Ok((evaluate(shape)?, evaluate(strides)?)))
            .collect()
    }

    /// The descriptors of a call with `sizes` (see [`Self::sized`]); `None` for a kernel of
    /// fixed sizes called without any.
    fn descriptors_for(&self, sizes: &[i64]) -> Result<Option<Descriptors>> {
        if self.symbols.is_empty() && sizes.is_empty() {
            return Ok(None);
        }
        let mut layouts = self.layouts(sizes)?;
        if !self.checks.is_empty() {
            layouts.push((vec![1], vec![1]));
        }
        Ok(Some(Descriptors::new(
            layouts.iter().map(|(a, b)| (a.as_slice(), b.as_slice())),
        )))
    }

    /// [`Self::call`] of a kernel compiled for symbolic sizes, with `sizes` the values of its
    /// size symbols ([`Self::symbols`], in order): the buffers are laid out as the recorded
    /// shapes and strides evaluate to. A value outside its symbol's range is an error.
    ///
    /// # Safety
    /// As [`Self::call`], with the layouts `sizes` give.
    pub unsafe fn call_with_sizes(
        &self,
        pointers: &[usize],
        sizes: &[i64],
        host: Option<&dyn HostCalls>,
    ) -> Result<()> {
        let buffers = self.inputs.len() + self.outputs.len();
        if pointers.len() != buffers {
            return Err(Error::Call(format!(
                "graph `{}` takes {buffers} buffers ({} inputs, {} outputs), got {}",
                self.name,
                self.inputs.len(),
                self.outputs.len(),
                pointers.len()
            )));
        }
        if let (Some(first), None) = (self.host_calls.first(), host) {
            return Err(Error::Call(format!(
                "graph `{}` runs collectives in PyTorch's c10d ({first}), which only the \
                 Python call path can do",
                self.name
            )));
        }
        let mut status = [0i64];
        let mut all = pointers.to_vec();
        if !self.checks.is_empty() {
            all.push(status.as_mut_ptr() as usize);
        }
        let sized = self.descriptors_for(sizes)?;
        let (_words, mut argv) = sized.as_ref().unwrap_or(&self.descriptors).bind(&all);
        // SAFETY: the caller guarantees the buffers (the status buffer is this frame's);
        // `argv` points to one live descriptor (in `_words`, alive until the end of the call)
        // per memref argument, in order.
        let ((), failed) =
            host::scoped(host, || unsafe { (self.kernel.entry())(argv.as_mut_ptr()) });
        if let Some((number, message)) = failed {
            let site = self.host_calls.get(number).cloned().ok_or_else(|| {
                Error::Call(format!(
                    "graph `{}`: unknown host call {number}: {message}",
                    self.name
                ))
            })?;
            return Err(Error::HostCall { site, message });
        }
        match usize::try_from(status[0])
            .ok()
            .and_then(|code| code.checked_sub(1))
        {
            None => Ok(()),
            Some(k) => {
                let (site, check) = self.checks.get(k).cloned().ok_or_else(|| {
                    Error::Call(format!(
                        "graph `{}`: unknown check code {}",
                        self.name,
                        k + 1
                    ))
                })?;
                Err(Error::Checked { site, check })
            }
        }
    }
}
