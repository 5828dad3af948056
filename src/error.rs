//! The library's error type. Every fallible path returns [`Error`]; nothing panics on user input.

use std::fmt;

/// Where in the user's program a graph node came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSite {
    /// FX node name, e.g. `mm_3`.
    pub node: String,
    /// ATen overload, e.g. `aten.mm.default`.
    pub op: String,
    /// `file:line` from the node's stack trace, when known.
    pub source: Option<String>,
}

impl fmt::Display for NodeSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node `{}` ({})", self.node, self.op)?;
        if let Some(source) = &self.source {
            write!(f, " at {source}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The document is not valid interchange JSON (serde's message, with line and column).
    #[error("malformed graph: {0}")]
    Json(String),

    #[error("invalid graph: {0}")]
    InvalidGraph(String),

    #[error("unsupported op {}: no lowering is registered for `{}`", .0, .0.op)]
    UnsupportedOp(NodeSite),

    #[error("cannot lower {site}: {message}")]
    Lowering { site: NodeSite, message: String },

    #[error("MLIR verification failed for graph `{graph}`:\n{diagnostics}")]
    Verification { graph: String, diagnostics: String },

    #[error("pipeline stage `{stage}` failed:\n{diagnostics}{reproducer}")]
    Pipeline {
        stage: String,
        diagnostics: String,
        reproducer: String,
    },

    #[error("invalid pass pipeline `{pipeline}`: {message}")]
    PassPipeline { pipeline: String, message: String },

    #[error("LLVM: {0}")]
    Llvm(String),

    #[error("call error: {0}")]
    Call(String),

    /// A runtime check of a kernel failed at call time (an index out of range, an integer
    /// division by zero) in the node named.
    #[error("{} in {site}", .check.failure)]
    Checked { site: NodeSite, check: Check },

    /// A call a kernel made back into its host (a collective run in PyTorch's c10d) failed,
    /// for the node named.
    #[error("{site}: {message}")]
    HostCall { site: NodeSite, message: String },

    /// An IRDL dialect given to fxmlir that does not load.
    #[error("dialect from {origin}: {message}")]
    Dialect { origin: String, message: String },

    /// A native MLIR plugin (a shared object) that is refused or fails to load.
    #[error("native plugin {path}: {message}")]
    Plugin { path: String, message: String },

    /// A target spec that does not parse, or code for a target this host cannot run.
    #[error("{0}")]
    Target(String),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The exception PyTorch raises where a checked op fails: fxmlir raises the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    IndexError,
    RuntimeError,
}

/// What a kernel checks at run time for a node: the exception PyTorch raises when it fails,
/// and the failure, as PyTorch words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub raised: Raised,
    pub failure: &'static str,
}

impl Check {
    /// An index out of range, where PyTorch raises `IndexError` (embedding, index_select,
    /// advanced indexing).
    pub const INDEX_ERROR: Check = Check {
        raised: Raised::IndexError,
        failure: "index out of range",
    };
    /// An index out of range, where PyTorch raises `RuntimeError` (gather, scatter, bags).
    pub const INDEX_RUNTIME_ERROR: Check = Check {
        raised: Raised::RuntimeError,
        failure: "index out of range",
    };
    /// Two sizes that must be equal differ at run time (symbolic sizes traced as unrelated
    /// symbols: the lengths of an attention's keys and values).
    pub const SIZE_MISMATCH: Check = Check {
        raised: Raised::RuntimeError,
        failure: "sizes that must be equal differ",
    };
    /// An integer division or remainder by zero.
    pub const ZERO_DIVISION: Check = Check {
        raised: Raised::RuntimeError,
        failure: "ZeroDivisionError",
    };
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e.to_string())
    }
}

impl Error {
    /// A pipeline stage that failed with `diagnostics` and no reproducer (the failure is not in
    /// the passes, or there is nothing to replay).
    pub fn stage(stage: impl Into<String>, diagnostics: impl Into<String>) -> Self {
        Error::Pipeline {
            stage: stage.into(),
            diagnostics: diagnostics.into(),
            reproducer: String::new(),
        }
    }

    /// The same failure charged to `stage`: for work one stage's hook borrows from another
    /// (the schedule isolates products with the outline stage's outlining).
    pub fn in_stage(self, stage: &str) -> Self {
        match self {
            Error::Pipeline {
                diagnostics,
                reproducer,
                ..
            } => Error::Pipeline {
                stage: stage.to_string(),
                diagnostics,
                reproducer,
            },
            other => other,
        }
    }

    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_stage_failure_names_the_stage_that_borrowed_it() {
        let outlining = Error::stage("outline", "cannot parse the attribute x");
        assert_eq!(
            outlining.in_stage("schedule").to_string(),
            "pipeline stage `schedule` failed:\ncannot parse the attribute x"
        );
        let other = Error::Llvm("no target".to_string()).in_stage("schedule");
        assert_eq!(other.to_string(), "LLVM: no target");
    }
}
