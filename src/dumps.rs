//! Where a compile writes its dumps (`<dir>/<graph>.<suffix>`): the interchange document,
//! every stage's MLIR, the transform scripts, the LLVM IR and reproducers. A leaf: every layer
//! that writes a file takes a [`Dumps`].

use crate::error::{Error, Result};
use std::path::PathBuf;

/// Where dumps go, and the prefix of their file names (`<dir>/<graph>.NN-stage.mlir`).
#[derive(Debug, Clone)]
pub struct Dumps {
    pub dir: PathBuf,
    pub graph: String,
}

impl Dumps {
    pub fn path(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.graph))
    }

    pub fn write(&self, suffix: &str, text: &str) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(self.dir.display().to_string(), e))?;
        let path = self.path(suffix);
        std::fs::write(&path, text).map_err(|e| Error::io(path.display().to_string(), e))?;
        Ok(path)
    }
}
