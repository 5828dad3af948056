//! Elementwise chains after a matrix product, made one epilogue before the schedule runs. The
//! schedule fuses a product's single elementwise consumer into its tile loop, but a linear
//! layer's result usually passes through more: its bias, then an activation (GELU, ReLU) or a
//! residual sum, often behind a `view` between the 2-D product and a 3-D activation, and a
//! batched product's scores are scaled behind such a `view`. The upstream elementwise fusion runs
//! after the schedule (before it, it would generalise the products), so each op after the first
//! stayed a loop nest of its own: one more pass over memory at run time, one more function to
//! compile.
//!
//! Here, for each product, its chain of consumers is folded while each link is the only use of
//! the one before:
//! - an all-parallel `linalg.generic` reading the chain's value with the identity map and
//!   writing the same shape merges with the generic before it (their bodies run one after the
//!   other in one loop nest) or, right after the product, starts the chain;
//! - a generic reading it through reshapes (`tensor.collapse_shape`/`expand_shape`, the
//!   row-major reinterpretation a `view` lowers to) is rebuilt on the chain's shape, when each
//!   of its other inputs is of its own shape (reshaped alike), a scalar, or broadcast along
//!   trailing dimensions both shapes share (a bias over the last one); its result is reshaped
//!   back for its users.
//!
//! Shapes may be dynamic (a symbolic batch): the reshapes are replayed step by step rather than
//! through a flat 1-D value, an expansion back taking its sizes from the reshape it replays and
//! one undone on an input computing them from that input's sizes (a group of two dynamic sizes
//! ends the chain).
//!
//! Only generics writing `f32`/`f64` with plain arithmetic bodies take part (reading `f32`/`f64`
//! or 32/64-bit integers): those the schedule fuses.
//!
//! Then each graph output that is a reshape of a computed tensor (a chain's value reshaped
//! back, or a `view` as a graph's last op) is written through a view of the output buffer in
//! the tensor's own shape: behind the reshape, the fusion stage's empty-tensor elimination
//! could not point the producer at the output buffer, so bufferization gave it a buffer of its
//! own and copied that into the output.

use super::ir::builder::{Builder, regroupable};
use super::ir::maps::{
    MapResult, affine_map, elementwise_maps, identity_map, indexing_maps, is_identity_of,
    map_results,
};
use super::ir::ops::{
    op_name as name, reassociation, result_owner, sole_use, tensor_dims, tensor_sizes, type_sizes,
};
use crate::error::{Error, Result};
use crate::tuning::PANEL_MAPS;
use melior::{
    Context, IrRewriter,
    ir::{
        Block, BlockLike, BlockRef, Location, Module, OperationRef, Region, RegionLike, Type,
        Value, ValueLike,
        operation::OperationLike,
        r#type::{MemRefType, RankedTensorType, ShapedTypeLike},
    },
};
use mlir_sys::{mlirOpOperandIsNull, mlirOperationSetOperand, mlirValueGetFirstUse};

const RESHAPES: &[&str] = &["tensor.collapse_shape", "tensor.expand_shape"];

/// The stage whose hook runs this module's rewrites: its errors name it.
const STAGE: &str = "schedule";

/// The indexing maps of a generic as text, one per operand: what a folded generic is built
/// from (the analyses read them typed, through [`indexing_maps`]).
fn printed_maps(op: &OperationRef) -> Option<Vec<String>> {
    let maps = op.attribute("indexing_maps").ok()?;
    let maps = melior::ir::attribute::ArrayAttribute::try_from(maps).ok()?;
    (0..maps.len())
        .map(|i| maps.element(i).ok().map(|m| m.to_string()))
        .collect()
}

/// Whether `op` reads its operand `feed` whole: through the identity map of `rank` loops.
fn feeds_whole(op: &OperationRef, feed: usize, rank: usize) -> bool {
    indexing_maps(op)
        .and_then(|maps| maps.get(feed).copied())
        .is_some_and(|map| is_identity_of(map, rank))
}

/// A generic the chain can take in: all-parallel with a plain body writing `f32`/`f64`, one
/// result, its output not read by the body. Returns its number of inputs.
fn chainable(op: &OperationRef) -> Option<usize> {
    if name(op) != "linalg.generic" {
        return None;
    }
    elementwise_maps(op)?;
    let inputs = op.operand_count().checked_sub(1)?;
    let body = op.region(0).ok()?.first_block()?;
    let out = body.argument(inputs).ok()?;
    // SAFETY: `out` is a live block argument.
    let unused = unsafe { mlirOpOperandIsNull(mlirValueGetFirstUse(out.to_raw())) };
    unused.then_some(inputs)
}

/// How a generic fed through reshapes reads its other inputs on the chain's shape `shape`: an
/// input of its own shape through the identity map is reshaped like the chain's value (identity
/// map); a scalar stays one; a broadcast input (such as a bias) that reads only trailing
/// dimensions the two shapes share reads the same dimensions of the chain's shape. `None` for
/// anything else.
fn reshaped_maps(op: &OperationRef, shape: &[Option<i64>]) -> Option<Vec<String>> {
    let own = tensor_dims(op.result(0).ok()?.into())?;
    if own.is_empty() {
        return None;
    }
    let shared = own
        .iter()
        .rev()
        .zip(shape.iter().rev())
        .take_while(|(a, b)| a.is_some() && a == b)
        .count();
    let inputs = op.operand_count() - 1;
    let mut out = Vec::new();
    for (i, map) in indexing_maps(op)?.into_iter().enumerate().take(inputs) {
        if is_identity_of(map, own.len()) {
            if tensor_dims(op.operand(i).ok()?)? != own {
                return None;
            }
            out.push(identity_map(shape.len()));
            continue;
        }
        let mut results = Vec::new();
        for result in map_results(map) {
            let d = match result {
                MapResult::Zero => {
                    results.push("0".to_string());
                    continue;
                }
                MapResult::Dim(d) => d,
                MapResult::Other => return None,
            };
            // Loop `d` of the consumer is loop `d + shape.len() - own.len()` of the chain when
            // it lies among the shared trailing dimensions.
            if d + shared < own.len() {
                return None;
            }
            results.push(format!("d{}", d + shape.len() - own.len()));
        }
        out.push(affine_map(shape.len(), &results));
    }
    Some(out)
}

/// A reshape between a chain and its consumer, kept to be replayed on the chain's value and
/// undone on the consumer's other inputs: its groups, the types on its two sides and, for an
/// expansion, its dynamic sizes (defined before it, so before the consumer too).
struct Step<'c, 'a> {
    groups: Vec<Vec<usize>>,
    source: Type<'c>,
    result: Type<'c>,
    sizes: Option<Vec<Value<'c, 'a>>>,
}

impl<'c, 'a> Step<'c, 'a> {
    /// `op`'s step; `None` when `op` is a collapse whose source holds two dynamic sizes in one
    /// group (undoing it could not compute them).
    fn of(op: &OperationRef<'c, 'a>) -> Option<Self> {
        let source = op.operand(0).ok()?.r#type();
        let result = op.result(0).ok()?.r#type();
        let groups = reassociation(op)?;
        let sizes = if name(op) == "tensor.expand_shape" {
            Some(
                (1..op.operand_count())
                    .map(|i| op.operand(i).ok())
                    .collect::<Option<Vec<_>>>()?,
            )
        } else {
            if !regroupable(&groups, &type_sizes(source)?) {
                return None;
            }
            None
        };
        Some(Self {
            groups,
            source,
            result,
            sizes,
        })
    }

    /// `value`, a tensor of the step's result type or an identity-layout memref of its
    /// shape, as the source's shape.
    fn undo(&self, builder: &Builder<'c, 'a>, value: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let to = if MemRefType::try_from(value.r#type()).is_ok() {
            let tensor = RankedTensorType::try_from(self.source)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?;
            let sizes = type_sizes(self.source)
                .ok_or_else(|| Error::stage(STAGE, format!("a view as {}", self.source)))?;
            let dims: Vec<i64> = sizes.iter().map(|s| s.unwrap_or(i64::MIN)).collect();
            MemRefType::new(tensor.element(), &dims, None, None).into()
        } else {
            self.source
        };
        match self.sizes {
            Some(_) => builder.collapse(value, &self.groups, to),
            None => {
                let sizes = builder.expanded_sizes(value, &self.groups, to)?;
                builder.expand(value, &self.groups, to, &sizes)
            }
        }
    }

    /// `value`, of the step's source type, as its result type.
    fn replay(&self, builder: &Builder<'c, 'a>, value: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        match &self.sizes {
            Some(sizes) => builder.expand(value, &self.groups, self.result, sizes),
            None => builder.collapse(value, &self.groups, self.result),
        }
    }
}

/// The block arguments of a generic's body.
fn arguments<'c, 'a>(op: &OperationRef<'c, 'a>) -> Result<Vec<(Type<'c>, Location<'c>)>> {
    let body = op
        .region(0)
        .ok()
        .and_then(|r| r.first_block())
        .ok_or_else(|| Error::stage(STAGE, "a generic without a body".to_string()))?;
    Ok((0..body.argument_count())
        .filter_map(|i| body.argument(i).ok())
        .map(|a| (a.r#type(), op.location()))
        .collect())
}

/// Replaces `consumer` (a chainable generic reading the chain at input `feed`, directly or
/// through the reshapes `steps`) by a generic on the chain's shape: `previous`'s body then the
/// consumer's when the chain already has a generic, else the consumer's alone reading `head`.
/// Its result goes to the consumer's users, reshaped back. Returns the new generic's result.
fn fold_one<'c, 'a>(
    context: &'c Context,
    previous: Option<OperationRef<'c, 'a>>,
    head: Value<'c, 'a>,
    consumer: OperationRef<'c, 'a>,
    feed: usize,
    consumer_maps: Vec<String>,
    steps: &[Step<'c, 'a>],
) -> Result<Value<'c, 'a>> {
    let shape = tensor_dims(head)
        .ok_or_else(|| Error::stage(STAGE, "a chain on an unranked tensor".to_string()))?;
    let builder = Builder {
        stage: STAGE,
        context,
        anchor: consumer,
        location: consumer.location(),
    };
    let inputs = consumer.operand_count() - 1;
    let own = tensor_dims(
        consumer
            .result(0)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?
            .into(),
    )
    .ok_or_else(|| Error::stage(STAGE, "a generic with an unranked result".to_string()))?;
    // Inputs of the consumer's own shape read with the identity map are reshaped like the
    // chain's value; broadcast and scalar inputs are read as they are.
    let consumer_inputs: Vec<(Value, String)> = (0..inputs)
        .map(|i| {
            let operand = consumer
                .operand(i)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?;
            let value = if i == feed {
                head
            } else if consumer_maps[i] == identity_map(shape.len())
                && tensor_dims(operand).is_some_and(|s| s == own)
            {
                steps
                    .iter()
                    .rev()
                    .try_fold(operand, |value, step| step.undo(&builder, value))?
            } else {
                operand
            };
            Ok((value, consumer_maps[i].clone()))
        })
        .collect::<Result<_>>()?;
    let mut operands = Vec::new();
    let mut map_texts = Vec::new();
    let mut types = Vec::new();
    let consumer_arguments = arguments(&consumer)?;
    let init = match previous {
        Some(previous) => {
            let previous_maps = printed_maps(&previous)
                .ok_or_else(|| Error::stage(STAGE, "a generic without maps".to_string()))?;
            let count = previous.operand_count() - 1;
            let previous_arguments = arguments(&previous)?;
            for i in 0..count {
                operands.push(
                    previous
                        .operand(i)
                        .map_err(|e| Error::stage(STAGE, e.to_string()))?,
                );
                map_texts.push(previous_maps[i].clone());
                types.push(previous_arguments[i]);
            }
            for (i, (value, map)) in consumer_inputs.into_iter().enumerate() {
                if i != feed {
                    operands.push(value);
                    map_texts.push(map);
                    types.push(consumer_arguments[i]);
                }
            }
            previous
                .operand(count)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?
        }
        None => {
            for (i, (value, map)) in consumer_inputs.into_iter().enumerate() {
                operands.push(value);
                map_texts.push(map);
                types.push(consumer_arguments[i]);
            }
            // A fresh empty tensor of the chain's type (the body never reads it): a reshaped
            // init would hide from the fusion stage's empty-tensor elimination, which points
            // an output's producer at the output buffer.
            let product = result_owner(head)
                .ok_or_else(|| Error::stage(STAGE, "a chain without its product".to_string()))?;
            let sources = size_sources(&product, &shape).ok_or_else(|| {
                Error::stage(STAGE, "a product whose inputs miss its sizes".to_string())
            })?;
            let sizes = sources
                .into_iter()
                .map(|(input, d)| {
                    let input = product
                        .operand(input)
                        .map_err(|e| Error::stage(STAGE, e.to_string()))?;
                    builder.dim(input, d)
                })
                .collect::<Result<Vec<_>>>()?;
            builder.build("tensor.empty", &sizes, head.r#type(), &[], vec![])?
        }
    };
    let count = operands.len();
    operands.push(init);
    map_texts.push(identity_map(shape.len()));
    types.push(consumer_arguments[inputs]);

    let region = Region::new();
    let block = region.append_block(Block::new(&types));
    let argument = |i: usize| -> Result<Value<'c, '_>> {
        Ok(block
            .argument(i)
            .map_err(|e| Error::stage(STAGE, e.to_string()))?
            .into())
    };
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    let body = |op: &OperationRef<'c, 'a>| {
        op.region(0)
            .ok()
            .and_then(|r| r.first_block())
            .ok_or_else(|| Error::stage(STAGE, "a generic without a body".to_string()))
    };
    // The consumer's arguments: the value fed along the chain, then its own inputs, then the
    // output; `first` is where its own inputs start among the new generic's arguments.
    let (fed, first) = match previous {
        Some(previous) => {
            let count = previous.operand_count() - 1;
            let mut values = (0..count).map(argument).collect::<Result<Vec<_>>>()?;
            values.push(argument(operands.len() - 1)?);
            rewriter.merge_blocks(body(&previous)?, block, &values);
            let yield_op = block
                .terminator()
                .ok_or_else(|| Error::stage(STAGE, "a generic body without a yield".to_string()))?;
            let fed = yield_op
                .operand(0)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?;
            rewriter.erase_op(yield_op);
            (Some(fed), count)
        }
        None => (None, 0),
    };
    let mut values = Vec::with_capacity(inputs + 1);
    let mut next = first;
    for i in 0..inputs {
        match fed {
            Some(fed) if i == feed => values.push(fed),
            _ => {
                values.push(argument(next)?);
                next += 1;
            }
        }
    }
    values.push(argument(operands.len() - 1)?);
    rewriter.merge_blocks(body(&consumer)?, block, &values);

    let iterators = vec!["#linalg.iterator_type<parallel>"; shape.len()].join(", ");
    let attributes = [
        ("indexing_maps", format!("[{}]", map_texts.join(", "))),
        ("iterator_types", format!("[{iterators}]")),
        ("operandSegmentSizes", format!("array<i32: {count}, 1>")),
    ];
    let result = builder.build(
        "linalg.generic",
        &operands,
        init.r#type(),
        &attributes,
        vec![region],
    )?;
    let back = steps
        .iter()
        .try_fold(result, |value, step| step.replay(&builder, value))?;
    let old: Value = consumer
        .result(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?
        .into();
    rewriter.replace_all_uses_with(old, back);
    Ok(result)
}

/// Where `product`'s result (of sizes `shape`) finds its dynamic sizes among its inputs: for
/// each, the input and its dimension that its loop indexes, through the product's indexing
/// maps or, for a named product without them, as `linalg.matmul` and `linalg.batch_matmul`
/// read (rows and batch from the left input, columns from the right one). A `tensor.dim` of the
/// result itself would be a second use of it, which keeps the schedule from fusing its
/// epilogue. `None` when an input does not show one.
fn size_sources(product: &OperationRef, shape: &[Option<i64>]) -> Option<Vec<(usize, usize)>> {
    let dynamic = (0..shape.len()).filter(|&d| shape[d].is_none());
    let Some(maps) = indexing_maps(product) else {
        let last = shape.len().checked_sub(1)?;
        return Some(dynamic.map(|d| (usize::from(d == last), d)).collect());
    };
    let inputs = maps.len().checked_sub(1)?;
    let out = map_results(*maps.last()?);
    dynamic
        .map(|d| {
            let looped = *out.get(d)?;
            matches!(looped, MapResult::Dim(_)).then_some(())?;
            (0..inputs).find_map(|i| {
                let position = map_results(maps[i]).iter().position(|&r| r == looped)?;
                Some((i, position))
            })
        })
        .collect()
}

/// Erases `ops` (unused, each used only by the ones before it), last first.
fn erase(context: &Context, ops: &[OperationRef]) {
    let rewriter = IrRewriter::new(context);
    let rewriter = rewriter.as_rewriter_base();
    for op in ops.iter().rev() {
        rewriter.erase_op(*op);
    }
}

/// Folds the chain after one product (see the module docs); returns how many generics it took
/// in.
fn fold_chain<'c, 'a>(context: &'c Context, product: OperationRef<'c, 'a>) -> Result<usize> {
    let mut head: Value = product
        .result(0)
        .map_err(|e| Error::stage(STAGE, e.to_string()))?
        .into();
    let Some((shape, element)) = tensor_sizes(head) else {
        return Ok(0);
    };
    if size_sources(&product, &shape).is_none() {
        return Ok(0);
    }
    let mut previous: Option<OperationRef> = None;
    let mut folded = 0;
    while let Some((user, operand)) = sole_use(head) {
        // Reshapes between the chain and the consumer, each the only use of the one before.
        let mut reshapes = Vec::new();
        let mut steps = Vec::new();
        let mut consumer = (user, operand);
        while RESHAPES.contains(&name(&consumer.0).as_str()) {
            let Some(step) = Step::of(&consumer.0) else {
                return Ok(folded);
            };
            reshapes.push(consumer.0);
            steps.push(step);
            let Some(next) = consumer.0.result(0).ok().and_then(|r| sole_use(r.into())) else {
                return Ok(folded);
            };
            consumer = next;
        }
        let (op, feed) = consumer;
        let Some(inputs) = chainable(&op) else {
            break;
        };
        let same_element = op
            .result(0)
            .ok()
            .and_then(|r| tensor_sizes(r.into()))
            .is_some_and(|(_, e)| e == element);
        if feed >= inputs || !same_element {
            break;
        }
        let op_maps = if reshapes.is_empty() {
            let own_maps = printed_maps(&op).unwrap_or_default();
            let direct = feeds_whole(&op, feed, shape.len())
                && tensor_dims(
                    op.result(0)
                        .map_err(|e| Error::stage(STAGE, e.to_string()))?
                        .into(),
                )
                .is_some_and(|s| s == shape);
            if !direct {
                break;
            }
            if previous.is_none() {
                // The product's direct consumer: the schedule fuses it as it is.
                previous = Some(op);
                head = op
                    .result(0)
                    .map_err(|e| Error::stage(STAGE, e.to_string()))?
                    .into();
                continue;
            }
            own_maps
        } else {
            match reshaped_maps(&op, &shape) {
                Some(m) => m,
                None => break,
            }
        };
        // The chain's value replaces the fed operand, so that operand must be read whole (the
        // reshaped maps keep an identity map the identity).
        let own_rank = tensor_dims(
            op.result(0)
                .map_err(|e| Error::stage(STAGE, e.to_string()))?
                .into(),
        )
        .map_or(0, |s| s.len());
        if !feeds_whole(&op, feed, own_rank) {
            break;
        }
        head = fold_one(context, previous, head, op, feed, op_maps, &steps)?;
        let mut dead = Vec::new();
        dead.extend(previous);
        dead.extend(reshapes);
        dead.push(op);
        erase(context, &dead);
        previous = result_owner(head);
        folded += 1;
    }
    Ok(folded)
}

/// The reshapes `value` went through, each result used only by the next (the last by
/// `value`'s one user), outermost last, and the value before them.
fn unreshaped<'c, 'a>(mut value: Value<'c, 'a>) -> (Vec<OperationRef<'c, 'a>>, Value<'c, 'a>) {
    let mut reshapes = Vec::new();
    while sole_use(value).is_some() {
        let Some(owner) = result_owner(value).filter(|op| RESHAPES.contains(&name(op).as_str()))
        else {
            break;
        };
        let Ok(source) = owner.operand(0) else {
            break;
        };
        reshapes.push(owner);
        value = source;
    }
    reshapes.reverse();
    (reshapes, value)
}

/// A graph output that is a reshape of a computed tensor (a `view` as the last op, or a chain
/// folded on its product's shape) is written through a view of the output buffer of the
/// tensor's own shape (taken at the top of the function), rather than computed into a buffer of
/// its own and copied: the fusion stage then points the producer at the output buffer.
/// Returns how many outputs it redirected.
fn outputs_through_views(context: &Context, block: BlockRef) -> Result<usize> {
    let Some(first) = block.first_operation() else {
        return Ok(0);
    };
    let mut redirected = 0;
    let mut next = block.first_operation();
    while let Some(op) = next {
        next = op.next_in_block();
        if name(&op) != "bufferization.materialize_in_destination" {
            continue;
        }
        let (Ok(source), Ok(dest)) = (op.operand(0), op.operand(1)) else {
            continue;
        };
        let (reshapes, base) = unreshaped(source);
        let Some(steps) = reshapes.iter().map(Step::of).collect::<Option<Vec<_>>>() else {
            continue;
        };
        let rank = tensor_dims(base).map_or(0, |s| s.len());
        let argument = dest.is_block_argument();
        if reshapes.is_empty()
            || !argument
            || rank == 0
            || base.is_block_argument()
            || !plain_memref(dest.r#type())
        {
            continue;
        }
        let builder = Builder {
            stage: STAGE,
            context,
            anchor: first,
            location: op.location(),
        };
        let view = steps
            .iter()
            .rev()
            .try_fold(dest, |value, step| step.undo(&builder, value))?;
        // SAFETY: `op` is live; `base` has the view's shape and element type, and both are
        // defined before `op` (the view at the top of the function).
        unsafe {
            mlirOperationSetOperand(op.to_raw(), 0, base.to_raw());
            mlirOperationSetOperand(op.to_raw(), 1, view.to_raw());
        }
        erase(context, &reshapes);
        redirected += 1;
    }
    Ok(redirected)
}

/// Whether `ty` is a memref type with the identity layout in the default memory space.
fn plain_memref(ty: Type) -> bool {
    MemRefType::try_from(ty)
        .is_ok_and(|memref| memref.memory_space().is_none() && memref.affine_map().is_identity())
}

/// Folds the elementwise chains after every `f32`/`f64` product (and every product by a
/// weight in panels, `tuning::PANEL_MAPS`) in the bodies of
/// `module`'s functions, then writes outputs that are reshapes through views of their buffers;
/// returns how many generics were taken into chains.
pub fn fold(context: &Context, module: &Module) -> Result<usize> {
    let mut folded = 0;
    let mut function = module.body().first_operation();
    while let Some(f) = function {
        function = f.next_in_block();
        let Some(block) = f.region(0).ok().and_then(|r| r.first_block()) else {
            continue;
        };
        if name(&f) != "func.func" {
            continue;
        }
        let mut products = Vec::new();
        let mut next = block.first_operation();
        while let Some(op) = next {
            next = op.next_in_block();
            let panels = || {
                op.attribute("indexing_maps")
                    .is_ok_and(|m| m.to_string() == PANEL_MAPS)
            };
            let product = match name(&op).as_str() {
                "linalg.matmul" | "linalg.batch_matmul" => true,
                "linalg.contract" => panels(),
                _ => false,
            };
            if product && op.result_count() == 1 {
                products.push(op);
            }
        }
        for product in products {
            folded += fold_chain(context, product)?;
        }
        outputs_through_views(context, block)?;
    }
    Ok(folded)
}
