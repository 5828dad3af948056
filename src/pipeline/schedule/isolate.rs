//! Isolation for compile time: each product (with its fill and epilogue) waits in a private
//! function of its own while the script runs, so that the fusions' diagnostics print three
//! ops, not the graph; identical products share one schedule.

use super::model::*;
use super::plan::*;
use super::script::emit_one;
use super::{CONTRACTION_TAG, EPILOGUE_TAG};
use crate::error::{Error, Result};
use crate::pipeline::ir::ops::{result_owner, use_count};
use crate::pipeline::ir::outlining;
use melior::{
    Context,
    ir::{
        Module,
        attribute::{IntegerAttribute, StringAttribute},
        block::BlockLike,
        operation::{OperationLike, OperationMutLike, WalkOrder, WalkResult},
        r#type::IntegerType,
    },
};
use std::collections::HashMap;

/// Merges the isolated contractions' functions that are identical but for their tags and
/// whose scripts are the same (a model's repeated layers: BERT's 16 become 6), so that each
/// is scheduled once; the calls of a merged one call the one kept. Returns the planned ids
/// whose functions were merged away.
pub(super) fn merge_identical(
    context: &Context,
    module: &mut Module,
    planned: &[PlannedProduct],
) -> Result<Vec<i64>> {
    // Equal tags for equal scripts (the plan also depends on the product's surroundings, which
    // the function does not show), so only those can merge: each script rendered as the
    // first contraction's.
    let keys = planned
        .iter()
        .map(|p| {
            let mut script = String::new();
            emit_one(&mut script, 0, p).map(|()| script)
        })
        .collect::<std::result::Result<Vec<String>, _>>()
        .map_err(|_| Error::stage("schedule", "cannot format the transform schedule"))?;
    let classes: Vec<i64> = keys
        .iter()
        .map(|key| keys.iter().position(|k| k == key).map_or(0, |c| c as i64))
        .collect();
    let class = |id: i64| {
        usize::try_from(id)
            .ok()
            .and_then(|i| classes.get(i).copied())
            .unwrap_or(id)
    };
    let isolated = isolated_ids(module);
    let before = retag(module, &isolated, class);
    if before.len() < 2 {
        retag(module, &isolated, |id| id);
        return Ok(Vec::new());
    }
    crate::pipeline::run_pipeline_text(
        context,
        module,
        "builtin.module(duplicate-function-elimination)",
    )
    .map_err(|e| e.in_stage("schedule"))?;
    let after = retag(module, &isolated, |id| id);
    Ok(before
        .into_iter()
        .filter(|id| !after.contains(id))
        .collect())
}

/// A private function's symbol name, if `function` is one.
fn private_symbol<'c: 'a, 'a>(function: &impl OperationLike<'c, 'a>) -> Option<String> {
    let text = |name: &str| {
        function
            .attribute(name)
            .ok()
            .and_then(|a| StringAttribute::try_from(a).ok())
            .map(|a| a.value().to_string())
    };
    text("sym_name").filter(|_| text("sym_visibility").as_deref() == Some("private"))
}

/// The contraction each isolated function holds, by the function's symbol: the id its
/// contraction's tag carries when [`isolate`] has just made it.
fn isolated_ids(module: &Module) -> HashMap<String, i64> {
    let mut ids = HashMap::new();
    let mut next = module.body().first_operation();
    while let Some(function) = next {
        next = function.next_in_block();
        let Some(symbol) = private_symbol(&function) else {
            continue;
        };
        function.walk(WalkOrder::PreOrder, |op| {
            match op
                .attribute(CONTRACTION_TAG)
                .ok()
                .and_then(|a| IntegerAttribute::try_from(a).ok())
            {
                Some(id) => {
                    ids.insert(symbol.clone(), id.value());
                    WalkResult::Interrupt
                }
                None => WalkResult::Advance,
            }
        });
    }
    ids
}

/// Sets the tags inside each isolated contraction's function (`isolated`: its contraction's
/// id by symbol) to `value(id)`; returns the ids of the functions the module still holds.
pub(super) fn retag(
    module: &mut Module,
    isolated: &HashMap<String, i64>,
    value: impl Fn(i64) -> i64,
) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut next = module.body().first_operation_mut();
    while let Some(mut function) = next {
        next = function.next_in_block_mut();
        let Some(&id) = private_symbol(&function).and_then(|symbol| isolated.get(&symbol)) else {
            continue;
        };
        ids.push(id);
        let tag_value = value(id);
        function.walk_mut(WalkOrder::PreOrder, |mut op| {
            let context = op.context();
            // SAFETY: the context owns the module being walked, so it outlives this closure.
            let context = unsafe { context.to_ref() };
            for tag in [CONTRACTION_TAG, EPILOGUE_TAG] {
                if op.has_attribute(tag) {
                    let i64_type = IntegerType::new(context, 64).into();
                    let attribute = IntegerAttribute::new(i64_type, tag_value).into();
                    op.set_discardable_attribute(tag, attribute);
                }
            }
            WalkResult::Advance
        });
    }
    ids
}

/// Ops cloned into an isolated contraction's function rather than passed to it: constants and
/// the empty tensors of the fill and the epilogue, so that their tiles fold as before.
pub(super) const ISOLATE_CLONED: &[&str] = &["arith.constant", "ub.poison", "tensor.empty"];

/// The same for a pairs product, whose function stays a call (its dot products are x86vector
/// ops, which MLIR's inliner does not inline): it is passed its empty result tensor and writes
/// the product there, so that bufferisation drops the function's result
/// (`drop-equivalent-buffer-results`) and the buffer stays the caller's. A function returning
/// a buffer of its own hid it from the deallocation pipeline: ResNet-50 in bf16 checked 203
/// buffers for aliases on every call and had 600 conditional deallocations.
pub(super) const ISOLATE_CLONED_PAIRS: &[&str] = &["arith.constant", "ub.poison"];

/// Moves each planned contraction, with the fill that starts it and its epilogue, into a
/// private function of its own, called in its place; the stage's `inline` pass puts the
/// scheduled code back. This is for compile time: `fuse_into_containing_op` prints its
/// producer and container into a diagnostic on every fusion (used only if the fusion fails),
/// and printing an op numbers everything in the nearest op isolated from above. In the graph
/// function that was 70% of the stage; in a function of three ops it is nothing. Only the
/// contractions whose schedule fuses that way move (the others, with the inlining, would cost
/// more than they save), and of those not one whose fill has other users or whose ops other
/// ops use before the last of them. Returns the ids of those it moved.
pub(super) fn isolate(
    context: &Context,
    module: &Module,
    planned: &[PlannedProduct],
) -> Result<Vec<usize>> {
    let attributes = outlining::private_attributes(context, &[])?;
    let mut moved = Vec::new();
    for (function, name, block) in outlining::public_functions(module)? {
        let mut ops = HashMap::new();
        let mut next = block.first_operation();
        while let Some(op) = next {
            next = op.next_in_block();
            ops.insert(op.to_raw().ptr as usize, (ops.len(), op));
        }
        let at = |op: &melior::ir::OperationRef| ops.get(&(op.to_raw().ptr as usize)).copied();
        for (id, p) in planned.iter().enumerate() {
            let Some((_, contraction)) = ops.get(&p.op).copied().filter(|_| p.fuses_into_loops())
            else {
                continue;
            };
            let mut group = vec![contraction];
            if p.fill_init {
                let fill = contraction
                    .operand(2)
                    .ok()
                    .and_then(result_owner)
                    .filter(|f| use_count(f) == 1);
                match fill.as_ref().and_then(at) {
                    Some((_, fill)) => group.push(fill),
                    None => continue,
                }
            }
            if let Some(epilogue) = p.epilogue {
                match ops.get(&epilogue) {
                    Some((_, epilogue)) => group.push(*epilogue),
                    None => continue,
                }
            }
            group.sort_by_key(|op| at(op).map(|(i, _)| i));
            let callee = outlining::Callee {
                name: format!("{name}_contraction{id}"),
                attributes: &attributes,
                cloned: if p.problem.element == Element::Bf16Pairs {
                    ISOLATE_CLONED_PAIRS
                } else {
                    ISOLATE_CLONED
                },
            };
            if outlining::outline_group(context, &module.body(), function, block, &group, &callee)
                .map_err(|e| e.in_stage("schedule"))?
            {
                moved.push(id);
            }
        }
    }
    Ok(moved)
}
