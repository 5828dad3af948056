//! The `fxmlir._fxmlir` extension module: compile an interchange document, run the result on
//! data pointers, list the supported ops. Errors become Python exceptions; a Rust panic is
//! caught and reported as an internal error rather than unwinding into Python.

use crate::context::Dialect;
use crate::error::Error;
use crate::error::Raised;
use crate::graph::dims;
use crate::jit::host::HostCalls;
use crate::native::Kind;
use crate::pipeline::{Placement, Stage, StageEdit, StageParts};
use crate::runtime::{CompiledGraph, Options, dlpack};
use crate::target::Target;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;

create_exception!(
    _fxmlir,
    FxmlirError,
    PyException,
    "Base class of fxmlir errors."
);
create_exception!(
    _fxmlir,
    GraphError,
    FxmlirError,
    "The interchange graph is malformed or invalid."
);
create_exception!(
    _fxmlir,
    UnsupportedOpError,
    FxmlirError,
    "No lowering is registered for an op."
);
create_exception!(
    _fxmlir,
    LoweringError,
    FxmlirError,
    "An op could not be lowered."
);
create_exception!(
    _fxmlir,
    CompileError,
    FxmlirError,
    "A pass pipeline or the JIT failed."
);
create_exception!(
    _fxmlir,
    CallError,
    FxmlirError,
    "A compiled graph was called wrongly."
);

create_exception!(
    _fxmlir,
    TargetError,
    FxmlirError,
    "A target spec does not parse, or names a CPU whose code cannot run on this host."
);

/// The Python exception for an error. One that names a node carries it as fields (`node`,
/// `op`, `source`: the partitioner reads them, never the message); on others they are None.
fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    let (err, site) = match e {
        Error::Json(_) | Error::InvalidGraph(_) => (GraphError::new_err(message), None),
        Error::UnsupportedOp(site) => (UnsupportedOpError::new_err(message), Some(site)),
        Error::Lowering { site, .. } => (LoweringError::new_err(message), Some(site)),
        Error::Call(_) => (CallError::new_err(message), None),
        Error::HostCall { site, .. } => (CallError::new_err(message), Some(site)),
        Error::Checked { site, check } => {
            let err = match check.raised {
                Raised::IndexError => pyo3::exceptions::PyIndexError::new_err(message),
                Raised::RuntimeError => pyo3::exceptions::PyRuntimeError::new_err(message),
            };
            (err, Some(site))
        }
        Error::Target(_) => (TargetError::new_err(message), None),
        _ => (CompileError::new_err(message), None),
    };
    Python::attach(|py| {
        let value = err.value(py);
        let site = site.filter(|s| !s.node.is_empty());
        let fields = [
            ("node", site.as_ref().map(|s| s.node.clone())),
            ("op", site.as_ref().map(|s| s.op.clone())),
            ("source", site.as_ref().and_then(|s| s.source.clone())),
        ];
        for (name, field) in fields {
            // An exception instance takes attributes; should it refuse, the message still
            // names the node.
            let _ = value.setattr(name, field);
        }
    });
    err
}

fn guard<T>(f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py),
        Err(panic) => Err(panic_error(panic)),
    }
}

/// The exception for a caught panic.
fn panic_error(panic: Box<dyn Any + Send>) -> PyErr {
    let what = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    FxmlirError::new_err(format!(
        "internal error in fxmlir (a bug, please report it): {what}"
    ))
}

/// A compiled graph: call `run` with the data pointers of inputs then outputs.
#[pyclass(module = "fxmlir._fxmlir", frozen)]
struct Kernel {
    compiled: CompiledGraph,
}

#[pymethods]
impl Kernel {
    #[getter]
    fn name(&self) -> String {
        self.compiled.name.clone()
    }

    /// `[(stage, milliseconds)]` in the order the stages ran, ending with `total`.
    #[getter]
    fn timings(&self) -> Vec<(String, f64)> {
        self.compiled
            .timings
            .iter()
            .map(|(s, t)| (s.clone(), t.as_secs_f64() * 1e3))
            .collect()
    }

    /// Paths of the files written under the dump directory.
    #[getter]
    fn dumped(&self) -> Vec<String> {
        self.compiled
            .dumped
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// Where the kernel came from: `"compiled"`, `"memory"` (an identical graph compiled
    /// earlier in this process) or `"disk"` (the compile cache).
    #[getter]
    fn source(&self) -> &'static str {
        self.compiled.source.as_str()
    }

    /// Problems met while compiling, none of which failed the compile: optimisation stages
    /// skipped (the kernel is correct but slower), compile cache trouble.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.compiled.warnings.clone()
    }

    #[getter]
    fn arg_count(&self) -> usize {
        self.compiled.inputs.len() + self.compiled.outputs.len()
    }

    /// Bytes each output spans, as laid out (what `output_buffer` allocates; 0 if empty, or
    /// if its size is symbolic).
    #[getter]
    fn output_bytes(&self) -> PyResult<Vec<usize>> {
        guard(|| {
            self.compiled
                .outputs
                .iter()
                .map(|m| {
                    match m
                        .shape
                        .iter()
                        .chain(&m.strides)
                        .any(|&d| dims::is_symbolic(d))
                    {
                        true => Ok(0),
                        false => dlpack::extent_bytes(m),
                    }
                })
                .collect()
        })
    }

    /// The size symbols of a kernel compiled for every size in their ranges, in the order
    /// `run`'s `sizes` gives their values; empty for fixed sizes.
    #[getter]
    fn symbols(&self) -> Vec<String> {
        self.compiled
            .symbols
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// The inputs' and outputs' `(shape, strides)` for `sizes`, the values of `symbols`; a
    /// `CallError` names a value outside its symbol's range.
    #[allow(clippy::type_complexity)]
    fn sized(
        &self,
        sizes: Vec<i64>,
    ) -> PyResult<(Vec<(Vec<i64>, Vec<i64>)>, Vec<(Vec<i64>, Vec<i64>)>)> {
        guard(|| {
            let (inputs, outputs) = self.compiled.sized(&sizes)?;
            let pairs = |metas: Vec<crate::graph::TensorMeta>| {
                metas.into_iter().map(|m| (m.shape, m.strides)).collect()
            };
            Ok((pairs(inputs), pairs(outputs)))
        })
    }

    /// A new, uninitialised tensor for output `index` as a DLPack capsule (for
    /// `torch.from_dlpack`), in a block of fxmlir's allocator that returns to it, already
    /// mapped, when torch frees the tensor.
    /// For a kernel with size symbols, `sizes` are their values (see `sized`).
    #[pyo3(signature = (index, sizes = Vec::new()))]
    fn output_buffer(&self, py: Python<'_>, index: usize, sizes: Vec<i64>) -> PyResult<Py<PyAny>> {
        let managed = guard(|| self.compiled.allocate_output(index, &sizes))?;
        // SAFETY: `managed` is a live DLPack tensor; the capsule owns it until a consumer
        // renames the capsule and takes it over.
        unsafe {
            let capsule = pyo3::ffi::PyCapsule_New(
                managed as *mut std::ffi::c_void,
                DLTENSOR.as_ptr(),
                Some(drop_unused_capsule),
            );
            if capsule.is_null() {
                dlpack::delete(managed);
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, capsule).unbind())
        }
    }

    /// The nodes the kernel has its host run (its collectives), by host call number: what
    /// `run`'s `host` is called for.
    #[getter]
    fn host_calls(&self) -> Vec<String> {
        self.compiled
            .host_calls
            .iter()
            .map(|s| s.node.clone())
            .collect()
    }

    /// Runs the kernel. The caller (fxmlir.runtime) has checked every tensor against the
    /// compiled shapes, strides and dtypes and allocated the outputs. `host(number, source,
    /// target)` runs the kernel's host calls (`host_calls`) on the buffers at the addresses
    /// given; an exception it raises is raised here, with a note naming the node.
    /// For a kernel with size symbols, `sizes` are their values (see `sized`).
    #[pyo3(signature = (pointers, host = None, sizes = Vec::new()))]
    fn run(
        &self,
        py: Python<'_>,
        pointers: Vec<usize>,
        host: Option<Py<PyAny>>,
        sizes: Vec<i64>,
    ) -> PyResult<()> {
        let compiled = &self.compiled;
        let host = host.map(|handler| PyHost {
            handler,
            raised: Mutex::new(None),
        });
        // SAFETY: the Python runtime validates each tensor against the compiled metadata before
        // passing its data pointer, and keeps the tensors alive across this call.
        let result = py.detach(|| {
            guard(|| unsafe {
                compiled.call_with_sizes(
                    &pointers,
                    &sizes,
                    host.as_ref().map(|h| h as &dyn HostCalls),
                )
            })
        });
        let raised = host.and_then(|h| {
            h.raised
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
        });
        match (result, raised) {
            (Err(err), Some(original)) => {
                let note = err.value(py).to_string();
                let _ = original.value(py).call_method1("add_note", (note,));
                Err(original)
            }
            (result, _) => result,
        }
    }
}

/// A kernel's host calls run by a Python callable (`fxmlir.collectives`), with the GIL
/// taken for each; the first exception it raises is kept for the caller to raise.
struct PyHost {
    handler: Py<PyAny>,
    raised: Mutex<Option<PyErr>>,
}

impl HostCalls for PyHost {
    fn call(&self, number: usize, source: usize, target: usize) -> Result<(), String> {
        Python::attach(
            |py| match self.handler.call1(py, (number, source, target)) {
                Ok(_) => Ok(()),
                Err(err) => {
                    let message = err.to_string();
                    *self.raised.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
                    Err(message)
                }
            },
        )
    }
}

/// The capsule name DLPack producers use; a consumer renames it `used_dltensor`.
const DLTENSOR: &std::ffi::CStr = c"dltensor";

/// Destructor of an output capsule: deletes the tensor unless a consumer took it.
unsafe extern "C" fn drop_unused_capsule(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; a capsule still named
    // `dltensor` holds the tensor `output_buffer` put in it.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr());
            dlpack::delete(managed as *mut dlpack::ManagedTensor);
        }
    }
}

/// The kernel of an interchange document (JSON text) compiled with `options`.
fn compile_document(json: &str, options: &Options) -> PyResult<CompiledGraph> {
    guard(|| {
        let graph = crate::Graph::from_json(json)?;
        crate::compile(&graph, Some(json), options)
    })
}

/// Compiles an interchange document (JSON text), or reuses the kernel of an identical graph
/// from this process or from the compile cache under `cache_dir`: on the calling thread, its
/// errors raised here, or with `background` on a thread of its own that never takes the GIL
/// (so it starts at once, however busy Python's own threads keep the GIL), its errors raised
/// by `wait`. `Compilation.wait` gives the kernel.
#[pyfunction]
#[pyo3(signature = (
    json, pipeline = "default", dump_dir = None, cache_dir = None, target = "host", threads = 1,
    background = false, low_priority = false, extensions = None, checks = true
))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    json: String,
    pipeline: &str,
    dump_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    target: &str,
    threads: usize,
    background: bool,
    low_priority: bool,
    extensions: Option<&str>,
    checks: bool,
) -> PyResult<Compilation> {
    let target = parse_target(target, threads)?;
    let options = Options {
        checks,
        ..parse_extensions(extensions)?.options(pipeline, dump_dir, cache_dir, target)
    };
    if !background {
        let compiled = py.detach(|| compile_document(&json, &options))?;
        return Ok(Compilation {
            thread: Mutex::new(None),
            outcome: OnceLock::from(Py::new(py, Kernel { compiled })),
        });
    }
    // A pipeline name the compile would reject fails here, not at `wait`.
    crate::pipeline::named(pipeline).map_err(to_py)?;
    let thread = std::thread::Builder::new()
        .name("fxmlir-compile".into())
        .stack_size(crate::jit::COMPILE_STACK)
        .spawn(move || {
            if low_priority {
                lower_priority();
            }
            compile_document(&json, &options)
        })
        .map_err(|e| CompileError::new_err(format!("cannot start a compile thread: {e}")))?;
    Ok(Compilation {
        thread: Mutex::new(Some(thread)),
        outcome: OnceLock::new(),
    })
}

/// Gives the calling thread the lowest scheduling priority (nice 19), so that a compile of
/// sizes that run eagerly meanwhile takes only the CPU time the program leaves idle; the
/// threads it starts (parallel code generation) inherit it. On Linux a thread's nice value is
/// its own. Should the call fail, the compile runs at normal priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority for the calling thread (`who` 0) only changes its scheduling.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// A compile (`compile`): finished, or running on a thread of its own.
#[pyclass(module = "fxmlir._fxmlir", frozen)]
struct Compilation {
    /// A background compile's thread, taken by the first `wait`, which joins it and sets
    /// `outcome`.
    thread: Mutex<Option<JoinHandle<PyResult<CompiledGraph>>>>,
    outcome: OnceLock<PyResult<Py<Kernel>>>,
}

#[pymethods]
impl Compilation {
    /// Whether the compile has finished (or failed), so that `wait` returns at once.
    fn done(&self) -> bool {
        if self.outcome.get().is_some() {
            return true;
        }
        self.thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(JoinHandle::is_finished)
    }

    /// The kernel once the compile has finished, waited for without the GIL; or the compile's
    /// exception, raised again by every later call.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<Kernel>> {
        let thread = py.detach(|| {
            self.thread
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        if let Some(thread) = thread {
            let outcome = match py.detach(|| thread.join()) {
                Ok(result) => result.and_then(|compiled| Py::new(py, Kernel { compiled })),
                Err(panic) => Err(panic_error(panic)),
            };
            // Only the caller that took the thread gets here, once.
            let _ = self.outcome.set(outcome);
        }
        match py.detach(|| self.outcome.wait()) {
            Ok(kernel) => Ok(kernel.clone_ref(py)),
            Err(e) => Err(e.clone_ref(py)),
        }
    }
}

/// Lowers an interchange document for the target `target` names and returns the MLIR text (no
/// passes run).
#[pyfunction]
#[pyo3(signature = (json, target = "host"))]
fn import_graph(json: String, target: &str) -> PyResult<String> {
    let target = parse_target(target, 1)?;
    guard(|| {
        let graph = crate::Graph::from_json(&json)?;
        let context = crate::context::new_context()?;
        let _dialects = crate::context::load_dialects(&context, &[])?;
        let module = crate::lower::lower_graph(&context, &graph, &target, true)?;
        crate::pipeline::verify(&context, &module, &graph.name)?;
        Ok(crate::pipeline::print_module(&module))
    })
}

/// `[(aten_overload, family)]` for every registered lowering.
#[pyfunction]
fn supported_ops() -> PyResult<Vec<(String, String)>> {
    guard(|| {
        Ok(crate::supported_ops()?
            .into_iter()
            .map(|(op, family)| (op.to_string(), family.to_string()))
            .collect())
    })
}

/// The ops whose lowerings take symbolic sizes: a graph of these only compiles once for
/// every size its symbols take.
#[pyfunction]
fn dynamic_ops() -> PyResult<Vec<String>> {
    guard(|| {
        Ok(crate::lower::Registry::global()?
            .dynamic_ops()
            .map(str::to_string)
            .collect())
    })
}

/// The ops whose lowerings take a symbolic batch (the first size, every other fixed), lowered
/// one sample at a time: a graph of these and of `dynamic_ops` with no other symbolic size
/// compiles once for every batch.
#[pyfunction]
fn batch_ops() -> PyResult<Vec<String>> {
    guard(|| {
        Ok(crate::lower::Registry::global()?
            .batch_ops()
            .map(str::to_string)
            .collect())
    })
}

/// The value of a symbolic size as the interchange writes it (`"(s0 - 1)//2 + 1"`) with its
/// symbols bound to `bindings`: what the call path and the kernel compute for it.
#[pyfunction]
fn size_value(text: &str, bindings: std::collections::HashMap<String, i64>) -> PyResult<i64> {
    guard(|| {
        crate::graph::dims::Poly::parse(text)?
            .eval(&bindings)
            .ok_or_else(|| {
                crate::error::Error::InvalidGraph(format!(
                    "symbolic size `{text}` has no value with {bindings:?}"
                ))
            })
    })
}

/// The stages and dialects `fxmlir.config` adds, as `fxmlir.stages.extensions_json` writes
/// them: `{"stages": [{"placement", "anchor", "name", "passes"?, "transform"?, "pdl"?}],
/// "dialects": [{"source", "irdl"}]}`.
#[derive(serde::Deserialize)]
struct ExtensionsDocument {
    #[serde(default)]
    stages: Vec<StageDocument>,
    #[serde(default)]
    dialects: Vec<DialectDocument>,
    /// Native MLIR plugins (shared objects) to load.
    #[serde(default)]
    pass_plugins: Vec<PathBuf>,
    #[serde(default)]
    dialect_plugins: Vec<PathBuf>,
    /// What else changes the code: the active plugins and their options.
    #[serde(default)]
    key: String,
}

#[derive(serde::Deserialize)]
struct StageDocument {
    placement: String,
    anchor: String,
    name: String,
    passes: Option<String>,
    transform: Option<String>,
    pdl: Option<String>,
    #[serde(default)]
    work: Option<String>,
}

#[derive(serde::Deserialize)]
struct DialectDocument {
    source: String,
    irdl: String,
}

/// What an extensions document adds to a compile.
#[derive(Default)]
struct Extensions {
    stages: Vec<StageEdit>,
    dialects: Vec<Dialect>,
    plugins: Vec<crate::native::Plugin>,
    key: String,
}

impl Extensions {
    /// The options of a compile with these extensions.
    fn options(
        self,
        pipeline: &str,
        dump_dir: Option<PathBuf>,
        cache_dir: Option<PathBuf>,
        target: crate::Target,
    ) -> Options {
        Options {
            pipeline: pipeline.to_string(),
            dump_dir,
            cache_dir,
            target,
            stages: self.stages,
            dialects: self.dialects,
            plugins: self.plugins,
            checks: true,
            extensions_key: self.key,
        }
    }
}

/// The stage edits, dialects, native plugins (loaded) and key of an extensions document (none
/// without one).
fn parse_extensions(json: Option<&str>) -> PyResult<Extensions> {
    let Some(json) = json else {
        return Ok(Extensions::default());
    };
    let document: ExtensionsDocument =
        serde_json::from_str(json).map_err(|e| to_py(Error::from(e)))?;
    let stages = document
        .stages
        .iter()
        .map(|s| {
            if s.placement == "remove" {
                return Ok(StageEdit::removing(&s.anchor));
            }
            let placement = Placement::parse(&s.placement).ok_or_else(|| Error::PassPipeline {
                pipeline: s.name.clone(),
                message: format!(
                    "placement `{}`: expected before, after, replace or remove",
                    s.placement
                ),
            })?;
            Ok(StageEdit {
                placement,
                anchor: s.anchor.clone(),
                stage: Stage::added(
                    &s.name,
                    StageParts {
                        passes: s.passes.as_deref(),
                        transform: s.transform.as_deref(),
                        pdl: s.pdl.as_deref(),
                        work: s.work.as_deref(),
                    },
                )?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()
        .map_err(to_py)?;
    let dialects = document
        .dialects
        .into_iter()
        .map(|d| Dialect {
            source: d.source,
            irdl: d.irdl,
        })
        .collect();
    let passes = document.pass_plugins.iter().map(|p| (p, Kind::Pass));
    let dialect_plugins = document.dialect_plugins.iter().map(|p| (p, Kind::Dialect));
    let plugins = passes
        .chain(dialect_plugins)
        .map(|(path, kind)| crate::native::load(path, kind))
        .collect::<Result<Vec<_>, Error>>()
        .map_err(to_py)?;
    Ok(Extensions {
        stages,
        dialects,
        plugins,
        key: document.key,
    })
}

/// Checks what `fxmlir.config` adds before any compile uses it: the stage edits apply to the
/// pipeline `pipeline`, each stage's passes parse, its transform script or PDL patterns parse,
/// and the dialects load. Raises `CompileError` naming the stage or dialect.
#[pyfunction]
fn check_extensions(pipeline: &str, extensions: &str) -> PyResult<Vec<String>> {
    let extensions = parse_extensions(Some(extensions))?;
    guard(|| {
        let context = crate::context::new_context()?;
        let _dialects = crate::context::load_dialects(&context, &extensions.dialects)?;
        for plugin in &extensions.plugins {
            plugin.register_dialects(&context);
        }
        let stages = crate::pipeline::edited(pipeline, &extensions.stages)?;
        for stage in &stages {
            crate::pipeline::check_stage(&context, stage)?;
        }
        Ok(stages.iter().map(|s| s.name.to_string()).collect())
    })
}

/// The target a spec names (see `fxmlir.config.target`), with `threads` unless the spec says
/// `threads=`.
fn parse_target(spec: &str, threads: usize) -> PyResult<Target> {
    Target::parse(spec)
        .map(|t| t.with_default_threads(threads))
        .map_err(to_py)
}

/// What fxmlir knows of the target a spec names: `spec` (complete: it reads back as the same
/// target), `summary`, `cpu`, `features` (the instruction-set features fxmlir decides by),
/// `vector_bytes`, `registers`, `l2_bytes`, `threads`, `bf16_dot` (whether the schedule
/// computes `fxmlir.mm_pairs` with AVX512-BF16's dot product; elsewhere bf16 products are left
/// as they are), and `runs_here`: `None` if its code runs on this host, else why not.
#[pyfunction]
#[pyo3(signature = (spec = "host", threads = 1))]
fn target_info(py: Python<'_>, spec: &str, threads: usize) -> PyResult<Py<PyDict>> {
    let target = parse_target(spec, threads)?;
    let info = PyDict::new(py);
    info.set_item("spec", target.describe())?;
    info.set_item("summary", target.summary())?;
    info.set_item("cpu", &target.cpu)?;
    info.set_item("features", target.features())?;
    info.set_item("vector_bytes", target.vector_bytes())?;
    info.set_item("registers", target.registers())?;
    info.set_item("l2_bytes", target.l2_bytes)?;
    info.set_item("threads", target.threads)?;
    info.set_item("bf16_dot", target.bf16_dot())?;
    info.set_item(
        "runs_here",
        target.check_runs_here().err().map(|e| e.to_string()),
    )?;
    Ok(info.unbind())
}

/// The f32 FMA peak of this host in GFLOP/s on the widest vectors of the target `spec` names
/// (which must run here), with `threads` threads for about `seconds` (see `fxmlir::peak`).
#[pyfunction]
#[pyo3(signature = (spec = "host", threads = 1, seconds = 0.5))]
fn fma_peak(py: Python<'_>, spec: &str, threads: usize, seconds: f64) -> PyResult<f64> {
    let target = parse_target(spec, threads)?;
    py.detach(|| crate::peak::fma_peak(&target, threads, seconds))
        .map_err(to_py)
}

/// Whether the kernel multiplies f32 copies of the operands of a product of `rows` rows of
/// `dtype` (a torch dtype's name without `torch.`) on the target `spec` names: `fxmlir.passes.widen`
/// widens weight-only operands of such products before hoisting, so that they are widened
/// once.
#[pyfunction]
#[pyo3(signature = (dtype, rows, target = "host"))]
fn widened_product(dtype: &str, rows: i64, target: &str) -> PyResult<bool> {
    let target = parse_target(target, 1)?;
    Ok(crate::graph::DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype)
        .is_some_and(|d| crate::lower::widened(&target, d, rows)))
}

/// Whether a convolution of an `input`-shaped tensor by a `weight`-shaped one (`stride`,
/// `padding` and `dilation` one per spatial dimension, `groups`, not transposed) of `dtype` is
/// one product per kernel tap on the target `spec` names with `threads` threads, reading its
/// weight tap-major: `fxmlir.passes.taps` hands such a weight over so (and tap-major layouts:
/// `tap_major_permutations`).
#[pyfunction]
#[pyo3(signature = (input, weight, stride, padding, dilation, groups, dtype, target = "host", threads = 1))]
#[allow(clippy::too_many_arguments)]
fn shifted_convolution(
    input: Vec<i64>,
    weight: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    groups: i64,
    dtype: &str,
    target: &str,
    threads: usize,
) -> PyResult<bool> {
    let target = parse_target(target, threads)?;
    Ok(crate::graph::DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype)
        .is_some_and(|d| {
            crate::lower::shifted_convolution(
                &target,
                &input,
                &weight,
                (&stride, &padding, &dilation),
                groups,
                d,
            )
        }))
}

/// The panel width (columns) in which the weight (`k x n`) of an f32 product of `m` rows is
/// handed to the kernel for the target `spec` names with `threads` threads, or `None` to keep
/// the product as it is: `fxmlir.passes.panels` rewrites such products into
/// `fxmlir.mm_panels` on the weight in panels (see `fxmlir::pipeline::schedule::weight_panels`).
#[pyfunction]
#[pyo3(signature = (m, k, n, target = "host", threads = 1))]
fn weight_panels(m: i64, k: i64, n: i64, target: &str, threads: usize) -> PyResult<Option<i64>> {
    let target = parse_target(target, threads)?;
    Ok(crate::pipeline::schedule::weight_panels(m, k, n, &target))
}

/// The permutations of a convolution weight `[cout, c, k…]` of `nd` spatial dimensions into
/// its tap-major layout `[k…, cout, c]` and back.
#[pyfunction]
fn tap_major_permutations(nd: usize) -> (Vec<i64>, Vec<i64>) {
    crate::lower::tap_major_permutations(nd)
}

/// The module of an interchange document after the stage `stage` (see `compile` for the other
/// arguments): its text and its bytecode, for a plugin's executor.
#[pyfunction]
#[pyo3(signature = (
    json, stage, pipeline = "default", dump_dir = None, target = "host", threads = 1,
    extensions = None
))]
#[allow(clippy::too_many_arguments)]
fn lower_to_stage(
    py: Python<'_>,
    json: &str,
    stage: &str,
    pipeline: &str,
    dump_dir: Option<PathBuf>,
    target: &str,
    threads: usize,
    extensions: Option<&str>,
) -> PyResult<(String, Py<PyBytes>)> {
    let target = parse_target(target, threads)?;
    // A plugin's executor takes the module without index checks (its calls pass inputs and
    // outputs only); the kernel stays in bounds all the same.
    let options = Options {
        checks: false,
        ..parse_extensions(extensions)?.options(pipeline, dump_dir, None, target)
    };
    let (text, bytecode) = py.detach(|| {
        guard(|| {
            let graph = crate::Graph::from_json(json)?;
            crate::runtime::lower_to(&graph, Some(json), &options, stage)
        })
    })?;
    Ok((text, PyBytes::new(py, &bytecode).unbind()))
}

/// The MLIR type of a tensor value of `shape` and `dtype` (a torch dtype's name without
/// `torch.`), as the lowering types graph values: `tensor<4x8xf32>`.
#[pyfunction]
fn tensor_type(shape: Vec<i64>, dtype: &str) -> PyResult<String> {
    let dtype = crate::graph::DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype)
        .ok_or_else(|| GraphError::new_err(format!("unknown dtype `{dtype}`")))?;
    Ok(crate::lower::emit::tensor_type_text(&shape, dtype))
}

/// Names of the registered pipelines.
#[pyfunction]
fn pipelines() -> Vec<String> {
    crate::pipeline::PIPELINES
        .iter()
        .map(|(n, _)| n.to_string())
        .collect()
}

#[pymodule]
fn _fxmlir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::logging::init();
    let py = m.py();
    m.add("FxmlirError", py.get_type::<FxmlirError>())?;
    m.add("GraphError", py.get_type::<GraphError>())?;
    m.add("UnsupportedOpError", py.get_type::<UnsupportedOpError>())?;
    m.add("LoweringError", py.get_type::<LoweringError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("CallError", py.get_type::<CallError>())?;
    m.add("TargetError", py.get_type::<TargetError>())?;
    m.add("INTERCHANGE_VERSION", crate::graph::VERSION)?;
    m.add("PAIR_LANES", crate::tuning::PAIR_LANES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Kernel>()?;
    m.add_class::<Compilation>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(import_graph, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(dynamic_ops, m)?)?;
    m.add_function(wrap_pyfunction!(size_value, m)?)?;
    m.add_function(wrap_pyfunction!(batch_ops, m)?)?;
    m.add_function(wrap_pyfunction!(pipelines, m)?)?;
    m.add_function(wrap_pyfunction!(target_info, m)?)?;
    m.add_function(wrap_pyfunction!(check_extensions, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_type, m)?)?;
    m.add_function(wrap_pyfunction!(lower_to_stage, m)?)?;
    m.add_function(wrap_pyfunction!(widened_product, m)?)?;
    m.add_function(wrap_pyfunction!(shifted_convolution, m)?)?;
    m.add_function(wrap_pyfunction!(tap_major_permutations, m)?)?;
    m.add_function(wrap_pyfunction!(weight_panels, m)?)?;
    m.add_function(wrap_pyfunction!(fma_peak, m)?)?;
    Ok(())
}
