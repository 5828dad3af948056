//! Typed queries of MLIR and the builders every layer shares: ops, values and types
//! ([`ops`]), indexing maps ([`maps`]), building ops in place ([`builder`]), and outlining a
//! group of ops into a function ([`outlining`]). A leaf under the lowering and the pipeline's
//! stages: it imports neither.

pub mod builder;
pub mod decompositions;
pub mod maps;
pub mod ops;
pub mod outlining;

/// `values` as MLIR prints an integer array: `[1, 2, 3]`.
pub fn list(values: &[i64]) -> String {
    format!("[{}]", items(values))
}

/// `values` separated by commas: `1, 2, 3`.
pub fn items(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(i64::to_string).collect();
    items.join(", ")
}
