//! Transform-dialect script plumbing shared by the stages that generate scripts (`schedule`,
//! `parallel`): the script's text around a body, tagging the payload ops it matches, appending
//! it to the module (`NN-<stage>.transform.mlir` replays with stock `mlir-opt`) and erasing it
//! and its tags once `transform-interpreter` has run.

use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{
        Attribute, BlockLike, Module,
        attribute::{IntegerAttribute, StringAttribute},
        operation::{OperationLike, OperationMutLike, WalkOrder, WalkResult},
        r#type::IntegerType,
    },
};
use std::collections::HashMap;

pub use super::ir::{items, list};

/// The transform entry point `transform-interpreter` runs.
pub const ENTRY: &str = "__transform_main";

/// The module attribute that allows named sequences.
pub const WITH_NAMED_SEQUENCE: &str = "transform.with_named_sequence";

pub const ANY: &str = "!transform.any_op";

/// `(ANY, ANY, ...)` with `n` entries.
pub fn handles(n: usize) -> String {
    vec![ANY; n].join(", ")
}

/// A transform script: a module holding `@__transform_main` whose body is `body`.
pub fn script(body: &str) -> String {
    format!(
        "module attributes {{{WITH_NAMED_SEQUENCE}}} {{\n  transform.named_sequence @{ENTRY}(%root: {ANY} {{transform.readonly}}) {{\n{body}    transform.yield\n  }}\n}}\n"
    )
}

/// Sets a discardable `i64` attribute on operations, found by raw pointer: `tags` maps an
/// operation to its attribute name and value.
pub fn tag(module: &mut Module, tags: &HashMap<usize, (&str, i64)>) {
    module
        .as_operation_mut()
        .walk_mut(WalkOrder::PreOrder, |mut op| {
            if let Some(&(tag, id)) = tags.get(&(op.to_raw().ptr as usize)) {
                let context = op.context();
                // SAFETY: the context owns the module being walked, so it outlives this closure.
                let context = unsafe { context.to_ref() };
                let i64_type = IntegerType::new(context, 64).into();
                op.set_discardable_attribute(tag, IntegerAttribute::new(i64_type, id).into());
            }
            WalkResult::Advance
        });
}

/// Parses a generated transform script (a module holding `@__transform_main`) and appends its
/// entry point to `module`, for the `transform-interpreter` run of `stage`.
pub fn append_script(
    context: &Context,
    module: &mut Module,
    text: &str,
    stage: &str,
) -> Result<()> {
    let diagnostics = super::Diagnostics::capture(context);
    let script = Module::parse(context, text).ok_or_else(|| {
        Error::stage(
            stage,
            format!(
                "the generated transform script does not parse:\n{}\n{text}",
                diagnostics.take()
            ),
        )
    })?;
    drop(diagnostics);
    let sequence = script
        .body()
        .first_operation()
        .ok_or_else(|| Error::stage(stage, "the generated transform script is empty"))?;
    // An owned copy in the payload module; the parsed script module is dropped.
    let sequence: melior::ir::Operation = (*sequence).clone();
    module.body().append_operation(sequence);
    module
        .as_operation_mut()
        .set_attribute(WITH_NAMED_SEQUENCE, Attribute::unit(context));
    Ok(())
}

pub fn has_entry(module: &Module) -> bool {
    let mut next = module.body().first_operation();
    while let Some(op) = next {
        if is_entry(&op) {
            return true;
        }
        next = op.next_in_block();
    }
    false
}

pub fn is_entry<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> bool {
    op.name().as_string_ref().as_str() == Ok("transform.named_sequence")
        && op
            .attribute("sym_name")
            .ok()
            .and_then(|a| StringAttribute::try_from(a).ok())
            .is_some_and(|name| name.value() == ENTRY)
}

/// Erases the transform script and the module attribute [`append_script`] added, and the
/// stage's `tags` ([`super::schedule::attach`]'s or [`super::parallel::attach`]'s).
pub fn detach(module: &mut Module, tags: &[&str]) {
    loop {
        let mut found = None;
        let mut next = module.body().first_operation_mut();
        while let Some(op) = next {
            if is_entry(&op) {
                found = Some(op);
                break;
            }
            next = op.next_in_block_mut();
        }
        let Some(mut op) = found else { break };
        let raw = op.to_raw();
        op.remove_from_parent();
        // SAFETY: `raw` was just unlinked from its block, so this is its only owner; dropping
        // the owned operation destroys it exactly once.
        drop(unsafe { melior::ir::Operation::from_raw(raw) });
    }
    let mut root = module.as_operation_mut();
    if root.has_attribute(WITH_NAMED_SEQUENCE) {
        let _ = root.remove_attribute(WITH_NAMED_SEQUENCE);
    }
    root.walk_mut(WalkOrder::PreOrder, |mut op| {
        for tag in tags {
            if op.has_attribute(tag) {
                let _ = op.remove_discardable_attribute(tag);
            }
        }
        WalkResult::Advance
    });
}
