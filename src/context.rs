//! MLIR context construction: the dialects fxmlir emits and consumes, the LLVM IR translations,
//! and the process-wide pass registration.

use crate::error::{Error, Result};
use melior::{
    Context,
    dialect::DialectRegistry,
    ir::{Module, operation::OperationLike},
    utility,
};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::rc::Rc;
use std::sync::{Once, OnceLock};

/// Dialects loaded up front so that generically built operations resolve, and so that the
/// `llvm` stage's `convert-to-llvm` finds every dialect it is told to convert (`omp` among
/// them) even in a module that has none of its ops. `x86vector`: the attention kernel's bf16
/// dot products (`src/lower/flash.rs`).
const DIALECTS: &[&str] = &[
    "func",
    "arith",
    "math",
    "linalg",
    "tensor",
    "bufferization",
    "memref",
    "scf",
    "cf",
    "llvm",
    "index",
    "ub",
    "affine",
    "vector",
    "x86vector",
    "omp",
];

/// A fresh context with every upstream dialect registered and ours loaded. Multithreading is
/// off: each graph is a single function and a thread pool costs more than it saves here.
/// Fails when `FXMLIR_LLVM_ARGS` holds a flag LLVM does not accept.
pub fn new_context() -> Result<Context> {
    command_line_options()?;
    let registry = DialectRegistry::new();
    utility::register_all_dialects(&registry);
    let context = Context::new_with_registry(&registry, false);
    for dialect in DIALECTS {
        context.get_or_load_dialect(dialect);
    }
    utility::register_all_llvm_translations(&context);
    Ok(context)
}

/// Registers every upstream pass once per process, so textual pipelines can name them.
pub fn register_passes() {
    static ONCE: Once = Once::new();
    ONCE.call_once(utility::register_all_passes);
}

/// Options fxmlir sets through LLVM's command-line parser (which MLIR's options share), ahead of
/// `FXMLIR_LLVM_ARGS`, so that a user's flag can override them:
/// - `-mlir-print-assume-verified`: printing an op verifies it first unless told not to, and
///   the transform dialect's `fuse_into_containing_op` prints its producer and container into
///   a diagnostic on every fusion, used only if the fusion fails: two thirds of the
///   `schedule` stage's time. fxmlir prints only verified IR (stages verify their output).
/// - `-slp-schedule-budget=5000`: the SLP vectoriser extends its scheduling region over at
///   most this many instructions of a block (LLVM's default: 100 000). The entry point is one
///   block of thousands of instructions (every allocation and call of the graph, with the
///   descriptor fields they pass); on resnet50 in bf16 (11 000 lines) SLP spent 0.4 s there,
///   half of the whole O2, to pair a few descriptor loads. Kernels' blocks are far smaller: on
///   the model cases only the entry points' code changes.
///
/// Tried and left out: `-disable-lsr` halved code generation on the transformer graphs, but
/// loop strength reduction is worth 15-25% of the matrix-product kernels' speed at 512² and
/// 1024².
const DEFAULT_OPTIONS: &[&str] = &["-mlir-print-assume-verified", "-slp-schedule-budget=5000"];

/// `FXMLIR_LLVM_ARGS` as this process read it (empty when unset): part of the compile cache
/// key, since the flags change the code.
pub fn llvm_args() -> &'static str {
    static ARGS: OnceLock<String> = OnceLock::new();
    ARGS.get_or_init(|| std::env::var("FXMLIR_LLVM_ARGS").unwrap_or_default())
}

/// `llvm::StringRef` passed by value: trivially copyable, so the C++ ABI passes it as this
/// struct in two registers.
#[repr(C)]
struct StringRef {
    data: *const c_char,
    length: usize,
}

unsafe extern "C" {
    /// `mlir::registerAsmPrinterCLOptions()`, which has no C API: it makes the printer's
    /// options (`-mlir-print-*`) known to the parser and the default printing flags read
    /// them. A `void()` function, so the C calling convention is the C++ one.
    #[link_name = "_ZN4mlir27registerAsmPrinterCLOptionsEv"]
    fn register_asm_printer_options();

    /// `llvm::cl::ParseCommandLineOptions(argc, argv, overview, errs, vfs, env_var,
    /// long_options_use_double_dash)`. The C API's `LLVMParseCommandLineOptions` passes a
    /// stream that drops every message and ignores the result, so a misspelt flag would be
    /// ignored without a word; with an error stream the parser reports each rejected flag
    /// there and returns false instead of exiting the process.
    #[link_name = "_ZN4llvm2cl23ParseCommandLineOptionsEiPKPKcNS_9StringRefEPNS_11raw_ostreamEPNS_3vfs10FileSystemES2_b"]
    fn parse_command_line_options(
        argc: c_int,
        argv: *const *const c_char,
        overview: StringRef,
        errors: *mut c_void,
        file_system: *mut c_void,
        environment_variable: *const c_char,
        long_options_use_double_dash: bool,
    ) -> bool;

    /// `llvm::errs()`: LLVM's unbuffered stream to standard error.
    #[link_name = "_ZN4llvm4errsEv"]
    fn llvm_errors() -> *mut c_void;
}

/// Parses `DEFAULT_OPTIONS`, then `FXMLIR_LLVM_ARGS` (whitespace-separated, as `llc`/`opt`
/// take them, e.g. `-unroll-threshold=100` or `-debug-pass-manager`), once per process, before
/// the first context or compile. A flag LLVM rejects fails this and every later call: LLVM
/// names it on standard error, the error names the variable.
pub fn command_line_options() -> Result<()> {
    static PARSED: OnceLock<bool> = OnceLock::new();
    let accepted = *PARSED.get_or_init(|| {
        // SAFETY: registers static option objects once; no arguments, no result.
        unsafe { register_asm_printer_options() };
        // The last occurrence of an option wins: the user's flags come after the defaults.
        let args: Vec<CString> = std::iter::once("fxmlir")
            .chain(DEFAULT_OPTIONS.iter().copied())
            .chain(llvm_args().split_whitespace())
            .filter_map(|a| CString::new(a).ok())
            .collect();
        let pointers: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        let overview = c"fxmlir";
        // SAFETY: `pointers` holds `args.len()` valid C strings that outlive the call; the
        // overview is a valid string of the given length; `llvm_errors` returns LLVM's
        // static stream; a null file system and environment variable are the defaults.
        unsafe {
            parse_command_line_options(
                pointers.len() as c_int,
                pointers.as_ptr(),
                StringRef {
                    data: overview.as_ptr(),
                    length: overview.count_bytes(),
                },
                llvm_errors(),
                std::ptr::null_mut(),
                std::ptr::null(),
                false,
            )
        }
    });
    if accepted {
        Ok(())
    } else {
        Err(Error::Llvm(format!(
            "FXMLIR_LLVM_ARGS=`{}` holds a flag LLVM does not accept (LLVM's message on \
             standard error names it)",
            llvm_args()
        )))
    }
}

/// Collects the context's diagnostics while it is alive.
pub struct Diagnostics<'c> {
    context: &'c Context,
    id: Option<melior::diagnostic::DiagnosticHandlerId>,
    messages: Rc<RefCell<Vec<String>>>,
}

impl<'c> Diagnostics<'c> {
    pub fn capture(context: &'c Context) -> Self {
        let messages = Rc::new(RefCell::new(Vec::new()));
        let sink = messages.clone();
        let id = context.attach_diagnostic_handler(move |d| {
            let mut text = format!("{}: {}", d.location(), d);
            for i in 0..d.note_count() {
                if let Ok(note) = d.note(i) {
                    text.push_str(&format!("\n  note: {}: {}", note.location(), note));
                }
            }
            sink.borrow_mut().push(text);
            true
        });
        Diagnostics {
            context,
            id: Some(id),
            messages,
        }
    }

    pub fn take(&self) -> String {
        std::mem::take(&mut *self.messages.borrow_mut()).join("\n")
    }
}

impl Drop for Diagnostics<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.context.detach_diagnostic_handler(id);
        }
    }
}

/// A dialect defined in IRDL (`irdl.dialect`), loaded into a compile's context at run time:
/// `source` names it in errors (a file, or a plugin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dialect {
    pub source: String,
    pub irdl: String,
}

impl Dialect {
    /// The dialect an IRDL file defines, named by its path.
    pub fn from_file(path: &std::path::Path) -> Result<Dialect> {
        Ok(Dialect {
            source: path.display().to_string(),
            irdl: std::fs::read_to_string(path)
                .map_err(|e| Error::io(path.display().to_string(), e))?,
        })
    }
}

/// fxmlir's own dialect (`dialects/fxmlir.irdl.mlir`): the ops that stand for a node lowered
/// whole, expanded by the `expand` stage.
pub const FXMLIR_DIALECT: &str = include_str!("../dialects/fxmlir.irdl.mlir");

/// The file name under which dumps write fxmlir's dialect beside them.
pub const FXMLIR_DIALECT_FILE: &str = "fxmlir.irdl.mlir";

/// fxmlir's own dialect as a [`Dialect`].
pub fn fxmlir_dialect() -> Dialect {
    Dialect {
        source: "fxmlir (dialects/fxmlir.irdl.mlir)".to_string(),
        irdl: FXMLIR_DIALECT.to_string(),
    }
}

/// One IRDL module defining fxmlir's own dialect and `dialects`: what stock
/// `mlir-opt --irdl-file=…` (which takes one file) needs to parse a module that uses them.
pub fn irdl_of(dialects: &[Dialect]) -> String {
    std::iter::once(&fxmlir_dialect())
        .chain(dialects)
        .map(|d| format!("// From {}\n{}", d.source, d.irdl.trim_end()))
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n"
}

/// Loads fxmlir's own dialect and `dialects` into `context`, so that their ops parse, verify
/// and print. Returns the IRDL modules, which must live as long as the context uses the
/// dialects. A module that does not parse or define a valid dialect is an error naming its
/// source.
pub fn load_dialects<'c>(context: &'c Context, dialects: &[Dialect]) -> Result<Vec<Module<'c>>> {
    std::iter::once(&fxmlir_dialect())
        .chain(dialects)
        .map(|dialect| {
            let invalid = |message: String| Error::Dialect {
                origin: dialect.source.clone(),
                message,
            };
            let diagnostics = Diagnostics::capture(context);
            let module = Module::parse(context, &dialect.irdl)
                .ok_or_else(|| invalid(format!("does not parse:\n{}", diagnostics.take())))?;
            if !module.as_operation().verify() {
                return Err(invalid(format!("does not verify:\n{}", diagnostics.take())));
            }
            // SAFETY: a live, verified module of `context`; the dialects it defines are
            // registered in that context.
            let loaded = unsafe { mlir_sys::mlirLoadIRDLDialects(module.to_raw()) };
            if loaded.value == 0 {
                return Err(invalid(format!(
                    "defines no loadable dialect:\n{}",
                    diagnostics.take()
                )));
            }
            Ok(module)
        })
        .collect()
}
