//! Indexing maps: the one builder of their text (the lowering and the stages write maps into
//! generated IR and transform scripts, which stock `mlir-opt` replays).

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
}
