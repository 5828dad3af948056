//! fxmlir: a `torch.compile` backend that compiles FX graphs through MLIR and LLVM.
//!
//! The path of one graph: [`graph`] (interchange JSON, validated) → [`lower`] (one registry of
//! ATen lowerings to linalg on tensors) → [`pipeline`] (named MLIR pass pipelines, dumpable) →
//! [`jit`] (LLVM IR, host O3, machine code) → [`runtime`] (zero-copy calls).

pub mod context;
pub mod error;
pub mod graph;
pub mod jit;
pub mod logging;
pub mod lower;
pub mod pipeline;
pub mod runtime;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};
pub use graph::Graph;
pub use runtime::{CompiledGraph, Options, compile};

/// Every ATen overload with a registered lowering, and its family.
pub fn supported_ops() -> Result<Vec<(&'static str, &'static str)>> {
    Ok(lower::Registry::global()?.ops().collect())
}
