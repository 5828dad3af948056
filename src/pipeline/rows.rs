//! Row groups: the passes of a softmax, a layer norm or an RMS norm, run row by row.
//!
//! Such an op lowers to reductions over the trailing dimensions of one tensor (a maximum and a
//! sum of exponentials; a sum and a sum of squares), small elementwise ops on their per-row
//! results, sometimes an elementwise op on whole rows that only they read (a softmax's
//! exponentials), and one all-parallel consumer that reads the rows again beside the per-row
//! results. Split one by one, each of them was its own loop nest over the whole tensor: a
//! softmax over 8 x 2048 x 2048 scores read its 128 MiB three times from memory.
//!
//! A row group is that consumer with the ops computing its inputs (its *members*). Where a
//! thread's share of the tensor outgrows L2, the `parallel` stage splits the consumer across
//! threads, tiles it into blocks of rows and fuses the members into the row loop, so each
//! block is read from memory once and reread from L1 (see `parallel::attach`).

use super::ir::maps::{
    IteratorKind, MapResult, indexing_maps, is_identity_of, iterator_kinds, map_results,
};
use super::ir::ops::{for_each_result_use, op_name, result_owner};
use super::schedule::{CONTRACTION_TAG, EPILOGUE_TAG};
use crate::tuning::{ROW_BLOCK_BYTES, largest_divisor_at_most};
use melior::ir::{OperationRef, operation::OperationLike};
use mlir_sys::{
    mlirBlockInsertOwnedOperationAfter, mlirOperationClone, mlirOperationGetBlock,
    mlirOperationGetResult, mlirOperationSetOperand,
};
use std::collections::{HashMap, HashSet};

/// Discardable attribute naming a member of a row group (value: its index in the script).
pub const MEMBER_TAG: &str = "fxmlir.row_member";

/// A consumer and the ops computing its per-row inputs, all found by raw pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroup {
    pub consumer: usize,
    /// The members in block order (each before its users).
    pub members: Vec<usize>,
    /// How many leading loops of the consumer index its rows.
    pub rows: usize,
}

/// `k` when `map` reads the leading `k` loops in order, then only constant zeros (a per-row
/// value, kept as `[B, L]` or `[B, L, 1]`).
fn row_prefix(map: melior::ir::AffineMap) -> Option<usize> {
    let results = map_results(map);
    let k = results
        .iter()
        .enumerate()
        .take_while(|(i, r)| matches!(r, MapResult::Dim(d) if d == i))
        .count();
    results[k..]
        .iter()
        .all(|r| matches!(r, MapResult::Zero))
        .then_some(k)
}

/// Whether the schedule took `op` into a product (as the product or its epilogue).
fn tagged(op: &OperationRef) -> bool {
    [CONTRACTION_TAG, EPILOGUE_TAG]
        .iter()
        .any(|tag| op.has_attribute(tag))
}

/// The consumer's row count: the length of the row prefix its per-row inputs share (fewer
/// than its loops), when it is an all-parallel generic with one result, written through the
/// identity map.
fn consumer_rows(op: &OperationRef) -> Option<usize> {
    if op_name(op) != "linalg.generic" || op.result_count() != 1 || tagged(op) {
        return None;
    }
    let kinds = iterator_kinds(op)?;
    if kinds.iter().any(|k| *k != IteratorKind::Parallel) {
        return None;
    }
    let maps = indexing_maps(op)?;
    if !maps.last().is_some_and(|m| is_identity_of(*m, kinds.len())) {
        return None;
    }
    let inputs = op.operand_count().saturating_sub(1);
    let mut rows = None;
    for (i, map) in maps.iter().take(inputs).enumerate() {
        let Some(k) = row_prefix(*map) else { continue };
        let produced = op
            .operand(i)
            .ok()
            .and_then(result_owner)
            .is_some_and(|owner| is_member_kind(&owner));
        if k == 0 || k >= kinds.len() || !produced {
            continue;
        }
        if rows.is_some_and(|r| r != k) {
            return None;
        }
        rows = Some(k);
    }
    rows
}

/// An op that may compute a per-row value: a fill or an untagged generic.
fn is_member_kind(op: &OperationRef) -> bool {
    let name = op_name(op);
    name == "linalg.fill" || (name == "linalg.generic" && !tagged(op))
}

/// Whether every use of every result of `op` is by an op in `inside`.
fn used_within(op: &OperationRef, inside: &HashSet<usize>) -> bool {
    let mut within = true;
    // SAFETY: `op` is a live op of the module being planned.
    unsafe {
        for_each_result_use(op.to_raw(), |_, user, _| {
            within &= inside.contains(&(user.ptr as usize));
        });
    }
    within
}

/// Whether `op` is an all-parallel generic whose maps read their loops in order (no
/// transposition): an elementwise op on whole rows that the row loop can compute a block of
/// rows at a time.
fn elementwise_in_order(op: &OperationRef) -> bool {
    let parallel =
        iterator_kinds(op).is_some_and(|kinds| kinds.iter().all(|k| *k == IteratorKind::Parallel));
    parallel
        && op.result_count() == 1
        && indexing_maps(op).is_some_and(|maps| {
            maps.iter().all(|map| {
                let mut last = None;
                map_results(*map).into_iter().all(|r| match r {
                    MapResult::Zero => true,
                    MapResult::Dim(d) => {
                        let ordered = last.is_none_or(|l| d > l);
                        last = Some(d);
                        ordered
                    }
                    MapResult::Other => false,
                })
            })
        })
}

/// The row group `consumer` closes. Its members are
/// - the fills and generics computing the per-row values it reads, found through the per-row
///   values they read in turn; each must be used only within the group (a layer norm's mean
///   kept for the backward pass is not), else there is no group;
/// - elementwise ops on whole rows that only the group reads (a softmax's exponentials, read
///   by its sum and by the consumer): computed a block at a time, they never reach memory.
///
/// Anything else they read (the rows themselves, weights) stays outside. None without a
/// member that reduces.
fn group_of(
    consumer: &OperationRef,
    claimed: &HashSet<usize>,
    order: &HashMap<usize, usize>,
) -> Option<RowGroup> {
    let rows = consumer_rows(consumer)?;
    let key = |op: &OperationRef| op.to_raw().ptr as usize;
    let mut members: Vec<OperationRef> = Vec::new();
    let mut per_row = Vec::new();
    let mut inside: HashSet<usize> = HashSet::from([key(consumer)]);
    let mut work = vec![*consumer];
    loop {
        // Per-row values, from every op taken in since the last round.
        while let Some(op) = work.pop() {
            // A fill's operands are a scalar and an empty tensor.
            if op_name(&op) == "linalg.fill" {
                continue;
            }
            let maps = indexing_maps(&op)?;
            for (i, value) in op.operands().enumerate() {
                if maps.get(i).and_then(|m| row_prefix(*m)) != Some(rows) {
                    continue;
                }
                // What no member computes (an empty tensor, a function argument, a reshape)
                // is read as it is.
                let Some(owner) = result_owner(value) else {
                    continue;
                };
                if owner.block() != consumer.block()
                    || !is_member_kind(&owner)
                    || claimed.contains(&key(&owner))
                {
                    continue;
                }
                if inside.insert(key(&owner)) {
                    members.push(owner);
                    // CSE merges equal fills, so one fill may start every layer's reductions:
                    // the group takes a copy of its own (`privatise_fills`).
                    if op_name(&owner) != "linalg.fill" {
                        per_row.push(owner);
                    }
                    work.push(owner);
                }
            }
        }
        // Whole rows only the group reads.
        let readers: Vec<OperationRef> = members.iter().chain([consumer]).copied().collect();
        for op in readers {
            if op_name(&op) == "linalg.fill" {
                continue;
            }
            let loops = iterator_kinds(&op)?.len();
            let maps = indexing_maps(&op)?;
            for (i, value) in op.operands().enumerate() {
                let whole = maps.get(i).is_some_and(|m| is_identity_of(*m, loops));
                let Some(owner) = result_owner(value).filter(|_| whole) else {
                    continue;
                };
                if owner.block() == consumer.block()
                    && is_member_kind(&owner)
                    && !claimed.contains(&key(&owner))
                    && !inside.contains(&key(&owner))
                    && elementwise_in_order(&owner)
                    && used_within(&owner, &inside)
                {
                    inside.insert(key(&owner));
                    members.push(owner);
                    work.push(owner);
                }
            }
        }
        if work.is_empty() {
            break;
        }
    }
    let reduces = members
        .iter()
        .any(|op| iterator_kinds(op).is_some_and(|kinds| kinds.contains(&IteratorKind::Reduction)));
    if !reduces || !per_row.iter().all(|op| used_within(op, &inside)) {
        return None;
    }
    let mut members: Vec<usize> = members.iter().map(key).collect();
    members.sort_by_key(|m| order.get(m).copied());
    Some(RowGroup {
        consumer: key(consumer),
        members,
        rows,
    })
}

/// The row groups among `ops` (one block's ops, in order). Later consumers are grouped first,
/// and an op taken as a member is not a consumer of its own.
pub fn find(ops: &[OperationRef]) -> Vec<RowGroup> {
    let order: HashMap<usize, usize> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| (op.to_raw().ptr as usize, i))
        .collect();
    let mut claimed = HashSet::new();
    let mut groups = Vec::new();
    for op in ops.iter().rev() {
        if claimed.contains(&(op.to_raw().ptr as usize)) {
            continue;
        }
        if let Some(group) = group_of(op, &claimed, &order) {
            claimed.extend(
                ops.iter()
                    .filter(|o| group.members.contains(&(o.to_raw().ptr as usize)))
                    .filter(|o| op_name(o) != "linalg.fill")
                    .map(|o| o.to_raw().ptr as usize),
            );
            groups.push(group);
        }
    }
    groups.reverse();
    groups
}

/// Gives each fill of `group` that ops outside it also use a copy of its own, right after
/// it, and points the group's uses at the copy: the copy is tiled into the row loop, and the
/// original stays whole for its other users.
pub fn privatise_fills(group: &mut RowGroup, ops: &[OperationRef]) {
    let inside: HashSet<usize> = group
        .members
        .iter()
        .copied()
        .chain([group.consumer])
        .collect();
    for member in &mut group.members {
        let Some(fill) = ops.iter().find(|o| o.to_raw().ptr as usize == *member) else {
            continue;
        };
        if op_name(fill) != "linalg.fill" || used_within(fill, &inside) {
            continue;
        }
        let mut uses = Vec::new();
        // SAFETY: `fill` is a live op in a block; its copy is inserted into that block, owned
        // by it, and each use re-pointed is an operand of a live op of the group, replaced by a
        // value of the same type.
        unsafe {
            for_each_result_use(fill.to_raw(), |_, user, index| {
                if inside.contains(&(user.ptr as usize)) {
                    uses.push((user, index));
                }
            });
            let copy = mlirOperationClone(fill.to_raw());
            mlirBlockInsertOwnedOperationAfter(
                mlirOperationGetBlock(fill.to_raw()),
                fill.to_raw(),
                copy,
            );
            let value = mlirOperationGetResult(copy, 0);
            for (user, index) in uses {
                mlirOperationSetOperand(user, index, value);
            }
            *member = copy.ptr as usize;
        }
    }
}

/// The consumer's row tiles: unit tiles over the leading `rows - 1` loops, then as many rows as
/// fit [`ROW_BLOCK_BYTES`] (a divisor of `extent`, the row loop's length in a thread's chunk,
/// at least one; one for a symbolic `extent`), none over the rest. `row_elements` and
/// `element_bytes` give a row's size.
pub fn row_tiles(
    loops: usize,
    rows: usize,
    extent: Option<i64>,
    row_elements: i64,
    element_bytes: i64,
) -> Vec<i64> {
    let block = match extent {
        Some(extent) if extent > 0 && row_elements > 0 => {
            largest_divisor_at_most(extent, ROW_BLOCK_BYTES / (row_elements * element_bytes))
        }
        _ => 1,
    };
    (0..loops)
        .map(|d| match d {
            d if d + 1 < rows => 1,
            d if d + 1 == rows => block,
            _ => 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_tiles_fit_a_block_of_rows_that_divides_the_loop() {
        // Softmax over 2048 f32 scores: 8 KiB rows, two per 16 KiB block.
        assert_eq!(row_tiles(4, 3, Some(2048), 2048, 4), vec![1, 1, 2, 0]);
        // 768-wide rows: five would fit, four divide 128.
        assert_eq!(row_tiles(3, 2, Some(128), 768, 4), vec![1, 4, 0]);
        // A row larger than the block, a symbolic row count: one row at a time.
        assert_eq!(row_tiles(2, 1, Some(64), 8192, 4), vec![1, 0]);
        assert_eq!(row_tiles(3, 2, None, 64, 4), vec![1, 1, 0]);
        // Two leading loops of rows, a trailing pair of reduced ones.
        assert_eq!(row_tiles(4, 2, Some(7), 16, 4), vec![1, 7, 0, 0]);
    }
}
