//! The transform script that tiles, packs and vectorises the planned contractions, as text
//! (stock `mlir-opt` replays it from the `.transform.mlir` dump).

use super::model::*;
use super::plan::*;
use super::{CONTRACTION_TAG, EPILOGUE_TAG, SCALAR_PRODUCT_TAG};
use crate::error::{Error, Result};
use crate::pipeline::transform::{ANY, handles, list, script};
use crate::tuning::{PAIR_LANES, largest_divisor_at_most};
use std::fmt::Write as _;

/// The transform script for one contraction, appended to the body of `@__transform_main`.
pub(super) fn emit_one(out: &mut String, id: usize, p: &PlannedProduct) -> std::fmt::Result {
    let t = &p.tiles;
    let batched = p.problem.batch.is_some();
    let pairs = p.problem.element == Element::Bf16Pairs;
    // The tile choice travels as the location of the match, so the dump shows it.
    let shape = p.problem.describe();
    let split = |name: &str, s: Option<TileSplit>| {
        s.map_or(String::new(), |s| {
            format!(", {name} split at {} (rest {})", s.at, s.rest)
        })
    };
    // Rows of row part `r` (see `emit_row_split`).
    let part_rows = |r: usize| match t.m_split {
        Some(s) if r == 0 => s.at,
        Some(s) => s.rest,
        None => p.rows(),
    };
    let why = format!(
        "{} {shape} {}: {}tile {}x{}, k step {}, k block {}{}{}{}{}{}{}{}",
        if batched { "batch_matmul" } else { "matmul" },
        p.problem.element.name(),
        p.chunks.as_ref().map_or(String::new(), |c| format!(
            "thread chunks {}{}, ",
            list(&c.sizes),
            match (c.by_threads, c.main_part) {
                (true, _) => " (threads)",
                (false, true) => " (main columns)",
                (false, false) => "",
            }
        )),
        t.mr,
        t.nr,
        t.ku,
        t.kc.map_or("none".to_string(), |c| c.to_string()),
        if p.packs(part_rows(0), t.nr) {
            ", right operand packed"
        } else {
            ""
        },
        t.nc.map_or(String::new(), |b| format!(
            ", column block {} over {} columns",
            b.size, b.covers
        )),
        match (p.peeled_rest(), t.m_split) {
            (Some(s), _) => format!(", rows peeled after {} (rest {})", s.at, s.rest),
            (None, s) => split("rows", s),
        },
        split("columns", t.n_split),
        split("column rest", t.n_tail),
        match (p.problem.dynamic_rows, p.problem.dynamic_columns) {
            (true, true) => ", rows and columns peeled",
            (true, false) => ", rows peeled",
            (false, true) => ", columns peeled",
            (false, false) => "",
        },
        match (p.epilogue.is_some(), t.columns_outer) {
            (true, _) => ", epilogue fused",
            (false, true) => ", columns outermost",
            (false, false) => "",
        }
    );
    // A cut of the main column part comes after the columns' split, below.
    let main_part = p.chunks.as_ref().filter(|c| c.main_part);
    match p.chunks.as_ref().filter(|c| !c.main_part) {
        None => writeln!(
            out,
            "    %c{id} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY} loc(\"{why}\")
    %fn{id} = transform.get_parent_op %c{id} {{isolated_from_above}} : ({ANY}) -> {ANY}"
        )?,
        Some(chunks) => emit_chunks(out, id, p, chunks, &why)?,
    }
    let (m_dim, n_dim) = if batched { (1, 2) } else { (0, 1) };
    // Sizes over the contraction's loops (batch, m, n, k): a leading 1 tiles the batch.
    let lead: &[i64] = if batched { &[1] } else { &[] };
    let zero: &[i64] = if batched { &[0] } else { &[] };
    let with_lead = |rest: &[i64]| [lead, rest].concat();
    let with_zero = |rest: &[i64]| [zero, rest].concat();
    let order = |loops: usize| -> Option<Vec<i64>> {
        // The m and n tile loops swap when columns go outermost.
        t.columns_outer.then(|| {
            let mut order: Vec<i64> = (0..loops as i64).collect();
            order.swap(m_dim, n_dim);
            order
        })
    };
    // Columns are cut first (outside any block loop: the rest is a narrow strip); rows are cut
    // inside the reduction/column blocks, so both row parts reuse the cached right block.
    // Column parts: (handle, register tile columns, column block, columns).
    let mut main = format!("%c{id}");
    let mut column_parts = Vec::new();
    let with_fills = p.cuts_columns_with_fills();
    let cut = |out: &mut String, handle: &str, name: &str, at: i64| {
        if with_fills {
            emit_column_cut(out, id, handle, name, &with_zero(&[0, at, 0]))
        } else {
            emit_split(out, handle, name, n_dim, at)
        }
    };
    if let Some(s) = t.n_split {
        let at = p.column_position(s.at);
        let (head, rest) = cut(out, &main, &format!("n{id}"), at)?;
        main = match main_part {
            Some(c) => {
                writeln!(
                    out,
                    "    %cm{id}, %wm{id} = transform.structured.tile_using_forall {head} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})",
                    list(&p.loop_sizes(&c.sizes))
                )?;
                format!("%cm{id}")
            }
            None => head,
        };
        match t.n_tail {
            Some(tail) => {
                let at = p.column_position(tail.at);
                let (vector, last) = cut(out, &rest, &format!("nt{id}"), at)?;
                column_parts.push((vector, tail.at, None, tail.at));
                column_parts.push((last, tail.rest, None, tail.rest));
            }
            None => column_parts.push((rest, s.rest, None, s.rest)),
        }
    }
    let main_columns = p.main_columns();
    match t.nc {
        Some(b) if b.covers < main_columns => {
            let at = p.column_position(b.covers);
            let (blocked, rest) = cut(out, &main, &format!("nb{id}"), at)?;
            column_parts.insert(0, (rest, t.nr, None, main_columns - b.covers));
            column_parts.insert(0, (blocked, t.nr, Some(b.size), b.covers));
        }
        _ => column_parts.insert(0, (main, t.nr, t.nc.map(|b| b.size), main_columns)),
    }
    // A short last row tile is peeled from the rows loop (the rows are then one part).
    let rest = p.peeled_rest();
    let row_split = t.m_split.filter(|_| rest.is_none());
    let whole = row_split.is_none() && (!p.cuts_columns() || with_fills);
    for (c, (handle, nr, nc, columns)) in column_parts.iter().enumerate() {
        let name = format!("{id}_{c}");
        if let Some(kc) = t.kc {
            // One block of the whole reduction: the fill goes into the column blocks (a part
            // without them is one block) and then into the register tiles, which start from
            // zeros.
            let fused = p.fuses_fill_into_block(whole);
            let sizes = if fused {
                p.loop_sizes(&with_lead(&[0, nc.unwrap_or(*columns), 0]))
            } else {
                p.loop_sizes(&with_lead(&[0, nc.unwrap_or(0), kc]))
            };
            let loops = sizes.iter().filter(|&&s| s != 0).count();
            writeln!(
                out,
                "    %b{name}, %bl{name}:{loops} = transform.structured.{} {handle} tile_sizes {} : ({ANY}) -> ({ANY}, {})",
                if fused { "fuse" } else { "tile_using_for" },
                list(&sizes),
                handles(loops)
            )?;
            let mut reductions = Vec::new();
            for (r, (row, mr)) in
                emit_row_split(out, &format!("%b{name}"), &name, m_dim, t, row_split)?
                    .into_iter()
                    .enumerate()
            {
                let part = format!("{name}_{r}");
                let sizes = p.loop_sizes(&with_zero(&[mr, *nr, 0]));
                let (op, interchange) = tiling(fused, order(sizes.len()).as_deref());
                writeln!(
                    out,
                    "    %t{part}, %tl{part}:2 = transform.structured.{op} {row} tile_sizes {}{interchange} : ({ANY}) -> ({ANY}, {ANY}, {ANY})",
                    list(&sizes),
                )?;
                let depth = (kc, *nr);
                if let Some(rest) = rest {
                    // The rows loop is the inner one when the columns go outermost.
                    let rows_loop = format!("%tl{part}#{}", usize::from(t.columns_outer));
                    let tile = format!("%t{part}");
                    let handles = (tile.as_str(), rows_loop.as_str());
                    let depth = (rest.at, kc);
                    reductions.extend(emit_rest_tiles(out, (id, &part), handles, p, depth, fused)?);
                    continue;
                }
                if !p.problem.dynamic_rows {
                    let rows = (part_rows(r), mr);
                    let tile = format!("%t{part}");
                    reductions.push(emit_tile_body(out, &part, &tile, p, rows, depth)?);
                    continue;
                }
                let rows_loop = format!("%tl{part}#0");
                for (i, peeled) in emit_peel(out, id, &part, &rows_loop, p, (fused, Peel::Rows))?
                    .iter()
                    .enumerate()
                {
                    let part = format!("{part}_{i}");
                    let rows = (peeled.rows, peeled.mr);
                    reductions.push(emit_tile_body(out, &part, &peeled.tile, p, rows, depth)?);
                }
            }
            emit_vectorize(out, &name, &format!("%bl{name}#0"), &reductions, pairs)?;
        } else {
            for (r, (row, mr)) in emit_row_split(out, handle, &name, m_dim, t, row_split)?
                .into_iter()
                .enumerate()
            {
                let part = format!("{name}_{r}");
                if p.column_panels() {
                    emit_column_panels(out, (id, &part), &row, p, (mr, *nr), whole)?;
                    continue;
                }
                let depth = (p.problem.k, *nr);
                let tiles = emit_register_tiles(out, id, &part, &row, p, (mr, *nr), whole)?;
                // Symbolic columns: their loop (inside the rows loop) is peeled first.
                let columns = if p.problem.dynamic_columns {
                    let columns_loop = format!("%tl{part}#{}", zero.len() + 1);
                    let fused = (tiles.fused_fill, Peel::Columns);
                    let name = format!("{part}c");
                    Some(emit_peel(out, id, &name, &columns_loop, p, fused)?)
                } else {
                    None
                };
                // Symbolic rows and a short last row tile: the rows loop is peeled below.
                if !p.problem.dynamic_rows && rest.is_none() {
                    let parts = match &columns {
                        Some([main, rest]) => vec![
                            (format!("{part}_0"), main.tile.clone(), main.rows),
                            (format!("{part}_1"), rest.tile.clone(), rest.rows),
                        ],
                        None => vec![(part.clone(), tiles.tile.clone(), part_rows(r))],
                    };
                    let mut reductions = Vec::new();
                    for (name, tile, rows) in parts {
                        let rows = (rows, mr);
                        reductions.push(emit_tile_body(out, &name, &tile, p, rows, depth)?);
                    }
                    emit_vectorize(out, &part, &tiles.outer, &reductions, pairs)?;
                    continue;
                }
                // The peel takes the rows loop: the batch loop (outside it) stays the scope,
                // else each of the two loops it leaves is one.
                let rows_loop = format!("%tl{part}#{}", zero.len());
                let fused = (tiles.fused_fill, Peel::Rows);
                let peeled = emit_peel(out, id, &part, &rows_loop, p, fused)?;
                let mut reductions = Vec::new();
                for (i, peeled) in peeled.iter().enumerate() {
                    let part = format!("{part}_{i}");
                    let rows = (peeled.rows, peeled.mr);
                    let reduction = emit_tile_body(out, &part, &peeled.tile, p, rows, depth)?;
                    if batched {
                        reductions.push(reduction);
                    } else {
                        emit_vectorize(out, &part, &peeled.scope, &[reduction], pairs)?;
                    }
                }
                if batched {
                    emit_vectorize(out, &part, &tiles.outer, &reductions, pairs)?;
                }
            }
        }
    }
    Ok(())
}

/// Cuts the product (through its epilogue, when it has one) into one `scf.forall` chunk per
/// thread, pulling the product and its fill into the chunk loop, and binds `%c<id>` to the
/// product inside it, which the rest of the schedule tiles like a whole product.
pub(super) fn emit_chunks(
    out: &mut String,
    id: usize,
    p: &PlannedProduct,
    chunks: &Chunks,
    why: &str,
) -> std::fmt::Result {
    writeln!(
        out,
        "    %a{id} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY} loc(\"{why}\")
    %fn{id} = transform.get_parent_op %a{id} {{isolated_from_above}} : ({ANY}) -> {ANY}"
    )?;
    if p.fill_init {
        writeln!(
            out,
            "    %af{id} = transform.get_producer_of_operand %a{id}[2] : ({ANY}) -> {ANY}"
        )?;
    }
    let sizes = format!(
        "{} {}",
        if chunks.by_threads {
            "num_threads"
        } else {
            "tile_sizes"
        },
        list(&p.loop_sizes(&chunks.sizes))
    );
    let containing = if p.epilogue.is_some() {
        writeln!(
            out,
            "    %ae{id} = transform.structured.match attributes {{{EPILOGUE_TAG} = {id} : i64}} in %fn{id} : ({ANY}) -> {ANY}
    %we{id}, %w{id} = transform.structured.tile_using_forall %ae{id} {sizes} : ({ANY}) -> ({ANY}, {ANY})
    %c{id}, %wc{id} = transform.structured.fuse_into_containing_op %a{id} into %w{id} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
        format!("%wc{id}")
    } else {
        writeln!(
            out,
            "    %c{id}, %w{id} = transform.structured.tile_using_forall %a{id} {sizes} : ({ANY}) -> ({ANY}, {ANY})"
        )?;
        format!("%w{id}")
    };
    if p.fill_init {
        writeln!(
            out,
            "    %wf{id}, %wfl{id} = transform.structured.fuse_into_containing_op %af{id} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
    }
    Ok(())
}

/// Splits `handle` along `dim` after `at`; returns the handles of the two parts.
pub(super) fn emit_split(
    out: &mut String,
    handle: &str,
    name: &str,
    dim: usize,
    at: i64,
) -> Result<(String, String), std::fmt::Error> {
    writeln!(
        out,
        "    %{name} = transform.structured.split {handle} after {at} {{dimension = {dim}}} : {ANY}
    %{name}_0, %{name}_1 = transform.split_handle %{name} : ({ANY}) -> ({ANY}, {ANY})"
    )?;
    Ok((format!("%{name}_0"), format!("%{name}_1")))
}

/// The op that tiles register tiles, `structured.fuse` (pulling the fill along) or
/// `structured.tile_using_for`, and the tile loops' `order` (none: as the sizes are) in that
/// op's syntax.
fn tiling(fuse: bool, order: Option<&[i64]>) -> (&'static str, String) {
    let (op, equals) = if fuse {
        ("fuse", "")
    } else {
        ("tile_using_for", " =")
    };
    let interchange = order.map_or(String::new(), |o| {
        format!(" interchange{equals} {}", list(o))
    });
    (op, interchange)
}

/// Cuts product `id` (`handle`, with its fill) into two column parts, each with a fill of its
/// own (see [`PlannedProduct::cuts_columns_with_fills`]): tiled by `sizes` (the first part's
/// columns) with the fill fused, the loop of two iterations peeled, each part's product
/// matched in its loop, and their parent canonicalized, which folds both one-iteration loops
/// away and leaves two products of fixed sizes. Returns the handles of the two parts.
pub(super) fn emit_column_cut(
    out: &mut String,
    id: usize,
    handle: &str,
    name: &str,
    sizes: &[i64],
) -> Result<(String, String), std::fmt::Error> {
    writeln!(
        out,
        "    %{name}t, %{name}l = transform.structured.fuse {handle} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})
    %{name}s = transform.get_parent_op %{name}l : ({ANY}) -> {ANY}
    %{name}f = transform.cast %{name}l : {ANY} to !transform.op<\"scf.for\">
    %{name}k, %{name}r = transform.loop.peel %{name}f : (!transform.op<\"scf.for\">) -> ({ANY}, {ANY})
    %{name}_0 = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %{name}k : ({ANY}) -> {ANY}
    %{name}_1 = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %{name}r : ({ANY}) -> {ANY}
    transform.apply_patterns to %{name}s {{
      transform.apply_patterns.canonicalization
    }} : {ANY}",
        list(sizes)
    )?;
    Ok((format!("%{name}_0"), format!("%{name}_1")))
}

/// The row parts of `handle` with their register-tile rows: itself, or its two halves when
/// `split` cuts the rows.
pub(super) fn emit_row_split(
    out: &mut String,
    handle: &str,
    name: &str,
    dim: usize,
    t: &Tiles,
    split: Option<TileSplit>,
) -> Result<Vec<(String, i64)>, std::fmt::Error> {
    Ok(match split {
        Some(s) => {
            let (main, rest) = emit_split(out, handle, &format!("m{name}"), dim, s.at)?;
            vec![(main, t.mr), (rest, s.rest)]
        }
        None => vec![(handle.to_string(), t.mr)],
    })
}

/// Rows of a right-operand panel copied per iteration of the packing loop.
pub(super) const PACK_ROWS: i64 = 8;

/// Packs the right operand of the register tile `handle`: its `kc` x `nr` slice (`k` x `nr`
/// unblocked) is copied (a zero-width `nofold` pad) and the copy hoisted out of the register
/// tile's two loops, which turns it into one contiguous panel per column tile, built once per
/// reduction block (once per product or thread chunk unblocked). Rows of the right operand
/// are a row stride apart; at 1024 f32 columns that stride is 4 KiB, every row of a panel
/// falls in the same L1 set and no prefetcher follows. Packed, the panel is read as one
/// stream (1024³ on one Zen 3 core: 38 to 80 GFLOP/s). Returns the handle of the padded
/// register tile.
pub(super) fn emit_packing(
    out: &mut String,
    part: &str,
    handle: &str,
    (operand, hoisted): (&str, usize),
    zero: &[i64],
    (kc, nr): (i64, i64),
) -> Result<String, std::fmt::Error> {
    // Not the rows: a short last register tile keeps its rows (padded, the left operand and
    // the accumulator would be copied per tile).
    let m_dim = zero.len() as i64;
    let dims: Vec<i64> = (0..m_dim + 3).filter(|&d| d != m_dim).collect();
    // The copy moves `rows` rows of the panel per iteration (unrolled whole, a 256-deep panel
    // was 512 vector transfers, and LLVM took a second over three of them).
    let rows = largest_divisor_at_most(kc, PACK_ROWS);
    let zero_value = format!("0.0 : {operand}");
    writeln!(
        out,
        "    %pd{part}, %pp{part}, %pc{part} = transform.structured.pad {handle} {{padding_values = [{zero_value}, {zero_value}, 0.0 : {accumulator}], padding_dimensions = {}, nofold_flags = {}, copy_back_op = \"none\"}} : ({ANY}) -> ({ANY}, {ANY}, {ANY})
    %ph{part} = transform.structured.hoist_pad %pp{part} by {hoisted} loops : ({ANY}) -> {ANY}
    %pr{part}, %prl{part} = transform.structured.tile_using_for %ph{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})
    transform.structured.vectorize %pr{part} vector_sizes {} : {ANY}",
        list(&dims),
        list(&[0, 1, 0]),
        list(&[zero, &[rows, 0]].concat()),
        list(&[&vec![1; zero.len()], &[rows, nr][..]].concat()),
        accumulator = if operand == "f64" { "f64" } else { "f32" },
    )?;
    Ok(format!("%pd{part}"))
}

/// The reduction loop of a register tile, `ku` steps per iteration.
pub(super) fn emit_reduction_tile(
    out: &mut String,
    part: &str,
    handle: &str,
    sizes: &[i64],
) -> std::fmt::Result {
    writeln!(
        out,
        "    %k{part}, %kl{part} = transform.structured.tile_using_for {handle} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})",
        list(sizes)
    )
}

/// A pairs product's register tile (`%k<part>`, one step of the reduction) cut into one
/// `1 x PAIR_LANES` tile per row and vector, its loops unrolled: each vectorises to a
/// contraction of one pair of the left operand with a vector of pairs of the right one, which
/// the x86vector patterns turn into a broadcast and a dot product. `zero` leads the sizes over
/// a batch, whose register tile is one product already.
pub(super) fn emit_pair_lanes(
    out: &mut String,
    part: &str,
    zero: &[i64],
    (mr, nr): (i64, i64),
) -> std::fmt::Result {
    writeln!(
        out,
        "    %u{part}, %ul{part}:2 = transform.structured.tile_using_for %k{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY}, {ANY})
    transform.loop.unroll %ul{part}#1 {{factor = {}}} : {ANY}
    transform.loop.unroll %ul{part}#0 {{factor = {mr}}} : {ANY}",
        list(&[zero, &[1, PAIR_LANES]].concat()),
        nr / PAIR_LANES
    )
}

/// A panels product's register tile (`%k<part>`, one step of the reduction, of more than one
/// row) as the `linalg.matmul` it is: its one panel's unit dimension dropped (the panel read
/// as a `k x nr` slice), so that it vectorises to the same contraction of two-dimensional
/// vectors as any product's register tile. (A one-row tile vectorises with both unit
/// dimensions leading, which `cast_away_vector_leading_one_dim` drops.)
fn emit_panel_matmul(out: &mut String, part: &str) -> std::fmt::Result {
    writeln!(
        out,
        "    %g{part} = transform.structured.generalize %k{part} : ({ANY}) -> {ANY}
    transform.apply_patterns to %kl{part} {{
      transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
    }} : {ANY}
    %gm{part} = transform.structured.match ops{{[\"linalg.generic\"]}} in %kl{part} : ({ANY}) -> {ANY}
    %sm{part} = transform.structured.specialize %gm{part} : ({ANY}) -> {ANY}"
    )
}

/// What [`emit_register_tiles`] made: the handles of the outermost loop and of the product's
/// register tile, and whether the fill was fused into the tile loops.
pub(super) struct RegisterTiles {
    pub(super) outer: String,
    pub(super) tile: String,
    pub(super) fused_fill: bool,
}

/// Register tiles for a product without reduction blocks: tiles the product (or its fused
/// elementwise consumer, pulling the product in) and fuses the fill where it can; the caller
/// packs the right operand and tiles the reduction. `whole`: the part is the whole product
/// (the fill and epilogue are its own).
pub(super) fn emit_register_tiles(
    out: &mut String,
    contraction: usize,
    part: &str,
    handle: &str,
    p: &PlannedProduct,
    (mr, nr): (i64, i64),
    whole: bool,
) -> Result<RegisterTiles, std::fmt::Error> {
    let batched = p.problem.batch.is_some();
    let lead: &[i64] = if batched { &[1] } else { &[] };
    let epilogue = p.epilogue.is_some() && whole;
    let fill = p.fill_init && whole;
    if fill && epilogue {
        writeln!(
            out,
            "    %f{part} = transform.get_producer_of_operand {handle}[2] : ({ANY}) -> {ANY}"
        )?;
    }
    let (target, sizes) = if epilogue {
        writeln!(
            out,
            "    %e{part} = transform.structured.match attributes {{{EPILOGUE_TAG} = {contraction} : i64}} in %fn{contraction} : ({ANY}) -> {ANY}"
        )?;
        (
            format!("%e{part}"),
            p.loop_sizes(&[lead, &[mr, nr]].concat()),
        )
    } else {
        (
            handle.to_string(),
            p.loop_sizes(&[lead, &[mr, nr, 0]].concat()),
        )
    };
    let loops = sizes.iter().filter(|&&s| s != 0).count();
    // Without an epilogue the fill is the loop's destination: only `structured.fuse` reaches
    // it, and only when it would fuse nothing else.
    let fuse_fill = !epilogue && fill && p.only_fill_fusable;
    // Columns panels: the columns' loop outside the rows' (neither has a batch around it).
    let order = p.column_panels().then_some([1, 0, 2]);
    let (op, interchange) = tiling(fuse_fill, order.as_ref().map(|o| &o[..]));
    writeln!(
        out,
        "    %t{part}, %tl{part}:{loops} = transform.structured.{op} {target} tile_sizes {}{interchange} : ({ANY}) -> ({ANY}, {})",
        list(&sizes),
        handles(loops)
    )?;
    let mut containing = format!("%tl{part}#0");
    let mut inner = format!("%t{part}");
    if epilogue {
        writeln!(
            out,
            "    %p{part}, %pl{part} = transform.structured.fuse_into_containing_op {handle} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
        containing = format!("%pl{part}");
        inner = format!("%p{part}");
        if fill {
            writeln!(
                out,
                "    %ff{part}, %fl{part} = transform.structured.fuse_into_containing_op %f{part} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
            )?;
            containing = format!("%fl{part}");
        }
    }
    Ok(RegisterTiles {
        outer: containing,
        tile: inner,
        fused_fill: fuse_fill,
    })
}

/// The work on one register tile after its loops: its right operand packed (when
/// [`PlannedProduct::packs`] says so for its `rows`, from a `depth` x `nr` slice), its
/// reduction loop `ku` steps deep, and a pairs product's `mr` x `nr` lanes cut. Returns the
/// handle of the reduction loop.
pub(super) fn emit_tile_body(
    out: &mut String,
    part: &str,
    tile: &str,
    p: &PlannedProduct,
    (rows, mr): (i64, i64),
    (depth, nr): (i64, i64),
) -> Result<String, std::fmt::Error> {
    let tile = emit_tile_packing(out, part, tile, p, rows, (depth, nr))?;
    emit_tile_reduction(out, part, &tile, p, (mr, nr))
}

/// The right operand of register tile `tile` packed when [`PlannedProduct::packs`] says so
/// for its `rows`; returns the handle of the tile that reads it.
pub(super) fn emit_tile_packing(
    out: &mut String,
    part: &str,
    tile: &str,
    p: &PlannedProduct,
    rows: i64,
    (depth, nr): (i64, i64),
) -> Result<String, std::fmt::Error> {
    let zero: &[i64] = if p.problem.batch.is_some() { &[0] } else { &[] };
    if p.packs(rows, nr) {
        emit_packing(out, part, tile, (p.problem.operand, 2), zero, (depth, nr))
    } else {
        Ok(tile.to_string())
    }
}

/// The reduction loop of register tile `tile` (`mr` x `nr`) and a pairs product's lanes;
/// returns the handle of the reduction loop.
pub(super) fn emit_tile_reduction(
    out: &mut String,
    part: &str,
    tile: &str,
    p: &PlannedProduct,
    (mr, nr): (i64, i64),
) -> Result<String, std::fmt::Error> {
    let zero: &[i64] = if p.problem.batch.is_some() { &[0] } else { &[] };
    let sizes = p.loop_sizes(&[zero, &[0, 0, p.tiles.ku]].concat());
    emit_reduction_tile(out, part, tile, &sizes)?;
    match p.problem.element {
        Element::Bf16Pairs => emit_pair_lanes(out, part, zero, (mr, nr))?,
        Element::F32Panels if mr > 1 => emit_panel_matmul(out, part)?,
        _ => {}
    }
    Ok(format!("%kl{part}"))
}

/// Register tiles of a product over symbolic columns whose columns go outside its rows
/// ([`PlannedProduct::column_panels`]): the columns' tile loop, outermost, is peeled into
/// full tiles and a rest of single columns. Each full column tile's right operand (`k x nr`)
/// is packed into one panel, hoisted out of the rows' loop inside it, so that every row tile
/// reads it from one stream; the rest reads its columns where they lie. Each part is
/// vectorised on its own (the loop both were in is gone).
fn emit_column_panels(
    out: &mut String,
    (id, part): (usize, &str),
    handle: &str,
    p: &PlannedProduct,
    (mr, nr): (i64, i64),
    whole: bool,
) -> std::fmt::Result {
    let tiles = emit_register_tiles(out, id, part, handle, p, (mr, nr), whole)?;
    let columns_loop = format!("%tl{part}#0");
    let peel = format!("{part}c");
    let fused = (tiles.fused_fill, Peel::Columns);
    let [full, rest] = emit_peel(out, id, &peel, &columns_loop, p, fused)?;
    let name = format!("{part}_0");
    let operand = (p.problem.operand, 1);
    let panel = emit_packing(out, &name, &full.tile, operand, &[], (p.problem.k, nr))?;
    let reduction = emit_tile_reduction(out, &name, &panel, p, (mr, nr))?;
    emit_vectorize(out, &name, &full.scope, &[reduction], false)?;
    let name = format!("{part}_1");
    let reduction = emit_tile_reduction(out, &name, &rest.tile, p, (rest.mr, nr))?;
    emit_vectorize(out, &name, &rest.scope, &[reduction], false)
}

/// The register tiles of a part whose rows leave a short last tile: its right operand packed
/// once for all `rows` (from `depth`-deep slices of `nr` columns), then the rows loop
/// `rows_loop` peeled as symbolic rows are (see [`emit_peel`]; the rest's fill tiled with it
/// when the fill was `fused` into the tiles), each part tiled along its reduction. The rest's
/// one-row tiles read the packed panels too. Returns the two parts' reduction loops.
pub(super) fn emit_rest_tiles(
    out: &mut String,
    (id, part): (usize, &str),
    (tile, rows_loop): (&str, &str),
    p: &PlannedProduct,
    (rows, depth): (i64, i64),
    fused: bool,
) -> Result<Vec<String>, std::fmt::Error> {
    let nr = p.tiles.nr;
    emit_tile_packing(out, part, tile, p, rows, (depth, nr))?;
    let mut reductions = Vec::new();
    let peel = format!("{part}r");
    for (i, peeled) in emit_peel(out, id, &peel, rows_loop, p, (fused, Peel::Rows))?
        .into_iter()
        .enumerate()
    {
        let name = format!("{part}_{i}");
        reductions.push(emit_tile_reduction(
            out,
            &name,
            &peeled.tile,
            p,
            (peeled.mr, nr),
        )?);
    }
    Ok(reductions)
}

/// One of the two parts [`emit_peel`] leaves: the loop it is in, its register tile, the rows
/// its packing is decided for and the rows of its register tile.
pub(super) struct Peeled {
    pub(super) scope: String,
    pub(super) tile: String,
    pub(super) rows: i64,
    pub(super) mr: i64,
}

/// The loop over a symbolic dimension [`emit_peel`] peels.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Peel {
    Rows,
    Columns,
}

/// Peels `tile_loop`, the register tiles' loop over the symbolic rows (or columns) of product
/// `id`: the first part runs full tiles of `mr` rows (`nr` columns), static once canonicalized
/// (the peel turns their size into a constant); the rest (fewer than a tile) is tiled a row
/// (column) at a time, its fill with it when the fill was `fused` into the tile loops (the
/// fill of the whole rest, which nothing reads then, is erased). A product whose epilogue
/// holds it in its tile loops has the epilogue's rest tiled a row at a time instead, pulling
/// the product and its fill into each row (the row loop's bound, read off the product's rest,
/// is canonicalized to its fill's, so the rest's untiled product and fill are erased). Both
/// parts vectorise without masks.
pub(super) fn emit_peel(
    out: &mut String,
    id: usize,
    part: &str,
    tile_loop: &str,
    p: &PlannedProduct,
    (fused, peel): (bool, Peel),
) -> Result<[Peeled; 2], std::fmt::Error> {
    let zero: &[i64] = if p.problem.batch.is_some() { &[0] } else { &[] };
    let one = match peel {
        Peel::Rows => [1, 0, 0],
        Peel::Columns => [0, 1, 0],
    };
    writeln!(
        out,
        "    %pm{part} = transform.cast {tile_loop} : {ANY} to !transform.op<\"scf.for\">
    %pk{part}, %pr{part} = transform.loop.peel %pm{part} : (!transform.op<\"scf.for\">) -> ({ANY}, {ANY})
    transform.apply_patterns to %pk{part} {{
      transform.apply_patterns.canonicalization
    }} : {ANY}
    %tk{part} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %pk{part} : ({ANY}) -> {ANY}"
    )?;
    if p.epilogue.is_some() && peel == Peel::Rows {
        writeln!(
            out,
            "    %er{part} = transform.structured.match attributes {{{EPILOGUE_TAG} = {id} : i64}} in %pr{part} : ({ANY}) -> {ANY}
    %eq{part}, %eql{part} = transform.structured.fuse %er{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})
    transform.apply_patterns to %pr{part} {{
      transform.apply_patterns.canonicalization
    }} : {ANY}
    transform.apply_dce to %pr{part} : {ANY}
    %tq{part} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %pr{part} : ({ANY}) -> {ANY}",
            list(&p.loop_sizes(&[zero, &one[..2]].concat())),
        )?;
    } else {
        writeln!(
            out,
            "    %tr{part} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %pr{part} : ({ANY}) -> {ANY}
    %tq{part}, %tql{part} = transform.structured.{} %tr{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})
    transform.apply_dce to %pr{part} : {ANY}",
            if fused { "fuse" } else { "tile_using_for" },
            list(&p.loop_sizes(&[zero, &one[..]].concat())),
        )?;
    }
    let rest_rows = match peel {
        Peel::Rows => (1, 1),
        Peel::Columns => (p.rows(), p.tiles.mr),
    };
    Ok([
        Peeled {
            scope: format!("%pk{part}"),
            tile: format!("%tk{part}"),
            rows: p.rows(),
            mr: p.tiles.mr,
        },
        Peeled {
            scope: format!("%pr{part}"),
            tile: format!("%tq{part}"),
            rows: rest_rows.0,
            mr: rest_rows.1,
        },
    ])
}

/// Vectorises the tiled ops inside `outer` (and only them: fill, contraction and epilogue
/// tiles, after dropping the dead ops fusion left, such as a whole fill whose sizes a fused
/// product read over a symbolic batch), folds tensor slices into the transfers and keeps each accumulator in registers
/// across its reduction loop (`reductions`). Only those loops hoist their accumulator: hoisting
/// the row parts' slices out of a reduction block loop would make bufferization copy them.
/// Canonicalization comes after the hoisting, as it folds single-iteration reduction loops
/// (which then need no hoisting, but would leave their handles without a replacement).
/// `pairs`: the contractions become AVX512-BF16 dot products once their accumulators are
/// hoisted (their unit dimensions stay: the patterns expect them).
pub(super) fn emit_vectorize(
    out: &mut String,
    name: &str,
    outer: &str,
    reductions: &[String],
    pairs: bool,
) -> std::fmt::Result {
    let unit_dims = if pairs {
        ""
    } else {
        "\n      transform.apply_patterns.vector.cast_away_vector_leading_one_dim"
    };
    writeln!(
        out,
        "    transform.apply_dce to {outer} : {ANY}
    %v{name} = transform.structured.match interface{{LinalgOp}} in {outer} : ({ANY}) -> {ANY}
    transform.structured.vectorize %v{name} {{create_named_contraction}} : {ANY}
    transform.apply_patterns to {outer} {{
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers{unit_dims}
    }} : {ANY}
    %s{name} = transform.structured.match ops{{[\"scf.for\"]}} in {outer} : ({ANY}) -> {ANY}
    transform.apply_licm to %s{name} : {ANY}"
    )?;
    for reduction in reductions {
        writeln!(
            out,
            "    transform.loop.hoist_loop_invariant_subsets {reduction} : {ANY}"
        )?;
    }
    writeln!(
        out,
        "    transform.apply_patterns to {outer} {{
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      transform.apply_patterns.canonicalization
    }} : {ANY}
    transform.apply_cse to {outer} : {ANY}"
    )?;
    if pairs {
        writeln!(
            out,
            "    transform.apply_patterns to {outer} {{
      transform.apply_patterns.x86vector.vector_contract_to_packed_type_dot_product
    }} : {ANY}
    transform.apply_cse to {outer} : {ANY}"
        )?;
    }
    Ok(())
}

/// The whole schedule as a module holding `@__transform_main`, for the planned contractions
/// but those `merged` into an identical one's function.
pub(super) fn emit(
    planned: &[PlannedProduct],
    merged: &[i64],
    scalar: &[ScalarProduct],
) -> Result<String> {
    let unformattable = |_| Error::PassPipeline {
        pipeline: "schedule".to_string(),
        message: "cannot format the transform schedule".to_string(),
    };
    let mut body = String::new();
    for (id, p) in planned.iter().enumerate() {
        if merged.contains(&(id as i64)) {
            continue;
        }
        emit_one(&mut body, id, p).map_err(unformattable)?;
    }
    for (id, p) in scalar.iter().enumerate() {
        emit_scalar_product(&mut body, id, p).map_err(unformattable)?;
    }
    Ok(script(&body))
}

/// Cuts a product left to the scalar path (see [`ScalarProduct`]) along a parallel
/// dimension: into one `scf.forall` chunk per thread, or slices of one in an `scf.for`.
fn emit_scalar_product(out: &mut String, id: usize, p: &ScalarProduct) -> std::fmt::Result {
    let mut sizes = vec![0; p.loops];
    sizes[p.cut] = p.threads.unwrap_or(1);
    let (how, tiling) = match p.threads {
        Some(_) => ("one chunk per thread", "tile_using_forall"),
        None => ("slices of one", "tile_using_for"),
    };
    let sizes = match p.threads {
        Some(_) => format!("num_threads {}", list(&sizes)),
        None => format!("tile_sizes {}", list(&sizes)),
    };
    writeln!(
        out,
        "    %s{id} = transform.structured.match attributes {{{SCALAR_PRODUCT_TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY} loc(\"scalar product (symbolic columns or reduction): dimension {} in {how}\")
    %st{id}, %sl{id} = transform.structured.{tiling} %s{id} {sizes} : ({ANY}) -> ({ANY}, {ANY})",
        p.cut
    )
}
