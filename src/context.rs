//! MLIR context construction: the dialects fxmlir emits and consumes, the LLVM IR translations,
//! and the process-wide pass registration.

use melior::{Context, dialect::DialectRegistry, utility};
use std::sync::Once;

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
