//! Where a compile writes its dumps (`<dir>/<graph>.<suffix>`): the interchange document,
//! every stage's MLIR, the transform scripts, the LLVM IR and reproducers. A leaf: every layer
//! that writes a file takes a [`Dumps`].

use crate::error::{Error, Result};
use std::path::PathBuf;

/// Where dumps go, the prefix of their file names (`<dir>/<graph>.NN-stage.mlir`), and the
/// IRDL of the dialects the compile loaded (fxmlir's own and those of `--irdl-file`, plugins
/// or `fxmlir.config.dialects`), which every MLIR dump may use.
#[derive(Debug, Clone)]
pub struct Dumps {
    pub dir: PathBuf,
    pub graph: String,
    pub irdl: String,
}

/// The suffix of the file beside the MLIR dumps that defines their dialects.
pub const IRDL_SUFFIX: &str = "irdl.mlir";

impl Dumps {
    pub fn path(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.graph))
    }

    /// Writes `<graph>.<suffix>`. An MLIR dump starts with the `mlir-opt` command that reads
    /// it, and the dialects it may use are written beside it (`<graph>.irdl.mlir`).
    pub fn write(&self, suffix: &str, text: &str) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(self.dir.display().to_string(), e))?;
        let path = self.path(suffix);
        let text = if suffix.ends_with(".mlir") && suffix != IRDL_SUFFIX {
            let irdl = self.write(IRDL_SUFFIX, &self.irdl)?;
            format!("{}\n{text}", self.parse_command(&irdl))
        } else {
            text.to_string()
        };
        std::fs::write(&path, text).map_err(|e| Error::io(path.display().to_string(), e))?;
        Ok(path)
    }

    /// The comment an MLIR dump starts with: the stock `mlir-opt` flag that loads its
    /// dialects.
    fn parse_command(&self, irdl: &std::path::Path) -> String {
        let name = irdl.file_name().map_or_else(
            || irdl.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        format!("// Its dialects are defined beside it: mlir-opt --irdl-file={name} <this file>")
    }
}
