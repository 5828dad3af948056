//! Nodes lowered per sample. A convolution, a pooling, a padding, a resize, a grid sample or
//! an `index` that indexes no batch computes each sample of its batch (the first dimension)
//! from that sample alone. When the batch is a symbolic size and every other size of the
//! node is fixed (a server's batches of any size, `mark_dynamic(x, 0)`), the node is lowered
//! by its row's own lowering for one sample at fixed sizes, in the body of an `scf.forall`
//! over the batch: the body slices each batched argument at the sample
//! (`tensor.extract_slice`, first size 1), computes the sample's outputs and writes them into
//! the loop's shared outputs at the sample's place (`tensor.parallel_insert_slice`). The
//! threads take whole samples (the `loops` stage hands the loop to OpenMP), and the ops of a
//! sample run on the thread that took it: the row lowers them for one thread, and the
//! schedule tiles and vectorises them as in a kernel of fixed sizes, but cuts no product in a
//! loop across threads (splitting each sample's ops across the threads instead was slower:
//! see docs/performance.md). A batch that is no multiple of the threads leaves a thread idle
//! for its last samples.

use super::emit::internal;
use super::loops::reuse;
use super::whole::tensor_refs;
use super::{Emit, LowerCtx, LowerFn, symbolic_number};
use crate::error::Result;
use crate::graph::{Arg, Graph, Node, TensorMeta, dims};
use melior::ir::{
    Block, BlockLike, Identifier, OperationRef, Region, RegionLike, Type, Value,
    operation::{OperationBuilder, OperationLike},
};
use mlir_sys::MlirOperation;

/// The ops whose rows compute every sample of the first dimension from that sample alone
/// (the pooling, padding and resize rows act on the trailing dimensions; `index` when it
/// indexes no batch: a bilinear resize Dynamo traced as gathers).
pub(super) const PER_SAMPLE_OPS: [&str; 21] = [
    "aten.convolution.default",
    "aten.max_pool2d_with_indices.default",
    "aten.max_pool3d_with_indices.default",
    "aten.avg_pool1d.default",
    "aten.avg_pool2d.default",
    "aten.avg_pool3d.default",
    "aten.adaptive_avg_pool1d.default",
    "aten._adaptive_avg_pool2d.default",
    "aten._adaptive_avg_pool3d.default",
    "aten.constant_pad_nd.default",
    "aten.reflection_pad1d.default",
    "aten.reflection_pad2d.default",
    "aten.reflection_pad3d.default",
    "aten.replication_pad2d.default",
    "aten.replication_pad3d.default",
    "aten.upsample_nearest2d.vec",
    "aten.upsample_nearest2d.default",
    "aten.upsample_bilinear2d.vec",
    "aten.upsample_bilinear2d.default",
    "aten.grid_sampler_2d.default",
    "aten.index.Tensor",
];

/// Whether `shape` is `batch` followed by fixed sizes.
fn batched(shape: &[i64], batch: i64) -> bool {
    shape.first() == Some(&batch) && !shape[1..].iter().any(|&d| dims::is_symbolic(d))
}

/// The symbolic batch `node` is lowered per sample over, if it is: its op computes samples
/// alone, its first tensor argument's first size is symbolic and its other sizes fixed, every
/// output is of that batch then fixed sizes, and every other tensor argument is either too
/// or of fixed sizes (a weight). A list of tensors (`index`'s indices) holds fixed ones and
/// indexes no batch (its first entry is `None`). No argument is a symbolic number.
pub(super) fn batch_of(graph: &Graph, node: &Node) -> Option<i64> {
    if node.lowering.is_some() {
        return None;
    }
    let refs = tensor_refs(node);
    let batch = *graph.meta(refs.first()?)?.shape.first()?;
    if !dims::is_symbolic(batch) {
        return None;
    }
    let arguments = refs
        .iter()
        .map(|r| graph.meta(r))
        .all(|m| m.is_some_and(|m| batched(&m.shape, batch) || fixed(m)));
    let outputs = node.outputs.iter().all(|m| batched(&m.shape, batch));
    let numbers = node.args.iter().any(symbolic_number);
    let lists = node.args.iter().all(|a| match a {
        Arg::List(items) => list_fits(items, graph),
        _ => true,
    });
    (arguments && outputs && lists && !numbers).then_some(batch)
}

/// Whether `meta` has no symbolic size.
fn fixed(meta: &TensorMeta) -> bool {
    !meta.shape.iter().any(|&d| dims::is_symbolic(d))
}

/// Whether a list argument holds no tensor, or tensors of fixed sizes after a `None` (the
/// indices of an `index` that indexes no batch).
fn list_fits(items: &[Arg], graph: &Graph) -> bool {
    let mut refs = items.iter().filter_map(|i| match i {
        Arg::Ref(r) => Some(r),
        _ => None,
    });
    let first_is_none = matches!(items.first(), Some(Arg::None));
    refs.clone().next().is_none()
        || (first_is_none && refs.all(|r| graph.meta(r).is_some_and(fixed)))
}

/// `meta` for one sample: its first size 1.
fn one_sample(meta: &TensorMeta) -> TensorMeta {
    let mut shape = meta.shape.clone();
    shape[0] = 1;
    TensorMeta {
        shape,
        ..meta.clone()
    }
}

/// Lowers `node` (of batch `batch`, see [`batch_of`]) with `lower` for one sample into `body`,
/// which becomes the body of an `scf.forall` over the batch whose shared outputs are the
/// node's outputs; returns the loop's results. The loop is written with no body: [`attach`]
/// gives it `body` once the graph function is lowered.
pub(super) fn lower<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    batch: i64,
    body: &'a Block<'c>,
    lower: &LowerFn,
) -> Result<Vec<Value<'c, 'a>>> {
    let refs = tensor_refs(node);
    let output_types = node
        .outputs
        .iter()
        .map(|m| ctx.e.tensor_type(&m.shape, m.dtype))
        .collect::<Result<Vec<_>>>()?;
    let index = Type::index(ctx.e.context);
    let at = body.add_argument(index, ctx.e.loc);
    let shared: Vec<Value> = output_types
        .iter()
        .map(|&t| body.add_argument(t, ctx.e.loc))
        .collect();
    // While the node lowers, its batched arguments are their slices at the sample, of one
    // sample's sizes, and it writes into the loop's body.
    let graph_block = std::mem::replace(&mut ctx.e.block, body);
    let mut saved = Vec::with_capacity(refs.len());
    for r in refs {
        let meta = ctx.meta_of(r)?;
        if meta.shape[0] != batch || saved.iter().any(|(s, _, _)| s == r) {
            continue;
        }
        let slice = ctx
            .e
            .extract_at(ctx.value(r)?, &meta.shape, 0, at, Some(1), meta.dtype)?;
        let sample = one_sample(meta).shape;
        saved.push((
            r.clone(),
            ctx.values.insert(r.clone(), slice),
            ctx.shapes.insert(r.clone(), sample),
        ));
    }
    let outputs = std::mem::replace(
        &mut ctx.node_outputs,
        node.outputs.iter().map(one_sample).collect(),
    );
    let target = std::mem::replace(&mut ctx.target, ctx.one_thread);
    let results = lower(ctx, node);
    ctx.target = target;
    ctx.node_outputs = outputs;
    for (r, value, shape) in saved.into_iter().rev() {
        match value {
            Some(v) => ctx.values.insert(r.clone(), v),
            None => ctx.values.remove(&r),
        };
        match shape {
            Some(s) => ctx.shapes.insert(r, s),
            None => ctx.shapes.remove(&r),
        };
    }
    // The sample's outputs go into the loop's shared outputs at the sample.
    let written = results.and_then(|results| {
        if results.len() != node.outputs.len() {
            return Err(internal(format!(
                "one sample's lowering produced {} values for {} outputs",
                results.len(),
                node.outputs.len()
            )));
        }
        let writes = Block::new(&[]);
        {
            let w = Emit {
                block: &writes,
                ..ctx.e
            };
            for ((value, &into), meta) in results.into_iter().zip(&shared).zip(&node.outputs) {
                let place = (0, reuse(at), Some(1));
                w.insert_at(reuse(value), reuse(into), &meta.shape, place, true)?;
            }
        }
        let region = Region::new();
        region.append_block(writes);
        let terminator = OperationBuilder::new("scf.forall.in_parallel", ctx.e.loc)
            .add_regions_vec(vec![region])
            .build()
            .map_err(|err| internal(format!("scf.forall.in_parallel: {err}")))?;
        ctx.e.block.append_operation(terminator);
        Ok(())
    });
    ctx.e.block = graph_block;
    written?;

    let e = &ctx.e;
    let mut operands = vec![e.size(batch)?];
    for m in &node.outputs {
        operands.push(e.empty(&m.shape, m.dtype)?);
    }
    let attributes = [
        ("staticLowerBound", "array<i64: 0>".to_string()),
        // ShapedType::kDynamic: the upper bound is the operand.
        ("staticUpperBound", format!("array<i64: {}>", i64::MIN)),
        ("staticStep", "array<i64: 1>".to_string()),
        (
            "operandSegmentSizes",
            format!("array<i32: 0, 1, 0, {}>", node.outputs.len()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| Ok((Identifier::new(e.context, k), e.attr(&v)?)))
    .collect::<Result<Vec<_>>>()?;
    let op = OperationBuilder::new("scf.forall", e.loc)
        .add_operands(&operands)
        .add_results(&output_types)
        .add_regions([Region::new()])
        .add_attributes(&attributes)
        .build()
        .map_err(|err| internal(format!("scf.forall: {err}")))?;
    let op = e.block.append_operation(op);
    ctx.loops.push(op.to_raw());
    (0..op.result_count())
        .map(|i| op.result(i).map(Into::into).map_err(internal))
        .collect()
}

/// Gives each loop over a batch written by [`lower`] (`loops`, in order) its body (`bodies`, in
/// the same order).
pub(super) fn attach<'c>(loops: &[MlirOperation], bodies: Vec<Block<'c>>) -> Result<()> {
    if loops.len() != bodies.len() {
        return Err(internal(format!(
            "{} loops over a batch for {} bodies",
            loops.len(),
            bodies.len()
        )));
    }
    for (&raw, body) in loops.iter().zip(bodies) {
        // SAFETY: `raw` is a live `scf.forall` of the graph function, written by `lower` with one
        // empty region; the function is not yet verified or used.
        let op = unsafe { OperationRef::from_raw(raw) };
        op.region(0).map_err(internal)?.append_block(body);
    }
    Ok(())
}
