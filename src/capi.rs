//! The C API (`include/fxmlir.h`): sessions, lowering and stages, kernels and calls, for
//! drivers written in C or C++. Every function returns an [`fxmlir_status`] (or a value that
//! cannot fail) and leaves the message of a failure in [`fxmlir_last_error`]; nothing panics
//! across the boundary (a caught panic is `FXMLIR_ERROR_INTERNAL`). The same code paths as the
//! Python extension: [`crate::runtime`] compiles, [`crate::pipeline`] runs the stages.

#![allow(non_camel_case_types)]

use crate::context::Dialect;
use crate::error::Error;
use crate::graph::{Graph, TensorMeta};
use crate::native::{self, Kind};
use crate::pipeline::external::ExternalPass;
use crate::pipeline::{Placement, StageEdit};
use crate::runtime::{self, CompiledGraph, Options, dlpack};
use crate::target::Target;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

/// The version of the C ABI `include/fxmlir.h` declares (`FXMLIR_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;

/// `fxmlir_status` in the header.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum fxmlir_status {
    FXMLIR_OK = 0,
    FXMLIR_ERROR_ARGUMENT = 1,
    FXMLIR_ERROR_GRAPH = 2,
    FXMLIR_ERROR_UNSUPPORTED_OP = 3,
    FXMLIR_ERROR_LOWERING = 4,
    FXMLIR_ERROR_PIPELINE = 5,
    FXMLIR_ERROR_TARGET = 6,
    FXMLIR_ERROR_PLUGIN = 7,
    FXMLIR_ERROR_CALL = 8,
    FXMLIR_ERROR_IO = 9,
    FXMLIR_ERROR_INTERNAL = 10,
    FXMLIR_ERROR_CHECK = 11,
}

use fxmlir_status::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure of the C API: its status and message.
struct Failure(fxmlir_status, String);

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let status = match &e {
            Error::Json(_) | Error::InvalidGraph(_) => FXMLIR_ERROR_GRAPH,
            Error::UnsupportedOp(_) => FXMLIR_ERROR_UNSUPPORTED_OP,
            Error::Lowering { .. } => FXMLIR_ERROR_LOWERING,
            Error::Verification { .. }
            | Error::Pipeline { .. }
            | Error::PassPipeline { .. }
            | Error::Dialect { .. } => FXMLIR_ERROR_PIPELINE,
            Error::Target(_) => FXMLIR_ERROR_TARGET,
            Error::Plugin { .. } => FXMLIR_ERROR_PLUGIN,
            Error::Call(_) | Error::HostCall { .. } => FXMLIR_ERROR_CALL,
            Error::Checked { .. } => FXMLIR_ERROR_CHECK,
            Error::Io { .. } => FXMLIR_ERROR_IO,
            Error::Llvm(_) => FXMLIR_ERROR_INTERNAL,
        };
        Failure(status, e.to_string())
    }
}

fn argument(message: impl Into<String>) -> Failure {
    Failure(FXMLIR_ERROR_ARGUMENT, message.into())
}

/// Runs `f`, recording its failure (or a caught panic) as the thread's last error.
fn guard(f: impl FnOnce() -> Result<(), Failure>) -> fxmlir_status {
    let failure = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return FXMLIR_OK,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Failure(
                FXMLIR_ERROR_INTERNAL,
                format!("internal error in fxmlir (a bug, please report it): {what}"),
            )
        }
    };
    let message = CString::new(failure.1.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    failure.0
}

/// A C string argument as UTF-8; `what` names it in the error.
///
/// # Safety
/// `text` is null or a NUL-terminated string.
unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if text.is_null() {
        return Err(argument(format!("{what} is null")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(text) }
        .to_str()
        .map_err(|_| argument(format!("{what} is not UTF-8")))
}

/// A byte buffer argument.
///
/// # Safety
/// `data` is null or addresses `length` readable bytes.
unsafe fn bytes<'a>(data: *const c_char, length: usize, what: &str) -> Result<&'a [u8], Failure> {
    if data.is_null() {
        return Err(argument(format!("{what} is null")));
    }
    // SAFETY: the caller passes `length` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(data.cast(), length) })
}

/// Hands `value` to the caller through `out`.
///
/// # Safety
/// `out` is null or writable.
unsafe fn give<T>(out: *mut *mut T, value: T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(argument(format!("{what} is null")));
    }
    // SAFETY: `out` is writable; the caller owns the box from here on.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// Hands a string to the caller (freed with `fxmlir_free`).
///
/// # Safety
/// `out` is null or writable.
unsafe fn give_text(out: *mut *mut c_char, value: String) -> Result<(), Failure> {
    if out.is_null() {
        return Err(argument("the output pointer is null"));
    }
    let value = CString::new(value).map_err(|_| argument("the text holds a NUL byte"))?;
    // SAFETY: `out` is writable; `fxmlir_free` takes the string back.
    unsafe { *out = value.into_raw() };
    Ok(())
}

/// A borrowed handle.
///
/// # Safety
/// `handle` is null or a live handle of this API.
unsafe fn handle<'a, T>(handle: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller passes a live handle or null.
    unsafe { handle.as_ref() }.ok_or_else(|| argument(format!("{what} is null")))
}

/// A borrowed handle, to change.
///
/// # Safety
/// `handle` is null or a live handle of this API, not used elsewhere during the call.
unsafe fn handle_mut<'a, T>(handle: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller passes a live handle or null.
    unsafe { handle.as_mut() }.ok_or_else(|| argument(format!("{what} is null")))
}

#[unsafe(no_mangle)]
pub extern "C" fn fxmlir_abi_version() -> u32 {
    ABI_VERSION
}

/// The message of the last call on this thread that failed ("" if none has).
#[unsafe(no_mangle)]
pub extern "C" fn fxmlir_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// Frees a string fxmlir returned.
///
/// # Safety
/// `text` is null or a string this API returned, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: a string `give_text` handed out.
        drop(unsafe { CString::from_raw(text) });
    }
}

/// What compiles take: the target, the pipeline and its edits, dialects, native plugins and
/// the dump directory.
pub struct fxmlir_session {
    options: Options,
}

/// Creates a session for the target `spec` (`NULL`: `FXMLIR_TARGET`, else the host).
///
/// # Safety
/// `spec` is null or a NUL-terminated string; `session` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_create(
    spec: *const c_char,
    session: *mut *mut fxmlir_session,
) -> fxmlir_status {
    guard(|| {
        let target = if spec.is_null() {
            Target::from_env()?
        } else {
            // SAFETY: see the function's contract.
            Target::parse(unsafe { text(spec, "the target spec") }?)?
        };
        // SAFETY: see the function's contract.
        unsafe {
            give(
                session,
                fxmlir_session {
                    options: Options::new(target),
                },
                "session",
            )
        }
    })
}

/// Frees a session (kernels compiled with it stay valid).
///
/// # Safety
/// `session` is null or a live session, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_destroy(session: *mut fxmlir_session) {
    if !session.is_null() {
        // SAFETY: a session `fxmlir_session_create` made.
        drop(unsafe { Box::from_raw(session) });
    }
}

/// Changes a session with `f`, given a C string argument.
///
/// # Safety
/// `session` is null or a live session; `value` is null or a NUL-terminated string.
unsafe fn with_text(
    session: *mut fxmlir_session,
    value: *const c_char,
    what: &str,
    f: impl FnOnce(&mut Options, &str) -> Result<(), Failure>,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let (session, value) = unsafe { (handle_mut(session, "session")?, text(value, what)?) };
        f(&mut session.options, value)
    })
}

/// Selects the named pipeline (`default`; `fxmlir-opt --list-pipelines` lists them).
///
/// # Safety
/// `session` is a live session; `name` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_set_pipeline(
    session: *mut fxmlir_session,
    name: *const c_char,
) -> fxmlir_status {
    // SAFETY: see the function's contract.
    unsafe {
        with_text(session, name, "the pipeline name", |options, name| {
            crate::pipeline::edited(name, &options.stages)?;
            options.pipeline = name.to_string();
            Ok(())
        })
    }
}

/// Writes every compile's dumps (interchange, each stage's MLIR, LLVM IR) to `dir`.
///
/// # Safety
/// `session` is a live session; `dir` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_set_dump_dir(
    session: *mut fxmlir_session,
    dir: *const c_char,
) -> fxmlir_status {
    // SAFETY: see the function's contract.
    unsafe {
        with_text(session, dir, "the dump directory", |options, dir| {
            options.dump_dir = Some(PathBuf::from(dir));
            Ok(())
        })
    }
}

/// Edits the pipeline: `PLACEMENT:ANCHOR:NAME:KIND=VALUE` as `fxmlir-opt --add-stage` takes
/// it (`before`/`after`/`replace`, or `remove:ANCHOR`). Checked against the pipeline at once.
///
/// # Safety
/// `session` is a live session; `spec` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_edit_stages(
    session: *mut fxmlir_session,
    spec: *const c_char,
) -> fxmlir_status {
    // SAFETY: see the function's contract.
    unsafe {
        with_text(session, spec, "the stage edit", |options, spec| {
            let mut stages = options.stages.clone();
            stages.push(StageEdit::parse(spec)?);
            crate::pipeline::edited(&options.pipeline, &stages)?;
            options.stages = stages;
            Ok(())
        })
    }
}

/// The session's stages, in order, one name per line (free with `fxmlir_free`).
///
/// # Safety
/// `session` is a live session; `names` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_stages(
    session: *const fxmlir_session,
    names: *mut *mut c_char,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let options = &unsafe { handle(session, "session") }?.options;
        let stages = crate::pipeline::edited(&options.pipeline, &options.stages)?;
        let list: Vec<&str> = stages.iter().map(|s| s.name.as_ref()).collect();
        // SAFETY: see the function's contract.
        unsafe { give_text(names, list.join("\n")) }
    })
}

/// Loads a dialect defined in IRDL (a file) into every compile of the session.
///
/// # Safety
/// `session` is a live session; `path` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_add_dialect(
    session: *mut fxmlir_session,
    path: *const c_char,
) -> fxmlir_status {
    // SAFETY: see the function's contract.
    unsafe {
        with_text(session, path, "the IRDL file", |options, path| {
            let dialect = Dialect::from_file(path.as_ref())?;
            let context = crate::context::new_context()?;
            crate::context::load_dialects(&context, std::slice::from_ref(&dialect))?;
            options.dialects.push(dialect);
            Ok(())
        })
    }
}

/// Loads a native MLIR plugin into the process (once per path) and uses it in the session's
/// compiles: `kind` 0 is a pass plugin, 1 a dialect plugin.
///
/// # Safety
/// `session` is a live session; `path` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_load_plugin(
    session: *mut fxmlir_session,
    path: *const c_char,
    kind: u32,
) -> fxmlir_status {
    // SAFETY: see the function's contract.
    unsafe {
        with_text(session, path, "the plugin path", |options, path| {
            let kind = match kind {
                0 => Kind::Pass,
                1 => Kind::Dialect,
                other => return Err(argument(format!("plugin kind {other}: expected 0 or 1"))),
            };
            let plugin = native::load(path.as_ref(), kind)?;
            if !options.plugins.contains(&plugin) {
                options.plugins.push(plugin);
            }
            Ok(())
        })
    }
}

/// Adds a stage whose work is a pass written in C against MLIR's C API
/// (`mlirCreateExternalPass`'s callbacks), run on every `op_name` operation (`func.func`,
/// `builtin.module`): `placement` (`before`, `after` or `replace`) the stage `anchor`.
///
/// # Safety
/// `session` is a live session; the strings are NUL-terminated; the callbacks are valid C
/// functions taking `user_data`, callable from any thread that compiles with the session, for
/// as long as the session (or a kernel compiled with it) lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_session_add_external_stage(
    session: *mut fxmlir_session,
    placement: *const c_char,
    anchor: *const c_char,
    name: *const c_char,
    op_name: *const c_char,
    callbacks: mlir_sys::MlirExternalPassCallbacks,
    user_data: *mut std::ffi::c_void,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let (session, placement, anchor, name, op_name) = unsafe {
            (
                handle_mut(session, "session")?,
                text(placement, "the placement")?,
                text(anchor, "the anchor")?,
                text(name, "the stage name")?,
                text(op_name, "the op name")?,
            )
        };
        let placement = Placement::parse(placement).ok_or_else(|| {
            argument(format!(
                "placement `{placement}`: expected before, after or replace"
            ))
        })?;
        // SAFETY: see the function's contract.
        let pass = unsafe { ExternalPass::new(name, op_name, callbacks, user_data) };
        let mut stages = session.options.stages.clone();
        stages.push(StageEdit::external(placement, anchor, pass));
        crate::pipeline::edited(&session.options.pipeline, &stages)?;
        session.options.stages = stages;
        Ok(())
    })
}

/// A graph document (interchange JSON) as text.
///
/// # Safety
/// `data` addresses `length` readable bytes.
unsafe fn graph<'a>(data: *const c_char, length: usize) -> Result<(Graph, &'a str), Failure> {
    // SAFETY: see the function's contract.
    let json = std::str::from_utf8(unsafe { bytes(data, length, "the graph") }?)
        .map_err(|_| argument("the graph is not UTF-8"))?;
    Ok((Graph::from_json(json)?, json))
}

/// Lowers a graph (an interchange document) to MLIR: the module before any stage, printed with
/// locations (free with `fxmlir_free`).
///
/// # Safety
/// `session` is a live session; `json` addresses `length` bytes; `mlir` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_lower(
    session: *const fxmlir_session,
    json: *const c_char,
    length: usize,
    mlir: *mut *mut c_char,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let (session, (graph, _)) = unsafe { (handle(session, "session")?, graph(json, length)?) };
        let text = runtime::lowered(&graph, &session.options)?;
        // SAFETY: see the function's contract.
        unsafe { give_text(mlir, text) }
    })
}

/// Runs the session's stages on a module (MLIR text or bytecode), through the stage named
/// `last` (`NULL`: all), and returns the module after it, printed with locations.
///
/// # Safety
/// `session` is a live session; `module` addresses `length` bytes; `last` is null or a
/// NUL-terminated string; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_run_stages(
    session: *const fxmlir_session,
    module: *const c_char,
    length: usize,
    last: *const c_char,
    out: *mut *mut c_char,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let (session, module) = unsafe {
            (
                handle(session, "session")?,
                bytes(module, length, "the module")?,
            )
        };
        let last = if last.is_null() {
            None
        } else {
            // SAFETY: see the function's contract.
            Some(unsafe { text(last, "the last stage") }?)
        };
        let text = runtime::run_stages_on(module, &session.options, last)?;
        // SAFETY: see the function's contract.
        unsafe { give_text(out, text) }
    })
}

/// A compiled graph and the names of its inputs.
pub struct fxmlir_kernel {
    compiled: CompiledGraph,
    input_names: Vec<String>,
}

/// Compiles a graph (an interchange document) to a kernel for the session's target, which
/// must run on this host. Identical graphs share one kernel in the process.
///
/// # Safety
/// `session` is a live session; `json` addresses `length` bytes; `kernel` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_compile(
    session: *const fxmlir_session,
    json: *const c_char,
    length: usize,
    kernel: *mut *mut fxmlir_kernel,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let (session, (graph, json)) =
            unsafe { (handle(session, "session")?, graph(json, length)?) };
        let compiled = runtime::compile(&graph, Some(json), &session.options)?;
        let input_names = graph.inputs.iter().map(|i| i.name.clone()).collect();
        let value = fxmlir_kernel {
            compiled,
            input_names,
        };
        // SAFETY: see the function's contract.
        unsafe { give(kernel, value, "kernel") }
    })
}

/// Frees a kernel.
///
/// # Safety
/// `kernel` is null or a live kernel, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_kernel_destroy(kernel: *mut fxmlir_kernel) {
    if !kernel.is_null() {
        // SAFETY: a kernel `fxmlir_compile` made.
        drop(unsafe { Box::from_raw(kernel) });
    }
}

/// The number of inputs (`outputs` 0) or outputs (`outputs` 1) of a kernel; 0 for null.
///
/// # Safety
/// `kernel` is null or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_kernel_count(kernel: *const fxmlir_kernel, outputs: u32) -> usize {
    // SAFETY: see the function's contract.
    match unsafe { kernel.as_ref() } {
        Some(k) if outputs == 0 => k.compiled.inputs.len(),
        Some(k) => k.compiled.outputs.len(),
        None => 0,
    }
}

/// The layout a kernel was compiled for: `fxmlir_tensor_info` in the header. The arrays
/// belong to the kernel.
#[repr(C)]
pub struct fxmlir_tensor_info {
    pub ndim: i32,
    pub shape: *const i64,
    pub strides: *const i64,
    pub dtype: dlpack::DataType,
}

/// The layout of input (`outputs` 0) or output (`outputs` 1) `index`: shape, strides in
/// elements, and DLPack dtype.
///
/// # Safety
/// `kernel` is a live kernel; `info` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_kernel_tensor(
    kernel: *const fxmlir_kernel,
    outputs: u32,
    index: usize,
    info: *mut fxmlir_tensor_info,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let kernel = unsafe { handle(kernel, "kernel") }?;
        let metas = if outputs == 0 {
            &kernel.compiled.inputs
        } else {
            &kernel.compiled.outputs
        };
        let meta = metas.get(index).ok_or_else(|| {
            argument(format!(
                "the kernel has {} {}, not {}",
                metas.len(),
                if outputs == 0 { "inputs" } else { "outputs" },
                index + 1
            ))
        })?;
        if info.is_null() {
            return Err(argument("info is null"));
        }
        // SAFETY: `info` is writable; the arrays live as long as the kernel.
        unsafe {
            *info = fxmlir_tensor_info {
                ndim: meta.rank() as i32,
                shape: meta.shape.as_ptr(),
                strides: meta.strides.as_ptr(),
                dtype: dlpack::data_type(meta.dtype),
            }
        };
        Ok(())
    })
}

/// The data pointer of a caller's DLPack tensor checked against the layout `meta` the kernel
/// was compiled for, as the Python call path checks a torch tensor.
///
/// # Safety
/// `tensor` is a valid `DLTensor` whose shape (and strides, unless null) hold `ndim` entries.
unsafe fn checked(
    graph: &str,
    what: &str,
    tensor: &dlpack::Tensor,
    meta: &TensorMeta,
) -> Result<(usize, usize), Failure> {
    let ndim = usize::try_from(tensor.ndim).map_err(|_| argument(format!("{what}: ndim < 0")))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else if tensor.shape.is_null() {
        return Err(argument(format!("{what}: the shape is null")));
    } else {
        // SAFETY: `ndim` entries, see the function's contract.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }
    };
    let strides: Vec<i64> = if tensor.strides.is_null() || ndim == 0 {
        // DLPack: no strides means compact row-major.
        let mut strides = vec![1i64; ndim];
        for d in (0..ndim.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1].max(1);
        }
        strides
    } else {
        // SAFETY: `ndim` entries, see the function's contract.
        unsafe { std::slice::from_raw_parts(tensor.strides, ndim) }.to_vec()
    };
    let dtype = dlpack::data_type(meta.dtype);
    let same_strides = shape.contains(&0)
        || shape
            .iter()
            .zip(strides.iter().zip(&meta.strides))
            .all(|(&size, (&s, &m))| size == 1 || s == m);
    let same_dtype = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
        == (dtype.code, dtype.bits, dtype.lanes);
    if tensor.device.device_type != dlpack::DEVICE_CPU
        || !same_dtype
        || shape != meta.shape.as_slice()
        || !same_strides
    {
        return Err(Failure(
            FXMLIR_ERROR_CALL,
            format!(
                "graph `{graph}`, {what}: compiled for shape {:?} strides {:?} {} on cpu, got \
                 shape {shape:?} strides {strides:?} (DLPack type code {} bits {} lanes {}) on \
                 device type {}",
                meta.shape,
                meta.strides,
                meta.dtype.name(),
                tensor.dtype.code,
                tensor.dtype.bits,
                tensor.dtype.lanes,
                tensor.device.device_type
            ),
        ));
    }
    let extent = dlpack::extent_bytes(meta)?;
    if tensor.data.is_null() && extent > 0 {
        return Err(Failure(
            FXMLIR_ERROR_CALL,
            format!("graph `{graph}`, {what}: the data pointer is null"),
        ));
    }
    let start = tensor.data as usize + tensor.byte_offset as usize;
    Ok((start, extent))
}

/// Runs a kernel on the caller's buffers: `inputs` then `outputs`, DLPack tensors laid out as
/// compiled (`fxmlir_kernel_tensor`), on the CPU. Each is checked first (device, dtype, shape,
/// strides; an output may not overlap another buffer): a mismatch is `FXMLIR_ERROR_CALL`
/// naming the graph and the buffer, and nothing runs.
///
/// # Safety
/// `kernel` is a live kernel; `inputs`/`outputs` address that many valid `DLTensor`s whose
/// data stays valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fxmlir_kernel_call(
    kernel: *const fxmlir_kernel,
    inputs: *const dlpack::Tensor,
    num_inputs: usize,
    outputs: *const dlpack::Tensor,
    num_outputs: usize,
) -> fxmlir_status {
    guard(|| {
        // SAFETY: see the function's contract.
        let kernel = unsafe { handle(kernel, "kernel") }?;
        let compiled = &kernel.compiled;
        let graph = compiled.name.as_str();
        if num_inputs != compiled.inputs.len() || num_outputs != compiled.outputs.len() {
            return Err(Failure(
                FXMLIR_ERROR_CALL,
                format!(
                    "graph `{graph}` takes {} inputs and {} outputs, got {num_inputs} and \
                     {num_outputs}",
                    compiled.inputs.len(),
                    compiled.outputs.len()
                ),
            ));
        }
        let slice = |p: *const dlpack::Tensor, n: usize| -> Result<&[dlpack::Tensor], Failure> {
            match (p.is_null(), n) {
                (_, 0) => Ok(&[]),
                (true, _) => Err(argument("a tensor array is null")),
                // SAFETY: `n` valid tensors, see the function's contract.
                (false, n) => Ok(unsafe { std::slice::from_raw_parts(p, n) }),
            }
        };
        let (inputs, outputs) = (slice(inputs, num_inputs)?, slice(outputs, num_outputs)?);
        let mut buffers = Vec::with_capacity(num_inputs + num_outputs);
        for (i, (tensor, meta)) in inputs.iter().zip(&compiled.inputs).enumerate() {
            let what = format!("input `{}` (argument {i})", kernel.input_names[i]);
            // SAFETY: see the function's contract.
            buffers.push((what.clone(), unsafe {
                checked(graph, &what, tensor, meta)
            }?));
        }
        for (i, (tensor, meta)) in outputs.iter().zip(&compiled.outputs).enumerate() {
            let what = format!("output {i}");
            // SAFETY: see the function's contract.
            let (start, extent) = unsafe { checked(graph, &what, tensor, meta) }?;
            let overlaps = buffers
                .iter()
                .find(|(_, (s, e))| extent > 0 && *e > 0 && start < s + e && *s < start + extent);
            if let Some((other, _)) = overlaps {
                return Err(Failure(
                    FXMLIR_ERROR_CALL,
                    format!("graph `{graph}`, {what}: its buffer overlaps {other}'s"),
                ));
            }
            buffers.push((what, (start, extent)));
        }
        let pointers: Vec<usize> = buffers.iter().map(|(_, (start, _))| *start).collect();
        // SAFETY: every buffer was checked against the layout the kernel was compiled for;
        // outputs overlap nothing.
        unsafe { compiled.call(&pointers, None) }?;
        Ok(())
    })
}
