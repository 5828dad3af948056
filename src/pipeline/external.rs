//! Stages whose work is a pass written in C against MLIR's C API (`mlirCreateExternalPass`):
//! the C API's `fxmlir_session_add_external_stage` hands over the callbacks
//! (`MlirExternalPassCallbacks`) and their user data; the stage runs the pass on every
//! operation named `op_name` (the module itself for `builtin.module`). The pass signals
//! failure with `mlirExternalPassSignalFailure`, which fails the stage like any other.

use crate::error::{Error, Result};
use melior::{Context, ir::Module};
use mlir_sys::{MlirExternalPassCallbacks, MlirStringRef};
use std::ffi::c_void;
use std::sync::Arc;

/// A pass given as C callbacks.
pub struct ExternalPass {
    /// The stage's name, the pass's name in diagnostics.
    pub name: String,
    /// The operations it runs on (`func.func`, `builtin.module`).
    pub op_name: String,
    callbacks: MlirExternalPassCallbacks,
    user_data: usize,
}

// SAFETY: the C API's contract: the callbacks and their user data may be used from any thread
// that compiles with the session, one compile at a time per pass instance.
unsafe impl Send for ExternalPass {}
// SAFETY: as above; fxmlir never calls the callbacks itself, MLIR's pass manager does.
unsafe impl Sync for ExternalPass {}

impl ExternalPass {
    /// # Safety
    /// The callbacks are valid C functions and `user_data` what they expect, for as long as
    /// any stage holds the pass.
    pub unsafe fn new(
        name: &str,
        op_name: &str,
        callbacks: MlirExternalPassCallbacks,
        user_data: *mut c_void,
    ) -> Arc<ExternalPass> {
        Arc::new(ExternalPass {
            name: name.to_string(),
            op_name: op_name.to_string(),
            callbacks,
            user_data: user_data as usize,
        })
    }
}

impl PartialEq for ExternalPass {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ExternalPass {}

impl std::fmt::Debug for ExternalPass {
    /// The name, the op and the identity of the callbacks (part of the compile-cache key: two
    /// passes never share kernels).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "external {} on {} at {:p}",
            self.name, self.op_name, self as *const Self
        )
    }
}

fn string_ref(text: &str) -> MlirStringRef {
    MlirStringRef {
        data: text.as_ptr().cast(),
        length: text.len(),
    }
}

/// Runs `pass` on `module` (in its context); a pass that signals failure is an error naming
/// the stage, with the diagnostics it emitted.
pub fn run(context: &Context, module: &mut Module, pass: &Arc<ExternalPass>) -> Result<usize> {
    let diagnostics = super::Diagnostics::capture(context);
    // SAFETY: the pass manager and the pass live for this call; the type id is the pass's
    // address (aligned, unique while it lives); the callbacks are valid (see
    // `ExternalPass::new`).
    let succeeded = unsafe {
        let manager = mlir_sys::mlirPassManagerCreate(context.to_raw());
        let external = mlir_sys::mlirCreateExternalPass(
            mlir_sys::mlirTypeIDCreate(Arc::as_ptr(pass).cast()),
            string_ref(&pass.name),
            string_ref(&pass.name),
            string_ref("a pass given through fxmlir's C API"),
            string_ref(&pass.op_name),
            0,
            std::ptr::null_mut(),
            pass.callbacks,
            pass.user_data as *mut c_void,
        );
        if pass.op_name == "builtin.module" {
            mlir_sys::mlirPassManagerAddOwnedPass(manager, external);
        } else {
            let nested =
                mlir_sys::mlirPassManagerGetNestedUnder(manager, string_ref(&pass.op_name));
            mlir_sys::mlirOpPassManagerAddOwnedPass(nested, external);
        }
        let result = mlir_sys::mlirPassManagerRunOnOp(manager, module.as_operation().to_raw());
        mlir_sys::mlirPassManagerDestroy(manager);
        result.value != 0
    };
    if succeeded {
        Ok(1)
    } else {
        Err(Error::stage(
            pass.name.clone(),
            format!("its C pass failed:\n{}", diagnostics.take()),
        ))
    }
}
