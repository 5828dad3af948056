//! The `schedule` stage: register-tiled, vectorised matrix products. Rust reads the static
//! shapes of every `linalg.matmul` / `linalg.batch_matmul` on `f32` or `f64`, picks tile sizes
//! that divide them (so every tile is full and vectorises without masks), tags the op and
//! appends a generated transform-dialect schedule (`@__transform_main`) to the module. The
//! stage's textual pipeline runs the upstream `transform-interpreter`, so the stage input (with
//! the schedule inside) replays in stock `mlir-opt`. Afterwards `transform::detach` erases the schedule.
//!
//! The shape of the generated code: an `mr`×`nr` accumulator tile (two vector registers wide,
//! at most eight rows) stays in registers over the reduction loop, which advances `ku` steps of
//! `k` at a time; `vector.contract` is left for `convert-vector-to-llvm` to lower as outer
//! products (broadcast-FMA). Large products get a `kc` reduction block (and, when wide, an `nc`
//! column block) so a block of the right operand stays in L2, packed into contiguous panels
//! (one per column tile) as each block begins, and small-`m` products walk columns outermost. Rows or columns that no good tile divides (a prime row count, 1000
//! columns) are split into a main part of full tiles and one narrower tile. A single
//! elementwise consumer (bias, activation) is tiled with the product and fused into its tile
//! loop, so the product never reaches memory. Symbolic sizes are planned at
//! `SYMBOLIC_PLANNING_SIZE`: symbolic rows and columns have their register tile loops peeled
//! (full tiles, then single rows or columns), a symbolic reduction steps one at a time.
//! Everything else (other dtypes, transposed matmul variants) keeps the scalar path; one with
//! symbolic sizes is cut into a chunk per thread (`plan::ScalarProduct`), which also keeps the
//! fusion stage from fusing producers into its loops.

mod isolate;
mod model;
mod plan;
mod script;

use isolate::{isolate, merge_identical};
pub use model::Element;
pub use plan::weight_panels;
use plan::{plan_products, scalar_products};
use script::emit;

use super::chains;
use super::transform::{append_script, has_entry, tag};
use crate::error::Result;
use crate::target::Target;
use melior::{Context, ir::Module};
use std::collections::HashMap;

/// Discardable attribute naming a scheduled contraction (value: its index in the schedule).
pub const CONTRACTION_TAG: &str = "fxmlir.contraction";
/// Discardable attribute naming the elementwise consumer fused into a contraction's tile loop.
pub const EPILOGUE_TAG: &str = "fxmlir.epilogue";
/// Discardable attribute naming a product left to the scalar path, cut into thread chunks.
pub const SCALAR_PRODUCT_TAG: &str = "fxmlir.scalar_product";

/// Tags the contractions of `module` (and their fused epilogues) and appends the transform
/// schedule that tiles and vectorises them. Returns how many contractions it scheduled. A module
/// that already has a `@__transform_main` is left alone.
pub fn attach(context: &Context, module: &mut Module, target: &Target) -> Result<usize> {
    if has_entry(module) {
        return Ok(0);
    }
    let folded = chains::fold(context, module)?;
    tracing::debug!(
        folded,
        "elementwise ops folded into the chains after products"
    );
    let mut planned = plan_products(module, target);
    let scalar = scalar_products(module, target.threads as i64);
    let mut tags: HashMap<usize, (&str, i64)> = HashMap::new();
    for (id, p) in planned.iter().enumerate() {
        tags.insert(p.op, (CONTRACTION_TAG, id as i64));
        if let Some(e) = p.epilogue {
            tags.insert(e, (EPILOGUE_TAG, id as i64));
        }
    }
    for (id, p) in scalar.iter().enumerate() {
        tags.insert(p.op, (SCALAR_PRODUCT_TAG, id as i64));
    }
    tag(module, &tags);
    let moved = isolate(context, module, &planned)?;
    // In a function of its own, a product's operands are arguments: `fuse` can pull in only
    // its fill.
    for &id in &moved {
        planned[id].only_fill_fusable = true;
    }
    let merged = merge_identical(context, module, &planned)?;
    tracing::debug!(
        moved = moved.len(),
        merged = merged.len(),
        "contractions moved into functions of their own, identical ones merged"
    );
    append_script(
        context,
        module,
        &emit(&planned, &merged, &scalar)?,
        "schedule",
    )?;
    Ok(planned.len() - merged.len())
}

#[cfg(test)]
mod tests {
    use super::model::*;
    use super::plan::plan_products;
    use super::*;
    use crate::tuning::PAIR_MAPS;

    /// A generic AVX-512 CPU: 32 registers of 64 bytes, no bf16 dot product, 2 MiB of L2.
    fn avx512() -> Target {
        Target::parse("x86-64-v4").unwrap()
    }

    fn problem(m: i64, k: i64, n: i64, element: Element) -> Problem {
        Problem {
            batch: None,
            m,
            n,
            k,
            element,
            operand: if element == Element::Bf16Pairs {
                "bf16"
            } else {
                element.name()
            },
            dynamic_batch: false,
            dynamic_rows: false,
            dynamic_columns: false,
            dynamic_reduction: false,
        }
    }

    #[test]
    fn tiles_divide_every_dimension() {
        for m in 1..40 {
            for n in [1, 3, 7, 16, 17, 33, 48, 65, 100, 1000, 3000, 4100] {
                for k in [1, 5, 64, 4096, 4099] {
                    for element in [Element::F32, Element::F64] {
                        let p = problem(m, k, n, element);
                        let t = choose_tiles(&p, &avx512());
                        let rows = t.m_split.map_or(m, |s| s.at);
                        let columns = t.n_split.map_or(n, |s| s.at);
                        assert_eq!(rows % t.mr, 0, "{p:?} {t:?}");
                        assert_eq!(columns % t.nr, 0, "{p:?} {t:?}");
                        for s in t.m_split.iter().chain(&t.n_split) {
                            assert!(s.at > 0 && s.rest > 0, "{p:?} {t:?}");
                        }
                        assert_eq!(t.m_split.map_or(m, |s| s.at + s.rest), m);
                        assert_eq!(t.n_split.map_or(n, |s| s.at + s.rest), n);
                        assert!(t.m_split.is_none_or(|s| s.rest < t.mr), "{p:?} {t:?}");
                        assert!(t.n_split.is_none_or(|s| s.rest < t.nr), "{p:?} {t:?}");
                        if let Some(b) = t.nc {
                            assert!(b.size % t.nr == 0 && b.covers % b.size == 0, "{p:?} {t:?}");
                            assert!(b.size < b.covers + 1 && b.covers <= columns, "{p:?} {t:?}");
                        }
                        let r = t.kc.unwrap_or(k);
                        assert_eq!(k % r, 0, "{p:?} {t:?}");
                        assert_eq!(r % t.ku, 0, "{p:?} {t:?}");
                        assert!(t.mr <= 8 && t.nr <= 32, "{p:?} {t:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn products_are_cut_into_thread_chunks() {
        let t = &avx512();
        // Wide right operand: columns, whole vectors per thread.
        let c = chunks(&problem(64, 512, 512, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![0, 256]);
        assert_eq!((c.chunk.m, c.chunk.n, c.chunk.k), (64, 256, 512));
        // Tall product (an im2col convolution): rows.
        let c = chunks(&problem(4096, 576, 64, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![2048, 0]);
        // Columns that no whole vector per thread divides fall back to rows.
        let c = chunks(&problem(64, 256, 1000, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![32, 0]);
        // A batch that divides evenly is cut first.
        let batched = Problem {
            batch: Some(8),
            ..problem(128, 64, 128, Element::F32)
        };
        let c = chunks(&batched, 4, t).unwrap();
        assert_eq!(c.sizes, vec![2, 0, 0]);
        assert_eq!(c.chunk.batch, Some(2));
        // One thread, small products and shapes with no even cut stay whole.
        assert_eq!(chunks(&problem(64, 512, 512, Element::F32), 1, t), None);
        assert_eq!(chunks(&problem(16, 16, 16, Element::F32), 2, t), None);
        assert_eq!(chunks(&problem(7, 4096, 1000, Element::F32), 1, t), None);
        // The threshold: 2^19 multiply-adds stay whole, 2^20 are cut; a batch counts.
        assert_eq!(chunks(&problem(64, 128, 64, Element::F32), 2, t), None);
        assert!(chunks(&problem(64, 128, 128, Element::F32), 2, t).is_some());
        let attention = Problem {
            batch: Some(8),
            ..problem(32, 32, 32, Element::F32)
        };
        assert_eq!(chunks(&attention, 2, t), None);
        // Products streaming their right operand with too few rows to cut: equal columns,
        // not whole vectors (688 = 2 x 344, 7 rows of 1000 columns), when the columns divide
        // evenly.
        let c = chunks(&problem(1, 256, 688, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![0, 344]);
        let c = chunks(&problem(7, 4096, 1000, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![0, 500]);
        assert_eq!(chunks(&problem(1, 256, 687, Element::F32), 2, t), None);
        // A pairs product's chunks are whole pair tiles: 1,024 columns in two 512s, but 1,008
        // not in two 504s.
        let c = chunks(&problem(1, 256, 1024, Element::Bf16Pairs), 2, t).unwrap();
        assert_eq!(c.sizes, vec![0, 512]);
        assert_eq!(
            chunks(&problem(1, 256, 1008, Element::Bf16Pairs), 2, t),
            None
        );
    }

    #[test]
    fn the_main_column_part_is_cut_when_the_whole_is_not() {
        let t = &avx512();
        // `q @ kᵀ` over three heads of 197 tokens: no even cut of the batch, rows or columns;
        // the 192 columns of whole register tiles are, 96 per thread.
        let scores = Problem {
            batch: Some(3),
            ..problem(197, 64, 197, Element::F32)
        };
        assert_eq!(chunks(&scores, 2, t), None);
        let c = main_part_chunks(&scores, 2, t).unwrap();
        assert_eq!(
            (c.sizes.clone(), c.chunk.n, c.main_part),
            (vec![0, 0, 96], 96, true)
        );
        assert_eq!(choose_tiles(&scores, t).n_split.map(|s| s.at), Some(192));
        // Nothing to cut on one thread, nor without a column split, nor in a blocked product.
        assert_eq!(main_part_chunks(&scores, 1, t), None);
        let no_split = Problem {
            batch: Some(3),
            ..problem(197, 64, 192, Element::F32)
        };
        assert_eq!(main_part_chunks(&no_split, 2, t), None);
        // Swin's window attention: 49 keys split at 32, whose cut (16 each) is narrower than
        // a register tile.
        let window = Problem {
            batch: Some(63),
            ..problem(49, 32, 49, Element::F32)
        };
        assert_eq!(main_part_chunks(&window, 2, t), None);
        let blocked = Problem {
            batch: Some(3),
            ..problem(197, 4096, 1000, Element::F32)
        };
        assert!(choose_tiles(&blocked, t).kc.is_some());
        assert_eq!(main_part_chunks(&blocked, 2, t), None);
    }

    #[test]
    fn symbolic_rows_and_batches_are_planned() {
        let t = &avx512();
        let rows = Problem {
            dynamic_rows: true,
            ..problem(64, 512, 512, Element::F32)
        };
        assert_eq!(rows.describe(), "?x512x512");
        let tiles = choose_tiles(&rows, t);
        assert_eq!(
            (tiles.mr, tiles.m_split, tiles.columns_outer),
            (8, None, false)
        );
        // Fixed columns are cut as usual; rows no column cut fits go in one chunk per thread.
        let c = chunks(&rows, 2, t).unwrap();
        assert_eq!((c.sizes.clone(), c.by_threads), (vec![0, 256], false));
        let odd = Problem {
            dynamic_rows: true,
            ..problem(64, 256, 1000, Element::F32)
        };
        let c = chunks(&odd, 2, t).unwrap();
        assert_eq!((c.sizes.clone(), c.by_threads), (vec![2, 0], true));
        let batch = Problem {
            batch: Some(64),
            dynamic_batch: true,
            ..problem(128, 64, 128, Element::F32)
        };
        assert_eq!(batch.describe(), "?x128x64x128");
        let c = chunks(&batch, 2, t).unwrap();
        assert_eq!((c.sizes.clone(), c.by_threads), (vec![2, 0, 0], true));
    }

    #[test]
    fn symbolic_columns_and_reductions_are_planned() {
        let t = &avx512();
        // `q @ kᵀ` of a decode step: one row, the columns a cache's length.
        let columns = Problem {
            dynamic_columns: true,
            ..problem(1, 64, 64, Element::F32)
        };
        assert_eq!(columns.describe(), "1x64x?");
        let tiles = choose_tiles(&columns, t);
        assert_eq!(
            (tiles.nr, tiles.n_split, tiles.kc, tiles.ku),
            (32, None, None, 4)
        );
        // However few its planned multiply-adds, one chunk of columns per thread.
        let c = chunks(&columns, 2, t).unwrap();
        assert_eq!((c.sizes.clone(), c.by_threads), (vec![0, 2], true));
        // `p @ v`: the reduction symbolic, one step at a time, never blocked.
        let reduction = Problem {
            dynamic_reduction: true,
            ..problem(64, 4096, 4096, Element::F32)
        };
        let tiles = choose_tiles(&reduction, t);
        assert_eq!((tiles.kc, tiles.nc, tiles.ku), (None, None, 1));
        // Every size symbolic: the rows in one chunk per thread.
        let every = Problem {
            dynamic_rows: true,
            dynamic_columns: true,
            dynamic_reduction: true,
            ..problem(64, 64, 64, Element::F32)
        };
        assert_eq!(every.describe(), "?x?x?");
        let c = chunks(&every, 2, t).unwrap();
        assert_eq!((c.sizes.clone(), c.by_threads), (vec![2, 0], true));
    }

    #[test]
    fn avx512_register_tiles() {
        let t = choose_tiles(&problem(256, 512, 256, Element::F32), &avx512());
        assert_eq!((t.mr, t.nr, t.kc), (8, 32, None));
        let t = choose_tiles(&problem(512, 512, 512, Element::F64), &avx512());
        assert_eq!((t.mr, t.nr, t.kc, t.nc), (8, 16, Some(256), None));
        let block = |size, covers| Some(Block { size, covers });
        let t = choose_tiles(&problem(1024, 1024, 1024, Element::F32), &avx512());
        assert_eq!(
            (t.kc, t.nc, t.columns_outer, t.ku),
            (Some(256), None, false, 4)
        );
        let t = choose_tiles(&problem(1024, 1024, 1024, Element::F64), &avx512());
        assert_eq!(
            (t.kc, t.nc, t.columns_outer, t.ku),
            (Some(128), None, false, 4)
        );
        let t = choose_tiles(&problem(64, 4096, 1024, Element::F32), &avx512());
        assert_eq!((t.kc, t.nc, t.columns_outer), (Some(256), None, true));
        // A prime depth cannot be blocked; 1000 columns block by a multiple of 4.
        let t = choose_tiles(&problem(512, 4099, 512, Element::F32), &avx512());
        assert_eq!((t.kc, t.ku), (None, 1));
        let t = choose_tiles(&problem(512, 2000, 1000, Element::F32), &avx512());
        assert_eq!((t.kc, t.nr, t.ku), (Some(200), 32, 4));
        assert_eq!(t.n_split, Some(TileSplit { at: 992, rest: 8 }));
        // Wide: 256-deep blocks of 1024 columns (1 MiB of the right operand, half of L2).
        let t = choose_tiles(&problem(197, 768, 3072, Element::F32), &avx512());
        assert_eq!((t.kc, t.nc), (Some(256), block(1024, 3072)));
        // Blocks need not divide the columns: 2976 main columns are 2 blocks of 1024 and 928
        // unblocked columns, then 24 columns.
        let t = choose_tiles(&problem(197, 768, 3000, Element::F32), &avx512());
        assert_eq!(t.nc, block(1024, 2048));
        assert_eq!(t.n_split, Some(TileSplit { at: 2976, rest: 24 }));
        // That tile is one vector and 8 columns, as is a whole width of 24.
        assert_eq!(t.n_tail, Some(TileSplit { at: 16, rest: 8 }));
        let t = choose_tiles(&problem(64, 64, 24, Element::F32), &avx512());
        assert_eq!(
            (t.nr, t.n_split, t.n_tail),
            (16, Some(TileSplit { at: 16, rest: 8 }), None)
        );
        // f64 3000 columns: pairs of 8-lane vectors up to 2992, then one vector.
        let t = choose_tiles(&problem(64, 64, 3000, Element::F64), &avx512());
        assert_eq!(
            (t.nr, t.n_split),
            (16, Some(TileSplit { at: 2992, rest: 8 }))
        );
        // 197 rows (prime): 24 full 8-row tiles and one of 5, not 197 one-row tiles; 100 rows
        // divide by 5.
        let t = choose_tiles(&problem(197, 768, 768, Element::F32), &avx512());
        assert_eq!((t.mr, t.m_split), (8, Some(TileSplit { at: 192, rest: 5 })));
        let t = choose_tiles(&problem(100, 784, 10, Element::F32), &avx512());
        assert_eq!((t.mr, t.nr, t.m_split, t.n_split), (5, 10, None, None));
    }

    #[test]
    fn avx2_tiles_follow_a_smaller_l2() {
        let zen3 = &Target::parse("znver3").unwrap();
        let block = |size, covers| Some(Block { size, covers });
        // Eight accumulators of two 8-lane vectors; 512³'s right operand (1 MiB) is blocked
        // here but not with a 2 MiB L2; blocks of 256 KiB.
        let t = choose_tiles(&problem(512, 512, 512, Element::F32), zen3);
        assert_eq!(
            (t.mr, t.nr, t.kc, t.nc),
            (4, 16, Some(256), block(256, 512))
        );
        assert_eq!(
            choose_tiles(&problem(512, 512, 512, Element::F32), &avx512()).kc,
            None
        );
        let t = choose_tiles(&problem(1024, 1024, 1024, Element::F32), zen3);
        assert_eq!((t.kc, t.nc), (Some(256), block(256, 1024)));
    }

    /// Compiles a graph of one product (`mm`, or `bmm` with `batch`), with the left operand
    /// optionally column-major, runs it on deterministic data and compares with a naive product
    /// in f64. Returns whether the schedule stage vectorised it.
    fn run_product(
        m: i64,
        k: i64,
        n: i64,
        batch: Option<i64>,
        f64_data: bool,
        column_major_a: bool,
    ) -> bool {
        let dtype = if f64_data { "float64" } else { "float32" };
        let lead: Vec<i64> = batch.into_iter().collect();
        let dims = |r: i64, c: i64| -> Vec<i64> { lead.iter().copied().chain([r, c]).collect() };
        let strides = |shape: &[i64], column_major: bool| -> Vec<i64> {
            let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let mut st = if column_major { vec![1, r] } else { vec![c, 1] };
            if shape.len() == 3 {
                st.insert(0, r * c);
            }
            st
        };
        let meta = |shape: &[i64], column_major: bool| {
            format!(
                r#"{{"shape": {shape:?}, "strides": {:?}, "dtype": "{dtype}"}}"#,
                strides(shape, column_major)
            )
        };
        let (sa, sb, sc) = (dims(m, k), dims(k, n), dims(m, n));
        let target = if batch.is_some() {
            "aten.bmm.default"
        } else {
            "aten.mm.default"
        };
        let json = format!(
            r#"{{"format": "fxmlir.graph", "version": 1, "name": "product",
              "inputs": [{{"name": "a", "meta": {}}}, {{"name": "b", "meta": {}}}],
              "nodes": [{{"name": "mm", "target": "{target}",
                "args": [{{"ref": {{"node": "a"}}}}, {{"ref": {{"node": "b"}}}}],
                "outputs": [{}]}}],
              "outputs": [{{"node": "mm"}}]}}"#,
            meta(&sa, column_major_a),
            meta(&sb, false),
            meta(&sc, false)
        );
        let graph = crate::Graph::from_json(&json).expect("valid graph");
        let dir = std::env::temp_dir().join(format!(
            "fxmlir-schedule-{}-{m}x{k}x{n}-{batch:?}-{f64_data}-{column_major_a}",
            std::process::id()
        ));
        let options = crate::Options {
            dump_dir: Some(dir.clone()),
            ..crate::Options::new(crate::Target::host().unwrap())
        };
        let compiled = crate::compile(&graph, None, &options).expect("compiles");
        let scheduled = std::fs::read_to_string(dir.join("product.02-schedule.mlir"))
            .expect("schedule dump")
            .contains("vector.contract");
        std::fs::remove_dir_all(&dir).ok();

        let b_count = batch.unwrap_or(1);
        let count = |s: &[i64]| s.iter().product::<i64>() as usize;
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        };
        let a: Vec<f64> = (0..count(&sa)).map(|_| next()).collect();
        let b: Vec<f64> = (0..count(&sb)).map(|_| next()).collect();
        // a[bi][i][p] as stored (row- or column-major within each batch).
        let at = |bi: i64, i: i64, p: i64| -> f64 {
            let base = bi * m * k;
            a[(base + if column_major_a { p * m + i } else { i * k + p }) as usize]
        };
        let mut expected = vec![0f64; count(&sc)];
        for bi in 0..b_count {
            for i in 0..m {
                for j in 0..n {
                    expected[(bi * m * n + i * n + j) as usize] = (0..k)
                        .map(|p| at(bi, i, p) * b[(bi * k * n + p * n + j) as usize])
                        .sum();
                }
            }
        }
        let got: Vec<f64> = if f64_data {
            let mut out = vec![0f64; count(&sc)];
            let (mut a, mut b) = (a.clone(), b.clone());
            let pointers = [
                a.as_mut_ptr() as usize,
                b.as_mut_ptr() as usize,
                out.as_mut_ptr() as usize,
            ];
            // SAFETY: the buffers match the graph's shapes, strides and dtype.
            unsafe { compiled.call(&pointers, None).expect("runs") };
            out
        } else {
            let mut a: Vec<f32> = a.iter().map(|&v| v as f32).collect();
            let mut b: Vec<f32> = b.iter().map(|&v| v as f32).collect();
            let mut out = vec![0f32; count(&sc)];
            let pointers = [
                a.as_mut_ptr() as usize,
                b.as_mut_ptr() as usize,
                out.as_mut_ptr() as usize,
            ];
            // SAFETY: as above.
            unsafe { compiled.call(&pointers, None).expect("runs") };
            out.into_iter().map(f64::from).collect()
        };
        let scale = expected.iter().fold(1f64, |acc, v| acc.max(v.abs()));
        let tolerance = if f64_data { 1e-12 } else { 1e-4 } * scale;
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (g - e).abs() <= tolerance,
                "{m}x{k}x{n} batch {batch:?}: element {i}: {g} vs {e}"
            );
        }
        scheduled
    }

    #[test]
    fn products_of_awkward_shapes_are_vectorised_and_correct() {
        for (m, k, n) in [
            (1, 1, 1),
            (3, 5, 7),
            (17, 33, 65),
            (8, 4, 32),
            (13, 300, 48),
            (40, 520, 600),
            (197, 64, 1000),
            // Reduction and column blocks, blocks not dividing the columns, split rows.
            (16, 512, 3000),
            (9, 600, 2100),
        ] {
            for f64_data in [false, true] {
                assert!(
                    run_product(m, k, n, None, f64_data, false),
                    "{m}x{k}x{n} not vectorised"
                );
            }
        }
        assert!(run_product(37, 19, 23, Some(4), false, false));
        assert!(run_product(19, 8, 70, Some(2), false, false));
        assert!(run_product(16, 600, 512, Some(3), true, false));
    }

    /// A `fxmlir.mm_pairs` contraction of `m x 2k` by `k x n x 2`, as the lowering builds it.
    fn pairs_module(context: &Context, m: i64, k: i64, n: i64) -> Module<'_> {
        let text = format!(
            "func.func @f(%a: tensor<{m}x{k}x2xbf16>, %b: tensor<{k}x{n}x2xbf16>, %c: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %r = linalg.contract indexing_maps = {PAIR_MAPS} ins(%a, %b : tensor<{m}x{k}x2xbf16>, tensor<{k}x{n}x2xbf16>) outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}"
        );
        Module::parse(context, &text).expect("a valid module")
    }

    #[test]
    fn pairs_products_need_the_dot_product_and_whole_vectors() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let bf16 = &Target::parse("x86-64-v4,+avx512bf16").unwrap();
        let planned = plan_products(&pairs_module(&context, 64, 128, 96), bf16);
        let [p] = planned.as_slice() else {
            panic!("one product planned, got {}", planned.len());
        };
        assert_eq!(p.problem, problem(64, 128, 96, Element::Bf16Pairs));
        // The tiles of an f32 product of as many steps, one pair per step.
        let f32_tiles = choose_tiles(&problem(64, 128, 96, Element::F32), &avx512());
        assert_eq!(p.tiles, Tiles { ku: 1, ..f32_tiles });
        assert!(p.epilogue.is_none());
        // Without AVX512-BF16, or with a width of no whole number of 16-lane vectors, the
        // contraction is left to the lowering's loops.
        assert!(plan_products(&pairs_module(&context, 64, 128, 96), &avx512()).is_empty());
        assert!(plan_products(&pairs_module(&context, 64, 128, 40), bf16).is_empty());
    }

    #[test]
    fn column_major_left_operand() {
        assert!(run_product(24, 40, 64, None, false, true));
        assert!(run_product(9, 7, 5, Some(2), true, true));
    }
}
