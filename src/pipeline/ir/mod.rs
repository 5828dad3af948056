//! Typed queries of MLIR and the few builders every layer shares: indexing maps
//! ([`maps`]). A leaf under the lowering and the pipeline's stages: it imports neither.

pub mod maps;
