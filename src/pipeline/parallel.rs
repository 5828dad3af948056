//! The `parallel` stage: both cores (or however many threads torch uses) on every large
//! structured op. Rust picks, for each top-level `linalg` op of the graph function whose loop
//! nest is big enough, its outermost parallel loop that spreads evenly over the threads (see
//! [`choose_split`]), tags the op and appends a transform script that tiles that loop with
//! `tile_using_forall` into one chunk per thread. After bufferisation the `loops` stage turns
//! each `scf.forall` into `scf.parallel` and then into an OpenMP worksharing loop, which the
//! LLVM translation outlines into a function run by the OpenMP runtime's thread team. Inner
//! loops stay sequential, so LLVM still vectorises them. Tile loops of the matrix products the
//! schedule stage built are not top-level ops and are left alone here. An elementwise op of
//! short rows whose operands all use the identity map is also flattened into one loop (in each
//! chunk when it is split), since LLVM vectorises only the innermost loop ([`SHORT_ROWS`]).

use super::ir::maps::{
    IteratorKind, MapResult, backward_dims, body_ops, indexing_maps, is_identity_of,
    iterator_kinds, map_results, plain_body,
};
use super::ir::ops::{op_name, tensor_dims, tensor_shape};
use super::rows;
use super::transform::{ANY, append_script, handles, has_entry, list, script, tag};
use crate::error::Result;
use crate::target::Target;
use crate::tuning::{MIN_PARALLEL_MATH_WORK, MIN_PARALLEL_WORK, SYMBOLIC_PLANNING_SIZE};
use melior::{
    Context,
    ir::{
        Module, OperationRef, RegionLike, TypeLike, ValueLike,
        block::BlockLike,
        operation::OperationLike,
        operation::OperationResult,
        r#type::{RankedTensorType, ShapedTypeLike},
    },
};
use mlir_sys::{mlirFloatTypeGetWidth, mlirTypeIsAFloat};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Discardable attribute naming an op to split across threads (value: its index).
pub const TAG: &str = "fxmlir.parallel";

/// One op to split: the position of the loop to split and into how many chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSplit {
    pub dim: usize,
    pub chunks: i64,
}

/// Side of the square tiles a transposing copy is cut into: a 16x16 block of 32-bit elements is
/// sixteen 512-bit rows, transposed in registers by a fixed network of shuffles.
pub const TRANSPOSE_TILE: i64 = 16;

/// Innermost extent below which an elementwise op's loop nest is flattened into one loop: the
/// loop vectoriser vectorises the innermost loop only, so short rows (a convolution weight's 3
/// x 3 taps, a 7 x 7 feature map) ran mostly in its scalar remainder. Measured on `relu(x * 2 +
/// 1)`: 2.36 M elements took 3.1 ms as 512 x 512 x 3 x 3 and 0.49 ms flat; 25088 took 32 µs as
/// 1 x 512 x 7 x 7 and 18 µs flat.
pub const SHORT_ROWS: i64 = 64;

/// An op to split or to tile as a transposing copy (or both), or to flatten, found by raw
/// pointer.
struct SplitOp {
    op: usize,
    split: Option<ThreadSplit>,
    /// An elementwise op of short rows whose operands and result are all read and written
    /// with the identity map: its loops become one (`flatten_elementwise`).
    flatten: bool,
    /// For a transposing copy: the sizes of its square register tiles over its loops.
    transpose: Option<Vec<i64>>,
    /// The index of the op's init operand and the `linalg.fill` that produces it (by raw
    /// pointer): the fill then moves into the chunk loop, so each thread fills its own slice of
    /// the accumulator.
    fill_operand: Option<(usize, usize)>,
    /// For the consumer of a row group: its members (by raw pointer, in block order) and its
    /// row tiles, run in the row loop (see [`rows`]).
    rows: Option<(Vec<usize>, Vec<i64>)>,
}

/// The element size of `op`'s first result in bytes, for a float tensor (else 4).
fn element_bytes(op: &OperationRef) -> i64 {
    let Some(tensor) = op
        .result(0)
        .ok()
        .and_then(|r| RankedTensorType::try_from(r.r#type()).ok())
    else {
        return 4;
    };
    let element = tensor.element().to_raw();
    // SAFETY: a live type, asked for a float's width only when it is a float.
    let bits = unsafe {
        if mlirTypeIsAFloat(element) {
            mlirFloatTypeGetWidth(element)
        } else {
            32
        }
    };
    (i64::from(bits) / 8).max(1)
}

/// The split and row tiles of a row group's consumer, when a thread's share of its result
/// exceeds `l2` bytes (a smaller one stays in L2 between the passes, which then cost less
/// than the row loop) and its split (if any) falls on a loop of rows: `None` where only a
/// split of a reduced loop spreads its work (a single long row), which is left to the ops one
/// by one.
fn row_plan(
    op: &OperationRef,
    rows: usize,
    threads: i64,
    l2: i64,
) -> Option<(Option<ThreadSplit>, Vec<i64>)> {
    let (ranges, parallel) = generic_loops(op, true)?;
    let leading: Vec<bool> = parallel
        .iter()
        .enumerate()
        .map(|(d, &p)| p && d < rows)
        .collect();
    let work = min_work(op);
    let split = choose_split(&ranges, &leading, work, threads);
    if split.is_none() && choose_split(&ranges, &parallel, work, threads).is_some() {
        return None;
    }
    let chunks = split.map_or(1, |s| s.chunks);
    if ranges.iter().product::<i64>() * element_bytes(op) / chunks <= l2 {
        return None;
    }
    // The result's sizes, loop by loop (the consumer writes it through the identity map). A
    // symbolic row length is not grouped: fusing the members into the row loop then tiled
    // the exponentials once per reader, each sized through a `tensor.dim` of its own, which
    // nothing merges, and the fusion after them failed.
    let sizes = tensor_dims(op.result(0).ok()?.into())?;
    let row_elements = sizes[rows..].iter().copied().product::<Option<i64>>()?;
    let extent = sizes[rows - 1].and_then(|whole| match split {
        Some(s) if s.dim == rows - 1 => (whole % s.chunks == 0).then(|| whole / s.chunks),
        _ => Some(whole),
    });
    let tiles = rows::row_tiles(ranges.len(), rows, extent, row_elements, element_bytes(op));
    Some((split, tiles))
}

fn fill_operand(op: &OperationRef) -> Option<(usize, usize)> {
    let init = op.operand_count().checked_sub(1)?;
    let owner = OperationResult::try_from(op.operand(init).ok()?)
        .ok()?
        .owner();
    (owner.name().as_string_ref().as_str() == Ok("linalg.fill"))
        .then_some((init, owner.to_raw().ptr as usize))
}

/// How evenly a loop of `range` iterations spreads over `threads`: the work of an even share
/// over that of the busiest thread (1 when `threads` divides `range`; 3 iterations on two
/// threads give 0.75: one thread does two thirds of the work).
fn balance(range: i64, threads: i64) -> f64 {
    let busiest = (range + threads - 1) / threads;
    range as f64 / threads as f64 / busiest as f64
}

/// The balance from which a loop counts as evenly split (17 iterations on two threads: 0.94).
const EVEN: f64 = 0.9;

/// Picks the loop to split of a nest of at least `min_work` iterations: the outermost parallel
/// loop that spreads evenly over the threads (see `balance`), else the parallel loop that
/// spreads best (the outermost of equals), cut into `threads` chunks (fewer when the loop is
/// shorter). A convolution's patch copy over three input channels, split on its channels, kept
/// one thread on two thirds of the copy while the other waited. `None` for small or serial
/// loop nests.
pub fn choose_split(
    ranges: &[i64],
    parallel: &[bool],
    min_work: i64,
    threads: i64,
) -> Option<ThreadSplit> {
    if threads < 2 || ranges.iter().product::<i64>() < min_work {
        return None;
    }
    let candidates = (0..ranges.len()).filter(|&d| parallel[d] && ranges[d] >= 2);
    let dim = candidates
        .clone()
        .find(|&d| balance(ranges[d], threads) >= EVEN)
        .or_else(|| {
            candidates.rev().max_by(|&a, &b| {
                balance(ranges[a], threads).total_cmp(&balance(ranges[b], threads))
            })
        })?;
    Some(ThreadSplit {
        dim,
        chunks: threads.min(ranges[dim]),
    })
}

/// The loop ranges of a `linalg.generic` and which loops are parallel, from its indexing maps
/// and operand shapes; a loop over a symbolic size is [`SYMBOLIC_PLANNING_SIZE`] long with
/// `symbolic`, else the op has no ranges.
fn generic_loops(op: &OperationRef, symbolic: bool) -> Option<(Vec<i64>, Vec<bool>)> {
    let parallel: Vec<bool> = iterator_kinds(op)?
        .into_iter()
        .map(|kind| kind == IteratorKind::Parallel)
        .collect();
    let maps = indexing_maps(op)?;
    let mut ranges = vec![None; parallel.len()];
    // Loops an operand is read backwards along (a transposed convolution's flipped kernel,
    // `-d3 + 2`).
    let mut backwards = Vec::new();
    for (i, operand) in op.operands().enumerate() {
        let map = *maps.get(i)?;
        backwards.extend(backward_dims(map));
        let Some(shape) = tensor_dims(operand) else {
            continue;
        };
        for (j, result) in map_results(map).into_iter().enumerate() {
            if let MapResult::Dim(d) = result
                && d < ranges.len()
                && !matches!(ranges[d], Some(Some(_)))
            {
                ranges[d] = Some(*shape.get(j)?);
            }
        }
    }
    let ranges: Vec<i64> = ranges
        .into_iter()
        .map(|r| match r? {
            Some(size) => Some(size),
            None => symbolic.then_some(SYMBOLIC_PLANNING_SIZE),
        })
        .collect::<Option<_>>()?;
    // Tiling computes every operand's slices as if each read went forwards: along such a loop
    // (of more than one iteration), a tile of any loop reads a slice of the wrong size. Such
    // an op is not split.
    if backwards
        .iter()
        .any(|&d| ranges.get(d).is_none_or(|&r| r > 1))
    {
        return None;
    }
    Some((ranges, parallel))
}

/// The iterations from which `op` is split: [`MIN_PARALLEL_MATH_WORK`] for a `linalg.generic` whose
/// body calls a `math` function, else [`MIN_PARALLEL_WORK`].
fn min_work(op: &OperationRef) -> i64 {
    let calls_math =
        body_ops(op).is_some_and(|ops| ops.iter().any(|inner| op_name(inner).starts_with("math.")));
    if calls_math {
        MIN_PARALLEL_MATH_WORK
    } else {
        MIN_PARALLEL_WORK
    }
}

/// The loops of a structured op fxmlir emits: generics from their maps; `linalg.fill`,
/// `linalg.matmul` and `linalg.batch_matmul` iterate their result's dimensions first, in
/// order, as parallel loops (their reduction loops come after and only add work). None for
/// an op with an empty operand.
fn loops(op: &OperationRef, name: &str) -> Option<(Vec<i64>, Vec<bool>)> {
    // An op with an empty operand (a product over an empty reduction) has no work to split,
    // and tiling a loop over it fails in MLIR's tile size computation.
    if op
        .operands()
        .any(|v| tensor_dims(v).is_some_and(|dims| dims.contains(&Some(0))))
    {
        return None;
    }
    match name {
        "linalg.generic" => generic_loops(op, true),
        "linalg.fill" | "linalg.matmul" | "linalg.batch_matmul" => {
            let shape: Vec<i64> = tensor_dims(op.result(0).ok()?.into())?
                .into_iter()
                .map(|d| d.unwrap_or(SYMBOLIC_PLANNING_SIZE))
                .collect();
            let parallel = vec![true; shape.len()];
            Some((shape, parallel))
        }
        _ => None,
    }
}

/// The tile sizes for a transposing map: an all-parallel `linalg.generic` on 32-bit elements
/// (a copy, or arithmetic fused into it) that writes its one result through the identity map
/// and reads its inputs through permutations of its loops, at least one of which moves the
/// innermost loop (so a row of the result is a column of that input). The loop innermost in the
/// result and the one innermost in that input (both among the dimensions longer than one) get
/// 16x16 tiles, the others unit tiles. `None`
/// for anything else, or when a tile would not be whole (after the split into `split`'s chunks).
fn transpose_tiles(op: &OperationRef, split: Option<ThreadSplit>) -> Option<Vec<i64>> {
    if op.operand_count() < 2 || op.result_count() != 1 {
        return None;
    }
    if iterator_kinds(op)?.contains(&IteratorKind::Reduction) {
        return None;
    }
    if !plain_body(op) {
        return None;
    }
    let values: Vec<_> = op.operands().collect();
    let (shape, _) = tensor_shape(op.result(0).ok()?.into())?;
    let rank = shape.len();
    let word = |v| tensor_shape(v).is_some_and(|(_, e)| matches!(e.as_str(), "f32" | "i32"));
    if rank < 2 || !values.iter().all(|&v| word(v)) {
        return None;
    }
    let maps = indexing_maps(op)?;
    let mut dims = Vec::new();
    for i in 0..values.len() {
        let read: Vec<usize> = map_results(*maps.get(i)?)
            .into_iter()
            .map(|result| match result {
                MapResult::Dim(d) => Some(d),
                MapResult::Zero | MapResult::Other => None,
            })
            .collect::<Option<_>>()?;
        let mut sorted = read.clone();
        sorted.sort_unstable();
        if sorted != (0..rank).collect::<Vec<_>>() {
            return None;
        }
        dims.push(read);
    }
    let (written, inputs) = dims.split_last()?;
    if *written != (0..rank).collect::<Vec<_>>() {
        return None;
    }
    // Innermost among the dimensions longer than one: a convolution weight's transposed
    // copy (`1 x co x ci x 1 x 1`) moves its rows, not its unit kernel dimensions.
    let long = |d: &usize| shape[*d] > 1;
    let inner_written = (0..rank).rev().find(long)?;
    let inner_read = inputs
        .iter()
        .filter_map(|read| read.iter().rev().copied().find(long))
        .find(|&d| d != inner_written)?;
    let whole = |d: usize| {
        let extent = match split {
            Some(s) if s.dim == d => (shape[d] % s.chunks == 0).then(|| shape[d] / s.chunks),
            _ => Some(shape[d]),
        };
        extent.is_some_and(|e| e % TRANSPOSE_TILE == 0)
    };
    if !whole(inner_read) || !whole(inner_written) {
        return None;
    }
    Some(
        (0..rank)
            .map(|d| {
                if d == inner_read || d == inner_written {
                    TRANSPOSE_TILE
                } else {
                    1
                }
            })
            .collect(),
    )
}

/// Whether `op` is an all-parallel generic of plain arithmetic whose operands and result all
/// use the identity map, over a static shape of rank 2 or more whose innermost extent is below
/// [`SHORT_ROWS`] (with more than one row).
fn flattens(op: &OperationRef) -> bool {
    let Some((ranges, parallel)) = generic_loops(op, false) else {
        return false;
    };
    let rank = ranges.len();
    let Some(&inner) = ranges.last() else {
        return false;
    };
    let all_identity = indexing_maps(op).is_some_and(|maps| {
        maps.len() == op.operand_count() && maps.iter().all(|m| is_identity_of(*m, rank))
    });
    rank >= 2
        && parallel.iter().all(|&p| p)
        && inner < SHORT_ROWS
        && ranges.iter().product::<i64>() > inner
        && all_identity
        && plain_body(op)
}

/// The ops of every function's body (not nested in loops) to split, tile or flatten, and the
/// row groups among them whose tensors outgrow `l2` (see [`row_plan`]).
fn plan_splits(module: &Module, threads: i64, l2: i64) -> Vec<SplitOp> {
    let mut planned = Vec::new();
    let mut function = module.body().first_operation();
    while let Some(f) = function {
        let block = f
            .region(0)
            .ok()
            .and_then(|r| r.first_block())
            .filter(|_| f.name().as_string_ref().as_str() == Ok("func.func"));
        let mut ops = Vec::new();
        let mut next = block.and_then(|b| b.first_operation());
        while let Some(op) = next {
            ops.push(op);
            next = op.next_in_block();
        }
        let mut members = HashSet::new();
        let mut consumers = HashMap::new();
        for mut group in rows::find(&ops) {
            let consumer = ops
                .iter()
                .find(|o| o.to_raw().ptr as usize == group.consumer);
            if let Some(plan) = consumer.and_then(|c| row_plan(c, group.rows, threads, l2)) {
                rows::privatise_fills(&mut group, &ops);
                members.extend(group.members.iter().copied());
                consumers.insert(group.consumer, (group.members, plan));
            }
        }
        for op in ops {
            let key = op.to_raw().ptr as usize;
            if members.contains(&key) {
                continue;
            }
            if let Some((group, (split, tiles))) = consumers.remove(&key) {
                planned.push(SplitOp {
                    op: key,
                    split,
                    flatten: false,
                    transpose: None,
                    fill_operand: fill_operand(&op),
                    rows: Some((group, tiles)),
                });
                continue;
            }
            let name = op.name().as_string_ref().as_str().unwrap_or("").to_string();
            if op.result_count() == 1
                && let Some((ranges, parallel)) = loops(&op, &name)
            {
                let split = choose_split(&ranges, &parallel, min_work(&op), threads);
                let generic = name == "linalg.generic";
                let transpose = generic.then(|| transpose_tiles(&op, split)).flatten();
                let flatten = generic && flattens(&op);
                if split.is_some() || transpose.is_some() || flatten {
                    planned.push(SplitOp {
                        op: key,
                        split,
                        flatten,
                        transpose,
                        fill_operand: fill_operand(&op),
                        rows: None,
                    });
                }
            }
        }
        function = f.next_in_block();
    }
    // A fill that moves into its consumer's chunk loop is not split on its own: split first,
    // it would be a loop the consumer's script cannot fuse (a depthwise convolution's
    // accumulator, large enough to split, made the whole stage fail).
    let fused: HashSet<usize> = planned
        .iter()
        .filter(|p| p.split.is_some())
        .filter_map(|p| p.fill_operand.map(|(_, fill)| fill))
        .collect();
    planned.retain(|p| !fused.contains(&p.op));
    planned
}

/// Appends to `body` the fusion of a row group's members (`handles`, in block order) into
/// `container`, the last member first (each member is then used inside the loop), with common
/// subexpressions merged after each: a value two members read (a softmax's maximum) is tiled
/// for each use, and merged, its own producers are fused once. `handles` become those of the
/// fused members; `prefix` names the new handles.
fn fuse_members(body: &mut String, prefix: &str, handles: &mut [String], mut container: String) {
    for (j, member) in handles.iter_mut().enumerate().rev() {
        let _ = writeln!(
            body,
            "    %{prefix}_{j}, %{prefix}c{j} = transform.structured.fuse_into_containing_op {member} into {container} : ({ANY}, {ANY}) -> ({ANY}, {ANY})\n    transform.apply_cse to %{prefix}c{j} : {ANY}"
        );
        container = format!("%{prefix}c{j}");
        *member = format!("%{prefix}_{j}");
    }
}

/// Tags the ops to split and appends the script that splits them. Returns how many ops it
/// split across `target`'s threads. A module that already has a `@__transform_main` is left
/// alone.
pub fn attach(context: &Context, module: &mut Module, target: &Target) -> Result<usize> {
    if has_entry(module) {
        return Ok(0);
    }
    let planned = plan_splits(module, target.threads as i64, target.l2_bytes);
    let mut tags = HashMap::new();
    let mut body = String::new();
    let mut members_tagged = 0;
    for (id, p) in planned.iter().enumerate() {
        tags.insert(p.op, (TAG, id as i64));
        // Formatting into a String cannot fail.
        let _ = writeln!(
            body,
            "    %p{id} = transform.structured.match attributes {{{TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY}"
        );
        let mut op = format!("%p{id}");
        let mut member_handles = Vec::new();
        if let Some((group, _)) = &p.rows {
            for (j, &member) in group.iter().enumerate() {
                tags.insert(member, (rows::MEMBER_TAG, members_tagged));
                let _ = writeln!(
                    body,
                    "    %m{id}_{j} = transform.structured.match attributes {{{} = {members_tagged} : i64}} in %root : ({ANY}) -> {ANY}",
                    rows::MEMBER_TAG
                );
                member_handles.push(format!("%m{id}_{j}"));
                members_tagged += 1;
            }
        }
        if let Some(split) = p.split {
            if let Some((init, _)) = p.fill_operand {
                let _ = writeln!(
                    body,
                    "    %i{id} = transform.get_producer_of_operand %p{id}[{init}] : ({ANY}) -> {ANY}"
                );
            }
            let mut counts = vec![0; split.dim + 1];
            counts[split.dim] = split.chunks;
            let _ = writeln!(
                body,
                "    %t{id}, %f{id} = transform.structured.tile_using_forall %p{id} num_threads {} : ({ANY}) -> ({ANY}, {ANY})",
                list(&counts)
            );
            let mut container = format!("%f{id}");
            if p.fill_operand.is_some() {
                let _ = writeln!(
                    body,
                    "    %fi{id}, %fl{id} = transform.structured.fuse_into_containing_op %i{id} into %f{id} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
                );
                container = format!("%fl{id}");
            }
            op = format!("%t{id}");
            fuse_members(&mut body, &format!("s{id}"), &mut member_handles, container);
        }
        if let Some((_, tiles)) = &p.rows
            && let Some(innermost) = tiles.iter().filter(|&&t| t != 0).count().checked_sub(1)
        {
            let loops = innermost + 1;
            let _ = writeln!(
                body,
                "    %rt{id}, %rr{id}:{loops} = transform.structured.tile_using_for {op} tile_sizes {} : ({ANY}) -> ({ANY}, {})",
                list(tiles),
                handles(loops)
            );
            let innermost = format!("%rr{id}#{innermost}");
            fuse_members(&mut body, &format!("r{id}"), &mut member_handles, innermost);
        }
        if p.flatten {
            let _ = writeln!(
                body,
                "    %l{id} = transform.structured.flatten_elementwise {op} : ({ANY}) -> {ANY}"
            );
        }
        if let Some(tiles) = &p.transpose {
            // Square tiles, each read as sixteen rows, transposed by shuffles and written as
            // sixteen rows: the read's permutation becomes a `vector.transpose`, lowered
            // here (inside the tile loops only) so nothing later falls back to element moves.
            let loops = tiles.iter().filter(|&&t| t != 0).count();
            let _ = writeln!(
                body,
                "    %r{id}, %rl{id}:{loops} = transform.structured.tile_using_for {op} tile_sizes {} : ({ANY}) -> ({ANY}, {})",
                list(tiles),
                handles(loops)
            );
            let _ = writeln!(
                body,
                "    transform.structured.vectorize %r{id} : {ANY}\n    transform.apply_patterns to %rl{id}#0 {{\n      transform.apply_patterns.vector.cast_away_vector_leading_one_dim\n      transform.apply_patterns.vector.transfer_permutation_patterns\n      transform.apply_patterns.vector.lower_transpose lowering_strategy = \"shuffle_16x16\"\n    }} : {ANY}"
            );
        }
    }
    tag(module, &tags);
    append_script(context, module, &script(&body), "parallel")?;
    Ok(planned.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_outermost_parallel_loop_of_large_nests() {
        let par = [true, true];
        assert_eq!(
            choose_split(&[512, 1024], &par, MIN_PARALLEL_WORK, 2),
            Some(ThreadSplit { dim: 0, chunks: 2 })
        );
        // A unit batch is skipped; a reduction is never split.
        assert_eq!(
            choose_split(&[1, 64, 1024], &[true, true, true], MIN_PARALLEL_WORK, 4),
            Some(ThreadSplit { dim: 1, chunks: 4 })
        );
        assert_eq!(
            choose_split(&[64, 2048], &[false, true], MIN_PARALLEL_WORK, 2),
            Some(ThreadSplit { dim: 1, chunks: 2 })
        );
        // A loop that would leave threads idle or one thread with most of the work gives way
        // to an inner one that spreads evenly.
        assert_eq!(
            choose_split(&[3, 65536], &par, MIN_PARALLEL_WORK, 8),
            Some(ThreadSplit { dim: 1, chunks: 8 })
        );
        assert_eq!(
            choose_split(&[3, 3, 8, 1024], &[true; 4], MIN_PARALLEL_WORK, 2),
            Some(ThreadSplit { dim: 2, chunks: 2 })
        );
        assert_eq!(
            choose_split(&[17, 4096], &par, MIN_PARALLEL_WORK, 2),
            Some(ThreadSplit { dim: 0, chunks: 2 })
        );
        // None spreads evenly: the one that spreads best, the outermost of equals; fewer
        // iterations than threads give one chunk per iteration.
        assert_eq!(
            choose_split(
                &[3, 5, 7, 3000],
                &[true, true, true, false],
                MIN_PARALLEL_WORK,
                4
            ),
            Some(ThreadSplit { dim: 2, chunks: 4 })
        );
        assert_eq!(
            choose_split(&[3, 3, 65536], &[true, true, false], MIN_PARALLEL_WORK, 8),
            Some(ThreadSplit { dim: 0, chunks: 3 })
        );
        // 32768 iterations of plain arithmetic stay on one thread; calling a math function,
        // they are split.
        assert_eq!(choose_split(&[64, 512], &par, MIN_PARALLEL_WORK, 2), None);
        assert_eq!(
            choose_split(&[64, 512], &par, MIN_PARALLEL_MATH_WORK, 2),
            Some(ThreadSplit { dim: 0, chunks: 2 })
        );
        // Small nests, one thread, all-reduction nests: no split.
        assert_eq!(choose_split(&[16, 16], &par, MIN_PARALLEL_WORK, 2), None);
        assert_eq!(choose_split(&[512, 1024], &par, MIN_PARALLEL_WORK, 1), None);
        assert_eq!(
            choose_split(&[512, 1024], &[false, false], MIN_PARALLEL_WORK, 2),
            None
        );
    }
}
