//! Indexing maps: the one builder of their text (the lowering and the stages write maps into
//! generated IR and transform scripts, which stock `mlir-opt` replays), and what a structured
//! op's maps and body say: which operands it reads broadcast, whether its body is plain.

use super::ops::{op_name, tensor_shape};
use melior::ir::{BlockLike, RegionLike, Value, operation::OperationLike};

/// `affine_map<(d0, …, d{rank-1}) -> (results…)>`, each result an affine expression of the
/// dimensions (`d1`, `0`, `d0 * 2 + d2`).
pub fn affine_map<S: AsRef<str>>(rank: usize, results: &[S]) -> String {
    let dims: Vec<String> = (0..rank).map(dim).collect();
    let results: Vec<&str> = results.iter().map(AsRef::as_ref).collect();
    format!(
        "affine_map<({}) -> ({})>",
        dims.join(", "),
        results.join(", ")
    )
}

/// `affine_map<(d0, …) -> (d0, …)>` over `rank` dimensions.
pub fn identity_map(rank: usize) -> String {
    affine_map(rank, &(0..rank).map(dim).collect::<Vec<_>>())
}

/// The name of dimension `d` in a map's text: `d{d}`.
pub fn dim(d: usize) -> String {
    format!("d{d}")
}

/// The result expressions of a printed affine map: `["d0", "0"]` for
/// `affine_map<(d0, d1) -> (d0, 0)>`.
pub fn map_results(map: &str) -> Option<Vec<&str>> {
    let results = map.split_once("-> (")?.1.strip_suffix(")>")?;
    Some(results.split(", ").filter(|r| !r.is_empty()).collect())
}

/// The loop a map result reads when it is a plain dimension: `d2` → 2.
pub fn result_dim(result: &str) -> Option<usize> {
    result.strip_prefix('d')?.parse().ok()
}

/// Whether a printed affine map only drops or broadcasts dimensions, in order, like
/// `(d0, d1) -> (d1)` or `(d0, d1) -> (0, d1)` (reads that vectorise to plain transfers).
pub fn is_broadcast_map(map: &str, rank: usize) -> bool {
    let Some(results) = map_results(map) else {
        return false;
    };
    let mut last = None;
    results.into_iter().all(|r| {
        if r == "0" {
            return true;
        }
        let Some(d) = result_dim(r) else {
            return false;
        };
        let ordered = d < rank && last.is_none_or(|l| d > l);
        last = Some(d);
        ordered
    })
}

/// The ops of a structured op's body (its region's first block), the yield included; `None`
/// for an op without a body.
pub fn body_ops<'c, 'a>(
    op: &melior::ir::OperationRef<'c, 'a>,
) -> Option<Vec<melior::ir::OperationRef<'c, 'a>>> {
    let block = op.region(0).ok()?.first_block()?;
    Some(std::iter::successors(block.first_operation(), |inner| inner.next_in_block()).collect())
}

/// Whether the body of a structured op holds only `arith` and `math` ops (and the yield),
/// none with regions: such a body vectorises and lowers for any vector shape.
pub fn plain_body(op: &melior::ir::OperationRef) -> bool {
    body_ops(op).is_some_and(|ops| {
        ops.iter().all(|inner| {
            let name = op_name(inner);
            (name.starts_with("arith.") || name.starts_with("math.") || name == "linalg.yield")
                && inner.region_count() == 0
        })
    })
}

/// For an all-parallel `linalg.generic` whose body is plain arithmetic: per operand, whether
/// its indexing map is the identity. `None` when the generic cannot be fused as an epilogue
/// (including when an operand is read through a transposing map).
pub fn elementwise_maps(op: &melior::ir::OperationRef) -> Option<Vec<bool>> {
    let iterators = op.attribute("iterator_types").ok()?.to_string();
    let maps = op.attribute("indexing_maps").ok()?;
    let maps = melior::ir::attribute::ArrayAttribute::try_from(maps).ok()?;
    if iterators.contains("reduction") || op.result_count() != 1 {
        return None;
    }
    // An f32/f64 result, read from f32/f64 operands or 32/64-bit integers (a grouped
    // product's row groups): vectors of narrower or i1 elements would be written to memory
    // packed (an i1 vector store writes bits, where the buffer holds a byte each).
    let element = |v: Value| tensor_shape(v).map(|(_, e)| e);
    let written = op
        .results()
        .all(|r| element(r.into()).is_some_and(|e| e == "f32" || e == "f64"));
    let read = op
        .operands()
        .all(|v| element(v).is_some_and(|e| ["f32", "f64", "i32", "i64"].contains(&e.as_str())));
    if !(written && read) {
        return None;
    }
    if !plain_body(op) {
        return None;
    }
    let (shape, _) = tensor_shape(op.result(0).ok()?.into())?;
    let rank = shape.len();
    let identity = identity_map(rank);
    let maps = (0..maps.len())
        .map(|i| maps.element(i).map(|m| m.to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .ok()?;
    if !maps.iter().all(|m| is_broadcast_map(m, rank)) {
        return None;
    }
    let flags: Vec<bool> = maps.iter().map(|m| *m == identity).collect();
    // The output must be written with the identity map.
    if flags.last() != Some(&true) || flags.len() != op.operand_count() {
        return None;
    }
    Some(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_print_as_mlir_does() {
        assert_eq!(
            affine_map(3, &["d0", "0", "d2 * 2 + d1"]),
            "affine_map<(d0, d1, d2) -> (d0, 0, d2 * 2 + d1)>"
        );
        assert_eq!(identity_map(2), "affine_map<(d0, d1) -> (d0, d1)>");
        assert_eq!(affine_map::<&str>(2, &[]), "affine_map<(d0, d1) -> ()>");
    }

    #[test]
    fn broadcast_maps() {
        assert!(is_broadcast_map("affine_map<(d0, d1) -> (d0, d1)>", 2));
        assert!(is_broadcast_map("affine_map<(d0, d1) -> (d1)>", 2));
        assert!(is_broadcast_map("affine_map<(d0, d1) -> (0, d1)>", 2));
        assert!(is_broadcast_map("affine_map<(d0, d1) -> ()>", 2));
        assert!(!is_broadcast_map("affine_map<(d0, d1) -> (d1, d0)>", 2));
        assert!(!is_broadcast_map("affine_map<(d0, d1) -> (d0 + d1)>", 2));
    }
}
