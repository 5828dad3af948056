//! MLIR context construction: the dialects fxmlir emits and consumes, the LLVM IR translations,
//! and the process-wide pass registration.

use melior::{Context, dialect::DialectRegistry, utility};
use std::ffi::CString;
use std::sync::{Once, OnceLock};

/// Dialects loaded up front so that generically built operations resolve.
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
];

/// A fresh context with every upstream dialect registered and ours loaded. Multithreading is
/// off: each graph is a single function and a thread pool costs more than it saves here.
pub fn new_context() -> Context {
    command_line_options();
    let registry = DialectRegistry::new();
    utility::register_all_dialects(&registry);
    let context = Context::new_with_registry(&registry, false);
    for dialect in DIALECTS {
        context.get_or_load_dialect(dialect);
    }
    utility::register_all_llvm_translations(&context);
    context
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
///
/// Tried and left out: `-disable-lsr` halved code generation on the transformer graphs, but
/// loop strength reduction is worth 15-25% of the matrix-product kernels' speed at 512² and
/// 1024².
const DEFAULT_OPTIONS: &[&str] = &["-mlir-print-assume-verified"];

/// `FXMLIR_LLVM_ARGS` as this process read it (empty when unset): part of the compile cache
/// key, since the flags change the code.
pub fn llvm_args() -> &'static str {
    static ARGS: OnceLock<String> = OnceLock::new();
    ARGS.get_or_init(|| std::env::var("FXMLIR_LLVM_ARGS").unwrap_or_default())
}

unsafe extern "C" {
    /// `mlir::registerAsmPrinterCLOptions()`, which has no C API: it makes the printer's
    /// options (`-mlir-print-*`) known to the parser and the default printing flags read
    /// them. A `void()` function, so the C calling convention is the C++ one.
    #[link_name = "_ZN4mlir27registerAsmPrinterCLOptionsEv"]
    fn register_asm_printer_options();
}

/// Parses [`DEFAULT_OPTIONS`], then `FXMLIR_LLVM_ARGS` (whitespace-separated, as `llc`/`opt`
/// take them, e.g. `-unroll-threshold=100` or `-debug-pass-manager`), once per process, before
/// the first context or compile.
pub fn command_line_options() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers static option objects once; no arguments, no result.
        unsafe { register_asm_printer_options() };
        // The last occurrence of an option wins: the user's flags come after the defaults.
        let args: Vec<CString> = std::iter::once("fxmlir")
            .chain(DEFAULT_OPTIONS.iter().copied())
            .chain(llvm_args().split_whitespace())
            .filter_map(|a| CString::new(a).ok())
            .collect();
        let pointers: Vec<*const std::ffi::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        // SAFETY: `pointers` holds `args.len()` valid C strings that outlive the call; the
        // overview is a valid C string.
        unsafe {
            llvm_sys::support::LLVMParseCommandLineOptions(
                pointers.len() as i32,
                pointers.as_ptr(),
                c"fxmlir".as_ptr(),
            )
        };
    });
}
