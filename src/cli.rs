//! What the command-line tools share: the flags that choose the target and add stages and
//! dialects to a compile.

use crate::context::Dialect;
use crate::error::Result;
use crate::native::{Kind, Plugin};
use crate::pipeline::StageEdit;
use crate::target::Target;
use std::path::PathBuf;

/// `--target` and `--threads`, for `fxmlir` and `fxmlir-opt`.
#[derive(clap::Args, Debug, Default)]
pub struct TargetArgs {
    /// The CPU to compile for: `host`, a named CPU (`znver4`, `skylake-avx512`, `x86-64-v3`)
    /// or either with changes (`host,-avx512bf16`, `x86-64-v4,+avx512bf16,l2=1M`). Default:
    /// the target an input module records (`fxmlir.target`, as every dump does), else
    /// `FXMLIR_TARGET`, else the host.
    #[arg(long)]
    pub target: Option<String>,
    /// Threads kernels split their large loops across (unless the target says `threads=`).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl TargetArgs {
    /// The target `--target` names, else `recorded` (an input module's), else
    /// `FXMLIR_TARGET`, else the host; with `--threads`.
    pub fn target(&self, recorded: Option<&str>) -> Result<Target> {
        let target = match self.target.as_deref().or(recorded) {
            Some(spec) => Target::parse(spec)?,
            None => Target::from_env()?,
        };
        Ok(match self.threads {
            Some(n) => target.with_threads(n),
            None => target,
        })
    }
}

/// `--add-stage` and `--irdl-file`, for `fxmlir` and `fxmlir-opt`.
#[derive(clap::Args, Debug, Default)]
pub struct ExtensionArgs {
    /// Add a stage to the pipeline: `PLACEMENT:ANCHOR:NAME:KIND=VALUE`, e.g.
    /// `after:fusion:cse:passes=builtin.module(cse)`, `before:llvm:mine:pdl=patterns.mlir`,
    /// `replace:parallel:tile:transform=script.mlir`. Repeatable; applied in order.
    #[arg(long = "add-stage")]
    pub add_stage: Vec<String>,
    /// Load a dialect defined in IRDL into the compile. Repeatable.
    #[arg(long = "irdl-file")]
    pub irdl_file: Vec<PathBuf>,
    /// Load a native MLIR pass plugin (`mlirGetPassPluginInfo`, built against the same
    /// MLIR); its passes can then be named in a stage's passes. Repeatable.
    #[arg(long = "load-pass-plugin")]
    pub load_pass_plugin: Vec<PathBuf>,
    /// Load a native MLIR dialect plugin (`mlirGetDialectPluginInfo`). Repeatable.
    #[arg(long = "load-dialect-plugin")]
    pub load_dialect_plugin: Vec<PathBuf>,
}

impl ExtensionArgs {
    /// The stage edits, in order.
    pub fn stages(&self) -> Result<Vec<StageEdit>> {
        self.add_stage.iter().map(|s| StageEdit::parse(s)).collect()
    }

    /// The native plugins, loaded (pass plugins register their passes).
    pub fn plugins(&self) -> Result<Vec<Plugin>> {
        let passes = self.load_pass_plugin.iter().map(|p| (p, Kind::Pass));
        let dialects = self.load_dialect_plugin.iter().map(|p| (p, Kind::Dialect));
        passes
            .chain(dialects)
            .map(|(path, kind)| crate::native::load(path, kind))
            .collect()
    }

    /// The dialects, read from their files.
    pub fn dialects(&self) -> Result<Vec<Dialect>> {
        self.irdl_file
            .iter()
            .map(|path| Dialect::from_file(path))
            .collect()
    }
}
