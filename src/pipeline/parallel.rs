//! The `parallel` stage: both cores (or however many threads torch uses) on every large
//! structured op. Rust picks, for each top-level `linalg` op of the graph function whose loop
//! nest is big enough, its outermost parallel loop with at least two iterations, tags the op and
//! appends a transform script that tiles that loop with `tile_using_forall` into one chunk per
//! thread. After bufferisation the `loops` stage turns each `scf.forall` into `scf.parallel`
//! and then into an OpenMP worksharing loop, which the LLVM translation outlines into a
//! function run by the OpenMP runtime's thread team. Inner loops stay sequential, so LLVM
//! still vectorises them. Tile loops of the matrix products the schedule stage built are not
//! top-level ops and are left alone here.

use super::schedule::{
    ANY, append_script, has_entry, map_results, result_dim, script, tag, tensor_shape,
};
use crate::error::Result;
use melior::{
    Context,
    ir::{
        Module, OperationRef, RegionLike, attribute::ArrayAttribute, block::BlockLike,
        operation::OperationLike, operation::OperationResult,
    },
};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Discardable attribute naming an op to split across threads (value: its index).
pub const TAG: &str = "fxmlir.parallel";

/// Loop iterations (the product of all loop ranges) below which an op stays on one thread:
/// starting a parallel region costs a few microseconds, which small ops do not repay.
pub const MIN_WORK: i64 = 1 << 15;

/// One op to split: the position of the loop to split and into how many chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub dim: usize,
    pub chunks: i64,
}

/// An op to split, found by raw pointer.
struct Planned {
    op: usize,
    split: Split,
    /// The index of the op's init operand when a `linalg.fill` produces it: the fill then
    /// moves into the chunk loop, so each thread fills its own slice of the accumulator.
    fill_operand: Option<usize>,
}

fn fill_operand(op: &OperationRef) -> Option<usize> {
    let init = op.operand_count().checked_sub(1)?;
    let owner = OperationResult::try_from(op.operand(init).ok()?)
        .ok()?
        .owner();
    (owner.name().as_string_ref().as_str() == Ok("linalg.fill")).then_some(init)
}

/// Picks the loop to split: the outermost parallel loop with at least two iterations, cut into
/// `threads` chunks (fewer when the loop is shorter). `None` for small or serial loop nests.
pub fn choose(ranges: &[i64], parallel: &[bool], threads: i64) -> Option<Split> {
    if threads < 2 || ranges.iter().product::<i64>() < MIN_WORK {
        return None;
    }
    let dim = (0..ranges.len()).find(|&d| parallel[d] && ranges[d] >= 2)?;
    Some(Split {
        dim,
        chunks: threads.min(ranges[dim]),
    })
}

/// The loop ranges of a `linalg.generic` and which loops are parallel, from its indexing maps
/// and static operand shapes.
fn generic_loops(op: &OperationRef) -> Option<(Vec<i64>, Vec<bool>)> {
    let iterators = op.attribute("iterator_types").ok()?.to_string();
    let parallel: Vec<bool> = iterators
        .split(',')
        .map(|i| i.contains("parallel"))
        .collect();
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let mut ranges = vec![None; parallel.len()];
    for (i, operand) in op.operands().enumerate() {
        let map = maps.element(i).ok()?.to_string();
        let Some((shape, _)) = tensor_shape(operand) else {
            continue;
        };
        for (j, result) in map_results(&map)?.into_iter().enumerate() {
            if let Some(d) = result_dim(result)
                && d < ranges.len()
            {
                ranges[d] = Some(*shape.get(j)?);
            }
        }
    }
    Some((ranges.into_iter().collect::<Option<_>>()?, parallel))
}

/// The loops of a structured op fxmlir emits: generics from their maps; `linalg.fill`,
/// `linalg.matmul` and `linalg.batch_matmul` iterate their result's dimensions first, in
/// order, as parallel loops (their reduction loops come after and only add work).
fn loops(op: &OperationRef, name: &str) -> Option<(Vec<i64>, Vec<bool>)> {
    match name {
        "linalg.generic" => generic_loops(op),
        "linalg.fill" | "linalg.matmul" | "linalg.batch_matmul" => {
            let (shape, _) = tensor_shape(op.result(0).ok()?.into())?;
            let parallel = vec![true; shape.len()];
            Some((shape, parallel))
        }
        _ => None,
    }
}

/// The ops of every function's body (not nested in loops) to split.
fn plan(module: &Module, threads: i64) -> Vec<Planned> {
    let mut planned = Vec::new();
    let mut function = module.body().first_operation();
    while let Some(f) = function {
        let block = f
            .region(0)
            .ok()
            .and_then(|r| r.first_block())
            .filter(|_| f.name().as_string_ref().as_str() == Ok("func.func"));
        let mut next = block.and_then(|b| b.first_operation());
        while let Some(op) = next {
            let name = op.name().as_string_ref().as_str().unwrap_or("").to_string();
            if op.result_count() == 1
                && let Some((ranges, parallel)) = loops(&op, &name)
                && let Some(split) = choose(&ranges, &parallel, threads)
            {
                planned.push(Planned {
                    op: op.to_raw().ptr as usize,
                    split,
                    fill_operand: fill_operand(&op),
                });
            }
            next = op.next_in_block();
        }
        function = f.next_in_block();
    }
    planned
}

/// Tags the ops to split and appends the script that splits them. Returns how many ops it
/// split. A module that already has a `@__transform_main` is left alone.
pub fn attach(context: &Context, module: &mut Module, threads: usize) -> Result<usize> {
    if has_entry(module) {
        return Ok(0);
    }
    let planned = plan(module, threads as i64);
    let mut tags = HashMap::new();
    let mut body = String::new();
    for (id, p) in planned.iter().enumerate() {
        let split = p.split;
        tags.insert(p.op, (TAG, id as i64));
        let mut counts = vec![0; split.dim + 1];
        counts[split.dim] = split.chunks;
        let counts: Vec<String> = counts.iter().map(i64::to_string).collect();
        // Formatting into a String cannot fail.
        let _ = writeln!(
            body,
            "    %p{id} = transform.structured.match attributes {{{TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY}"
        );
        if let Some(init) = p.fill_operand {
            let _ = writeln!(
                body,
                "    %i{id} = transform.get_producer_of_operand %p{id}[{init}] : ({ANY}) -> {ANY}"
            );
        }
        let _ = writeln!(
            body,
            "    %t{id}, %f{id} = transform.structured.tile_using_forall %p{id} num_threads [{}] : ({ANY}) -> ({ANY}, {ANY})",
            counts.join(", ")
        );
        if p.fill_operand.is_some() {
            let _ = writeln!(
                body,
                "    %fi{id}, %fl{id} = transform.structured.fuse_into_containing_op %i{id} into %f{id} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
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
            choose(&[512, 1024], &par, 2),
            Some(Split { dim: 0, chunks: 2 })
        );
        // A unit batch is skipped; a reduction is never split.
        assert_eq!(
            choose(&[1, 64, 1024], &[true, true, true], 4),
            Some(Split { dim: 1, chunks: 4 })
        );
        assert_eq!(
            choose(&[64, 2048], &[false, true], 2),
            Some(Split { dim: 1, chunks: 2 })
        );
        // Fewer iterations than threads: one chunk per iteration.
        assert_eq!(
            choose(&[3, 65536], &par, 8),
            Some(Split { dim: 0, chunks: 3 })
        );
        // Small nests, one thread, all-reduction nests: no split.
        assert_eq!(choose(&[16, 16], &par, 2), None);
        assert_eq!(choose(&[512, 1024], &par, 1), None);
        assert_eq!(choose(&[512, 1024], &[false, false], 2), None);
    }
}
