//! OpenMP parallel regions in the LLVM dialect: what they capture, and what LLVM knows of the
//! pointers they use.
//!
//! **Captures.** After the conversion to the LLVM dialect, a memref used inside an
//! `omp.parallel` region is a descriptor struct built outside it (from the function's
//! arguments, with `llvm.insertvalue`), and the region reads the fields it needs with
//! `llvm.extractvalue`. OpenMP's translation passes every value a region captures through
//! memory: the forking function stores each captured descriptor field by field into a stack
//! slot, and the outlined region loads it back. [`narrow`] makes a region capture only the
//! fields it reads: each `llvm.extractvalue` inside a region of a value built outside it is
//! replaced by the field's value, where the `llvm.insertvalue` chain outside names it, or else
//! moved before the region. A parallel op's forking function then passes a few pointers
//! instead of whole descriptors (on the transformer block, a third less LLVM IR around the
//! parallel regions).
//!
//! **Aliasing.** The translation outlines a region into a function of its own, which receives
//! the pointers through that memory: the `noalias` of the enclosing function's arguments (see
//! [`super::outline`]) does not reach them, so LLVM guards every loop it vectorises there with
//! run-time overlap checks and a scalar fallback, which the same loop on one thread does not
//! have. [`scope`] says it again in a form that survives the outlining: one alias scope per
//! `noalias` argument of the function, and on each load and store in a region whose address
//! derives from an argument, the scope of that argument (when it is `noalias`) and, as scopes
//! it does not alias, those of the other `noalias` arguments.

use super::ir::ops::{op_name, result_owner, within};
use crate::error::{Error, Result};
use melior::{
    Context, StringRef,
    ir::{
        Attribute, BlockLike, Module, OperationRef, RegionLike, Value, ValueLike,
        attribute::{ArrayAttribute, AttributeLike, DenseI64ArrayAttribute, DictionaryAttribute},
        block::BlockArgument,
        operation::{OperationLike, WalkOrder, WalkResult},
    },
};
use mlir_sys::{
    MlirBlock, MlirOperation, mlirOpOperandIsNull, mlirOperationDestroy, mlirOperationMoveBefore,
    mlirOperationSetAttributeByName, mlirValueGetFirstUse, mlirValueReplaceAllUsesOfWith,
};

const PARALLEL: &str = "omp.parallel";
const EXTRACT: &str = "llvm.extractvalue";
const INSERT: &str = "llvm.insertvalue";
const POISON: &str = "llvm.mlir.poison";
const GEP: &str = "llvm.getelementptr";
const LOAD: &str = "llvm.load";
const STORE: &str = "llvm.store";
const NOALIAS_ATTRIBUTE: &str = "llvm.noalias";

/// The stage whose hook runs this module's rewrites: its errors name it.
const STAGE: &str = "llvm";

/// The op that holds the definition of `value`: its defining op, or for a block argument the
/// op whose region holds the block.
fn definition_site(value: Value) -> Option<MlirOperation> {
    if let Some(owner) = result_owner(value) {
        return Some(owner.to_raw());
    }
    let argument = BlockArgument::try_from(value).ok()?;
    argument.owner().parent_operation().map(|o| o.to_raw())
}

/// The `position` of an `llvm.extractvalue` or `llvm.insertvalue`.
fn position(op: &OperationRef) -> Result<Vec<i64>> {
    let list = op
        .attribute("position")
        .map_err(|e| Error::stage(STAGE, format!("{}: {e}", op_name(op))))?;
    let list = DenseI64ArrayAttribute::try_from(list)
        .map_err(|e| Error::stage(STAGE, format!("{}: {e}", op_name(op))))?;
    Ok((0..list.len())
        .filter_map(|i| list.element(i).ok())
        .collect())
}

/// The value an `llvm.insertvalue` chain ending in `aggregate` put at `wanted`, if the chain
/// names it whole; `None` when the chain starts elsewhere or writes part of that field.
fn inserted<'c: 'a, 'a>(
    mut aggregate: Value<'c, 'a>,
    wanted: &[i64],
) -> Result<Option<Value<'c, 'a>>> {
    while let Some(insert) = result_owner(aggregate).filter(|o| op_name(o) == INSERT) {
        let at = position(&insert)?;
        if at == wanted {
            return Ok(insert.operand(1).ok());
        }
        let overlaps = at.iter().zip(wanted).all(|(a, b)| a == b);
        if overlaps {
            return Ok(None);
        }
        aggregate = insert
            .operand(0)
            .map_err(|e| Error::stage(STAGE, format!("{INSERT}: {e}")))?;
    }
    Ok(None)
}

/// Erases `value`'s `llvm.insertvalue` chain, down to the `llvm.mlir.poison` it starts from,
/// as far as nothing else uses it.
fn erase_unused_chain<'c: 'a, 'a>(mut value: Value<'c, 'a>) -> Result<()> {
    while let Some(op) = result_owner(value).filter(|o| [INSERT, POISON].contains(&&*op_name(o))) {
        // SAFETY: `op` is live; its result's use list is read only.
        let used = op
            .result(0)
            .is_ok_and(|r| unsafe { !mlirOpOperandIsNull(mlirValueGetFirstUse(r.to_raw())) });
        if used {
            break;
        }
        let container = (op_name(&op) == INSERT)
            .then(|| op.operand(0))
            .transpose()
            .map_err(|e| Error::stage(STAGE, format!("{INSERT}: {e}")))?;
        // SAFETY: `op` is live and its result has no uses; nothing refers to it after.
        unsafe { mlirOperationDestroy(op.to_raw()) };
        match container {
            Some(next) => value = next,
            None => break,
        }
    }
    Ok(())
}

/// The `omp.parallel` ops nested in `op`, outermost first.
fn parallel_regions<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Vec<MlirOperation> {
    let mut regions = Vec::new();
    op.walk(WalkOrder::PreOrder, |nested| {
        if nested.name().as_string_ref().as_str() == Ok(PARALLEL) {
            regions.push(nested.to_raw());
        }
        WalkResult::Advance
    });
    regions
}

/// Narrows the captures of every `omp.parallel` region of `module` (see the module
/// documentation); returns how many field reads it took out of regions.
pub fn narrow(module: &mut Module) -> Result<usize> {
    let mut narrowed = 0;
    for region in parallel_regions(&module.as_operation()) {
        let mut reads = Vec::new();
        // SAFETY: `region` is a live op of `module`, borrowed mutably here.
        let parallel = unsafe { OperationRef::from_raw(region) };
        parallel.walk(WalkOrder::PreOrder, |op| {
            if op.name().as_string_ref().as_str() == Ok(EXTRACT)
                && op
                    .operand(0)
                    .ok()
                    .and_then(definition_site)
                    .is_some_and(|site| !within(site, region))
            {
                reads.push(op.to_raw());
            }
            WalkResult::Advance
        });
        for &read in &reads {
            // SAFETY: `read` is a live op of `module` (reads are only ever moved or erased
            // after their own turn).
            let op = unsafe { OperationRef::from_raw(read) };
            let aggregate = op
                .operand(0)
                .map_err(|e| Error::stage(STAGE, format!("{EXTRACT}: {e}")))?;
            let result = op
                .result(0)
                .map_err(|e| Error::stage(STAGE, format!("{EXTRACT}: {e}")))?;
            match inserted(aggregate, &position(&op)?)? {
                Some(field) if field.r#type() == result.r#type() => {
                    // SAFETY: `read` is live; `field` dominates the region and so every use
                    // of the read; after the replacement the read has no uses and is erased.
                    unsafe {
                        mlirValueReplaceAllUsesOfWith(result.to_raw(), field.to_raw());
                        mlirOperationDestroy(read);
                    }
                    erase_unused_chain(aggregate)?;
                }
                // SAFETY: both ops are live; the read's operand is defined outside the region
                // and so dominates the region's op.
                _ => unsafe { mlirOperationMoveBefore(read, region) },
            }
            narrowed += 1;
        }
    }
    Ok(narrowed)
}

/// The function argument (its position) that `address` is, or derives from through
/// `llvm.getelementptr`s and descriptors (`llvm.extractvalue` of a field an `llvm.insertvalue`
/// chain names); `entry` is the function's entry block.
fn argument_of<'c: 'a, 'a>(mut address: Value<'c, 'a>, entry: MlirBlock) -> Option<usize> {
    loop {
        if let Some(owner) = result_owner(address) {
            address = match op_name(&owner).as_str() {
                GEP => owner.operand(0).ok()?,
                EXTRACT => inserted(owner.operand(0).ok()?, &position(&owner).ok()?).ok()??,
                _ => return None,
            };
        } else {
            let argument = BlockArgument::try_from(address).ok()?;
            return (argument.owner().to_raw().ptr == entry.ptr)
                .then(|| argument.argument_number());
        }
    }
}

/// The positions of the arguments of the `llvm.func` `function` that carry `llvm.noalias`.
fn noalias_arguments<'c: 'a, 'a>(function: &OperationRef<'c, 'a>) -> Vec<usize> {
    let Some(list) = function
        .attribute("arg_attrs")
        .ok()
        .and_then(|a| ArrayAttribute::try_from(a).ok())
    else {
        return Vec::new();
    };
    (0..list.len())
        .filter(|&i| {
            list.element(i)
                .ok()
                .and_then(|a| DictionaryAttribute::try_from(a).ok())
                .is_some_and(|d| d.element_by_name(NOALIAS_ATTRIBUTE).is_some())
        })
        .collect()
}

/// `count` alias scopes of one new domain.
fn new_scopes<'c>(context: &'c Context, count: usize) -> Result<Vec<Attribute<'c>>> {
    // One parse: `distinct[0]` names the same domain in every scope, and each parse makes new
    // distinct attributes.
    let domain = "#llvm.alias_scope_domain<id = distinct[0]<>, description = \"fxmlir\">";
    let text = format!(
        "[{}]",
        (1..=count)
            .map(|i| format!("#llvm.alias_scope<id = distinct[{i}]<>, domain = {domain}>"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let parsed = Attribute::parse(context, &text)
        .and_then(|a| ArrayAttribute::try_from(a).ok())
        .ok_or_else(|| Error::stage(STAGE, format!("cannot parse the alias scopes {text}")))?;
    (0..parsed.len())
        .map(|i| {
            parsed
                .element(i)
                .map_err(|e| Error::stage(STAGE, e.to_string()))
        })
        .collect()
}

/// Gives the loads and stores inside the parallel regions of every `llvm.func` of `module`
/// alias scopes that say what the function's `noalias` arguments say (see the module
/// documentation); returns how many accesses it annotated.
pub fn scope(context: &Context, module: &mut Module) -> Result<usize> {
    let mut annotated = 0;
    let mut next = module.body().first_operation();
    while let Some(function) = next {
        next = function.next_in_block();
        let noalias = noalias_arguments(&function);
        let regions = parallel_regions(&function);
        if noalias.is_empty() || regions.is_empty() {
            continue;
        }
        let Some(entry) = function.region(0).ok().and_then(|r| r.first_block()) else {
            continue;
        };
        let scopes = new_scopes(context, noalias.len())?;
        for region in regions {
            let mut accesses = Vec::new();
            // SAFETY: `region` is a live op of `module`, borrowed mutably here.
            let parallel = unsafe { OperationRef::from_raw(region) };
            parallel.walk(WalkOrder::PreOrder, |op| {
                let address = match op.name().as_string_ref().as_str() {
                    Ok(LOAD) => op.operand(0).ok(),
                    Ok(STORE) => op.operand(1).ok(),
                    _ => None,
                };
                if let Some(argument) = address.and_then(|a| argument_of(a, entry.to_raw())) {
                    accesses.push((op.to_raw(), argument));
                }
                WalkResult::Advance
            });
            for (access, argument) in accesses {
                let own = noalias.iter().position(|&a| a == argument);
                let others: Vec<Attribute> = (0..scopes.len())
                    .filter(|&i| Some(i) != own)
                    .map(|i| scopes[i])
                    .collect();
                let mut attributes = vec![("noalias_scopes", others)];
                if let Some(own) = own {
                    attributes.push(("alias_scopes", vec![scopes[own]]));
                }
                for (name, list) in attributes.into_iter().filter(|(_, l)| !l.is_empty()) {
                    let list = ArrayAttribute::new(context, &list);
                    // SAFETY: `access` is a live op of `module`; the name and the attribute
                    // outlive the call.
                    unsafe {
                        mlirOperationSetAttributeByName(
                            access,
                            StringRef::new(name).to_raw(),
                            list.to_raw(),
                        )
                    };
                }
                annotated += 1;
            }
        }
    }
    Ok(annotated)
}
