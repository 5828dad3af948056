//! Nodes lowered whole: one op of fxmlir's dialect (`dialects/fxmlir.irdl.mlir`) in the graph
//! function, over the node's tensor arguments, whose `decomposition` attribute names a private
//! function of the module that computes it. fxmlir's own rows that introduce an op
//! ([`Whole`]: the bf16 pair products) lower their node into that function; a lowering given
//! as MLIR text (`fxmlir.lowerings`, a plugin) becomes it, under `fxmlir.external`. The
//! `expand` stage inlines the decompositions; a stage placed before it sees the ops whole.

use super::{LowerCtx, LowerFn, lowering_error};
use crate::error::Result;
use crate::graph::{Arg, InlineLowering, Node, ValueRef};
use crate::pipeline::ir::{decompositions::DECOMPOSITION, ops::op_name};
use melior::{
    Context,
    dialect::func,
    ir::{
        Attribute, Block, BlockLike, Identifier, Location, Module, Operation, Region, RegionLike,
        Type, Value, ValueLike,
        attribute::{FlatSymbolRefAttribute, StringAttribute, TypeAttribute},
        operation::{OperationBuilder, OperationLike, OperationMutLike, WalkOrder, WalkResult},
        r#type::FunctionType,
    },
};
use mlir_sys::{mlirBlockArgumentSetLocation, mlirOperationClone, mlirOperationSetLocation};

/// The attributes of a whole op beyond `decomposition`: names and MLIR attribute text, from
/// the node's arguments.
pub type WholeAttributes = fn(&LowerCtx, &Node) -> Result<Vec<(&'static str, String)>>;

/// The op of fxmlir's dialect a registry row lowers its node to, and its attributes.
pub struct Whole {
    pub op: &'static str,
    pub attributes: WholeAttributes,
}

/// The op fxmlir writes for a node lowered by MLIR text given with it.
pub const EXTERNAL: &str = "fxmlir.external";

/// The name of the private function that holds `node`'s decomposition.
fn symbol(node: &Node) -> String {
    format!("{}.decomposition", node.name)
}

/// The node's tensor arguments (top-level references), in order.
pub(super) fn tensor_refs(node: &Node) -> Vec<&ValueRef> {
    node.args
        .iter()
        .filter_map(|a| match a {
            Arg::Ref(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Appends `name(operands) {decomposition = @symbol, attributes...}` to the graph function
/// and returns its results, of the node's output types.
fn boundary<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    node: &Node,
    name: &str,
    operands: &[Value<'c, 'a>],
    attributes: &[(&str, Attribute<'c>)],
) -> Result<Vec<Value<'c, 'a>>> {
    let context = ctx.e.context;
    let results: Vec<Type> = node
        .outputs
        .iter()
        .map(|m| ctx.e.tensor_type(&m.shape, m.dtype))
        .collect::<Result<_>>()?;
    let mut named = vec![(
        Identifier::new(context, DECOMPOSITION),
        FlatSymbolRefAttribute::new(context, &symbol(node)).into(),
    )];
    named.extend(
        attributes
            .iter()
            .map(|(k, v)| (Identifier::new(context, k), *v)),
    );
    let op = OperationBuilder::new(name, ctx.e.loc)
        .add_operands(operands)
        .add_results(&results)
        .add_attributes(&named)
        .build()
        .map_err(|e| lowering_error(format!("{name}: {e}")))?;
    let op = ctx.e.block.append_operation(op);
    (0..op.result_count())
        .map(|i| {
            op.result(i)
                .map(Into::into)
                .map_err(|e| lowering_error(e.to_string()))
        })
        .collect()
}

/// Lowers `node` with `lower` into `body` (the block its decomposition function will hold,
/// which takes the node's tensor arguments) and writes `whole`'s op in its place.
pub(super) fn lower<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    whole: &Whole,
    body: &'a Block<'c>,
    lower: &LowerFn,
) -> Result<Vec<Value<'c, 'a>>> {
    let attributes: Vec<(&str, Attribute)> = (whole.attributes)(ctx, node)?
        .into_iter()
        .map(|(k, text)| Ok((k, ctx.e.attr(&text)?)))
        .collect::<Result<_>>()?;
    let refs = tensor_refs(node);
    let operands: Vec<Value> = refs.iter().map(|r| ctx.value(r)).collect::<Result<_>>()?;
    // The node's arguments are the body's while it lowers; the graph's afterwards.
    let mut saved = Vec::new();
    for (r, v) in refs.iter().zip(&operands) {
        let argument = body.add_argument(v.r#type(), ctx.e.loc);
        saved.push(((*r).clone(), ctx.values.insert((*r).clone(), argument)));
    }
    let graph_block = std::mem::replace(&mut ctx.e.block, body);
    let results = lower(ctx, node);
    ctx.e.block = graph_block;
    for (r, value) in saved.into_iter().rev() {
        match value {
            Some(v) => ctx.values.insert(r, v),
            None => ctx.values.remove(&r),
        };
    }
    let results = results?;
    body.append_operation(func::r#return(&results, ctx.e.loc));
    // Symbolic sizes in the decomposition are read off its own arguments.
    let shapes: Vec<&[i64]> = refs
        .iter()
        .map(|r| Ok(&ctx.meta_of(r)?.shape[..]))
        .collect::<Result<_>>()?;
    super::sizes::resolve(ctx.e.context, body, ctx.graph, &shapes, ctx.e.loc)?;
    ctx.decompositions.push(Decomposition::Body {
        symbol: symbol(node),
        results: results.iter().map(|v| v.r#type()).collect(),
        location: ctx.e.loc,
    });
    boundary(ctx, node, whole.op, &operands, &attributes)
}

/// The node's results: `fxmlir.external` over its tensor arguments, whose decomposition is
/// `lowering`'s function (checked against the node's arguments and outputs), every op of it
/// at the node's location.
pub(super) fn external<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    lowering: &InlineLowering,
) -> Result<Vec<Value<'c, 'a>>> {
    let fail = |message: String| lowering_error(format!("{} lowering: {message}", lowering.origin));
    let context = ctx.e.context;
    let diagnostics = crate::context::Diagnostics::capture(context);
    let module = Module::parse(context, &lowering.mlir)
        .ok_or_else(|| fail(format!("its MLIR does not parse:\n{}", diagnostics.take())))?;
    if !module.as_operation().verify() {
        return Err(fail(format!(
            "its MLIR does not verify:\n{}",
            diagnostics.take()
        )));
    }
    drop(diagnostics);
    let function = std::iter::successors(module.body().first_operation(), |op| op.next_in_block())
        .find(|op| op_name(op) == "func.func")
        .ok_or_else(|| fail("its MLIR holds no func.func".to_string()))?;
    let body = function
        .region(0)
        .ok()
        .and_then(|r| r.first_block())
        .ok_or_else(|| fail("its function has no body".to_string()))?;
    let operands: Vec<Value> = tensor_refs(node)
        .into_iter()
        .map(|r| ctx.value(r))
        .collect::<Result<_>>()?;
    if body.argument_count() != operands.len() {
        return Err(fail(format!(
            "its function takes {} arguments; the node has {} tensor arguments",
            body.argument_count(),
            operands.len()
        )));
    }
    for (i, value) in operands.iter().enumerate() {
        let argument = body.argument(i).map_err(|e| fail(e.to_string()))?;
        if argument.r#type() != value.r#type() {
            return Err(fail(format!(
                "its argument {i} is {}, the node's is {}",
                argument.r#type(),
                value.r#type()
            )));
        }
    }
    let returned: Vec<Type> =
        std::iter::successors(body.first_operation(), |op| op.next_in_block())
            .find(|op| op_name(op) == "func.return")
            .ok_or_else(|| fail("its function does not return".to_string()))?
            .operands()
            .map(|v| v.r#type())
            .collect();
    let expected: Vec<Type> = node
        .outputs
        .iter()
        .map(|m| ctx.e.tensor_type(&m.shape, m.dtype))
        .collect::<Result<_>>()?;
    if returned != expected {
        return Err(fail(format!(
            "its function returns {}; the node's outputs are {}",
            list(&returned),
            list(&expected)
        )));
    }
    // SAFETY: cloning a live op gives a new op with no parent, owned here until the module
    // takes it; every op of the clone is live while the walk sets its location.
    let clone = unsafe { Operation::from_raw(mlirOperationClone(function.to_raw())) };
    clone.walk(WalkOrder::PreOrder, |op| {
        // SAFETY: see above.
        unsafe { mlirOperationSetLocation(op.to_raw(), ctx.e.loc.to_raw()) };
        WalkResult::Advance
    });
    if let Some(entry) = clone.region(0).ok().and_then(|r| r.first_block()) {
        for i in 0..entry.argument_count() {
            if let Ok(argument) = entry.argument(i) {
                // SAFETY: a live argument of the clone's entry block.
                unsafe { mlirBlockArgumentSetLocation(argument.to_raw(), ctx.e.loc.to_raw()) };
            }
        }
    }
    ctx.decompositions
        .push(Decomposition::Given(private(context, clone, &symbol(node))));
    let attributes = [
        ("op", StringAttribute::new(context, &node.target).into()),
        (
            "origin",
            StringAttribute::new(context, &lowering.origin).into(),
        ),
        (
            "operandSegmentSizes",
            ctx.e
                .attr(&segments(operands.len(), EXTERNAL_OPERAND_SLOTS))?,
        ),
        (
            "resultSegmentSizes",
            ctx.e
                .attr(&segments(node.outputs.len(), EXTERNAL_RESULT_SLOTS))?,
        ),
    ];
    boundary(ctx, node, EXTERNAL, &operands, &attributes)
}

/// The operands and results of `fxmlir.external` with a slot of their own, each its own
/// type (`dialects/fxmlir.irdl.mlir`); the rest share a last segment.
const EXTERNAL_OPERAND_SLOTS: usize = 12;
const EXTERNAL_RESULT_SLOTS: usize = 4;

/// The segment sizes of `count` values over `slots` optional slots and a last variadic
/// segment: one a slot, in order, the rest in the last.
fn segments(count: usize, slots: usize) -> String {
    let sizes: Vec<String> = (0..slots)
        .map(|k| usize::from(k < count).to_string())
        .chain(std::iter::once(count.saturating_sub(slots).to_string()))
        .collect();
    format!("array<i32: {}>", sizes.join(", "))
}

/// `function`, renamed `symbol` and made private.
fn private<'c>(context: &'c Context, mut function: Operation<'c>, symbol: &str) -> Operation<'c> {
    function.set_attribute("sym_name", StringAttribute::new(context, symbol).into());
    function.set_attribute(
        "sym_visibility",
        StringAttribute::new(context, "private").into(),
    );
    function
}

fn list(types: &[Type]) -> String {
    types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A decomposition function made while lowering, added to the module after the graph
/// function: one fxmlir lowered into a body block (its arguments set, its return appended),
/// or one given as MLIR.
pub(super) enum Decomposition<'c> {
    Body {
        symbol: String,
        results: Vec<Type<'c>>,
        location: Location<'c>,
    },
    Given(Operation<'c>),
}

/// The private functions of `decompositions`, in order; `bodies` are the blocks the `Body`
/// ones were lowered into, in the same order.
pub(super) fn functions<'c>(
    context: &'c Context,
    decompositions: Vec<Decomposition<'c>>,
    bodies: Vec<Block<'c>>,
) -> Vec<Operation<'c>> {
    let mut bodies = bodies.into_iter();
    decompositions
        .into_iter()
        .filter_map(|d| match d {
            Decomposition::Given(function) => Some(function),
            Decomposition::Body {
                symbol,
                results,
                location,
            } => {
                let body = bodies.next()?;
                let arguments: Vec<Type> = (0..body.argument_count())
                    .filter_map(|i| body.argument(i).ok().map(|a| a.r#type()))
                    .collect();
                let region = Region::new();
                region.append_block(body);
                let function = func::func(
                    context,
                    StringAttribute::new(context, &symbol),
                    TypeAttribute::new(FunctionType::new(context, &arguments, &results).into()),
                    region,
                    &[],
                    location,
                );
                Some(private(context, function, &symbol))
            }
        })
        .collect()
}
