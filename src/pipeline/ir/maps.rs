//! Indexing maps: the one builder of their text (the lowering and the stages write maps into
//! generated IR and transform scripts, which stock `mlir-opt` replays), and what a structured
//! op's maps and body say: which operands it reads broadcast, whether its body is plain.

use super::ops::{op_name, tensor_dims, tensor_sizes};
use melior::ir::{
    AffineExpr, AffineMap, Attribute, BlockLike, OperationRef, RegionLike, Value,
    attribute::{ArrayAttribute, AttributeLike},
    operation::OperationLike,
};
use mlir_sys::{mlirAffineMapAttrGetValue, mlirAttributeIsAAffineMap};

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

/// One result of an indexing map, as the analyses read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapResult {
    /// A plain loop dimension: `d2`.
    Dim(usize),
    /// The constant 0 (a broadcast dimension).
    Zero,
    /// Anything else: another constant, a sum, a product.
    Other,
}

/// The affine map an attribute holds (`None` for another attribute).
pub fn map_of<'c>(attribute: Attribute<'c>) -> Option<AffineMap<'c>> {
    // SAFETY: a live attribute; the map is read only when the attribute holds one, and it
    // lives in the attribute's context.
    unsafe {
        mlirAttributeIsAAffineMap(attribute.to_raw())
            .then(|| AffineMap::from_raw(mlirAffineMapAttrGetValue(attribute.to_raw())))
    }
}

/// A structured op's `indexing_maps`, one per operand.
pub fn indexing_maps<'c>(op: &OperationRef<'c, '_>) -> Option<Vec<AffineMap<'c>>> {
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    (0..maps.len())
        .map(|i| maps.element(i).ok().and_then(map_of))
        .collect()
}

/// What each result of `map` is.
pub fn map_results(map: AffineMap) -> Vec<MapResult> {
    (0..map.result_count())
        .map(|i| match map.result(i) {
            Ok(e) if e.is_dim() => MapResult::Dim(e.dim_position()),
            Ok(e) if e.is_constant() && e.constant_value() == 0 => MapResult::Zero,
            _ => MapResult::Other,
        })
        .collect()
}

/// The loops a map result `expr` reads backwards: dimensions with a negative coefficient (a
/// transposed convolution's flipped kernel, `-d3 + 2`).
fn backwards_in(expr: AffineExpr, out: &mut Vec<usize>) {
    if expr.is_mul() {
        let (lhs, rhs) = (expr.lhs(), expr.rhs());
        if lhs.is_dim() && rhs.is_constant() && rhs.constant_value() < 0 {
            out.push(lhs.dim_position());
        }
    }
    if expr.is_binary() {
        backwards_in(expr.lhs(), out);
        backwards_in(expr.rhs(), out);
    }
}

/// The loops any result of `map` reads backwards (a negative coefficient).
pub fn backward_dims(map: AffineMap) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..map.result_count() {
        if let Ok(expr) = map.result(i) {
            backwards_in(expr, &mut out);
        }
    }
    out
}

/// Whether `map` is the identity over exactly `rank` dimensions.
pub fn is_identity_of(map: AffineMap, rank: usize) -> bool {
    map.dim_count() == rank && map.symbol_count() == 0 && map.is_identity()
}

/// Whether a map only drops or broadcasts dimensions, in order, like `(d0, d1) -> (d1)` or
/// `(d0, d1) -> (0, d1)` (reads that vectorise to plain transfers).
pub fn is_broadcast_map(map: AffineMap, rank: usize) -> bool {
    let mut last = None;
    map_results(map).into_iter().all(|r| match r {
        MapResult::Zero => true,
        MapResult::Dim(d) => {
            let ordered = d < rank && last.is_none_or(|l| d > l);
            last = Some(d);
            ordered
        }
        MapResult::Other => false,
    })
}

/// The kind of a structured op's loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IteratorKind {
    Parallel,
    Reduction,
}

/// A `linalg.generic`'s `iterator_types`, one per loop (`None` for an op without them).
pub fn iterator_kinds(op: &OperationRef) -> Option<Vec<IteratorKind>> {
    let context = op.context();
    let kinds = ArrayAttribute::try_from(op.attribute("iterator_types").ok()?).ok()?;
    // SAFETY: the op's context outlives this call.
    let context = unsafe { context.to_ref() };
    let reduction = Attribute::parse(context, "#linalg.iterator_type<reduction>")?;
    (0..kinds.len())
        .map(|i| {
            kinds.element(i).ok().map(|kind| {
                if kind == reduction {
                    IteratorKind::Reduction
                } else {
                    IteratorKind::Parallel
                }
            })
        })
        .collect()
}

/// Whether any loop of `op` is a reduction (`false` for an op without iterator types).
pub fn has_reduction(op: &OperationRef) -> bool {
    iterator_kinds(op).is_some_and(|kinds| kinds.contains(&IteratorKind::Reduction))
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
    iterator_kinds(op)?;
    let maps = indexing_maps(op)?;
    if has_reduction(op) || op.result_count() != 1 {
        return None;
    }
    // An f32/f64 result, read from f32/f64 operands or 32/64-bit integers (a grouped
    // product's row groups): vectors of narrower or i1 elements would be written to memory
    // packed (an i1 vector store writes bits, where the buffer holds a byte each).
    let element = |v: Value| tensor_sizes(v).map(|(_, e)| e);
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
    let rank = tensor_dims(op.result(0).ok()?.into())?.len();
    if !maps.iter().all(|m| is_broadcast_map(*m, rank)) {
        return None;
    }
    let flags: Vec<bool> = maps.iter().map(|m| is_identity_of(*m, rank)).collect();
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

    /// The affine map `text` parses to.
    fn parsed<'c>(context: &'c melior::Context, text: &str) -> AffineMap<'c> {
        map_of(Attribute::parse(context, text).expect("an affine map")).expect("an affine map")
    }

    #[test]
    fn broadcast_maps() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let map = |text| parsed(&context, text);
        assert!(is_broadcast_map(map("affine_map<(d0, d1) -> (d0, d1)>"), 2));
        assert!(is_broadcast_map(map("affine_map<(d0, d1) -> (d1)>"), 2));
        assert!(is_broadcast_map(map("affine_map<(d0, d1) -> (0, d1)>"), 2));
        assert!(is_broadcast_map(map("affine_map<(d0, d1) -> ()>"), 2));
        assert!(!is_broadcast_map(
            map("affine_map<(d0, d1) -> (d1, d0)>"),
            2
        ));
        assert!(!is_broadcast_map(
            map("affine_map<(d0, d1) -> (d0 + d1)>"),
            2
        ));
        assert!(!is_broadcast_map(map("affine_map<(d0, d1) -> (d0, 1)>"), 2));
    }

    #[test]
    fn results_identity_and_backward_reads() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let map = |text| parsed(&context, text);
        let flipped = map("affine_map<(d0, d1, d2, d3) -> (d0, -d3 + 2, d1 * 2 + d2, 0)>");
        assert_eq!(
            map_results(flipped),
            [
                MapResult::Dim(0),
                MapResult::Other,
                MapResult::Other,
                MapResult::Zero
            ]
        );
        assert_eq!(backward_dims(flipped), [3]);
        assert!(backward_dims(map("affine_map<(d0, d1) -> (d1 * 2 + d0)>")).is_empty());
        assert!(is_identity_of(map("affine_map<(d0, d1) -> (d0, d1)>"), 2));
        assert!(!is_identity_of(map("affine_map<(d0, d1) -> (d0, d1)>"), 3));
        assert!(!is_identity_of(map("affine_map<(d0, d1) -> (d1, d0)>"), 2));
    }
}
