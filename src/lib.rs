//! fxmlir: a `torch.compile` backend that compiles FX graphs through MLIR and LLVM.
//!
//! The path of one graph: [`graph`] (interchange JSON, validated) → [`lower`] (one registry of
//! ATen lowerings to linalg on tensors) → [`pipeline`] (named MLIR pass pipelines, dumpable) →
//! [`jit`] (LLVM IR, O2 for the target, machine code) → [`runtime`] (zero-copy calls). The
//! [`target`] (the CPU a compile is for) is an input to every layer, never read deep inside.

pub mod capi;
pub mod cli;
pub mod context;
pub mod dumps;
pub mod error;
pub mod graph;
pub mod jit;
pub mod libmvec;
pub mod logging;
pub mod lower;
pub mod native;
pub mod peak;
pub mod pipeline;
pub mod runtime;
pub mod target;
pub mod tuning;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};
pub use graph::Graph;
pub use runtime::{CompiledGraph, Options, build, compile};
pub use target::Target;

/// Every ATen overload with a registered lowering, and its family.
pub fn supported_ops() -> Result<Vec<(&'static str, &'static str)>> {
    Ok(lower::Registry::global()?.ops().collect())
}
