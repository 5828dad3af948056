//! Collectives family: the ops of PyTorch's functional c10d API
//! (`torch.distributed._functional_collectives`, `_c10d_functional.*`) compiled in place, so
//! that a graph using them is one kernel rather than partitions cut around them.
//!
//! Each collective node becomes an op of fxmlir's dialect (`fxmlir.all_reduce`,
//! `fxmlir.all_gather`, …), its non-tensor arguments as attributes named as in the schema: a
//! vendor's stage before `expand` may replace it with its own. Its decomposition copies the
//! input into a fresh contiguous buffer and calls back into the kernel's host
//! ([`LowerCtx::call_host`]) with that buffer and the output's; the host (the Python call path,
//! `fxmlir.collectives`) runs the same functional op in PyTorch's c10d on views of the two
//! buffers and waits for it. A collective is therefore complete when the call returns: the
//! collectives run in graph order, on the calling thread, and `wait_tensor` is the identity.

use super::{LowerCtx, Registry, Whole, fail};
use crate::error::Result;
use crate::graph::{Arg, Node, contiguous_strides};
use melior::ir::{Attribute, Value};

/// ATen overload → the op of fxmlir's dialect it becomes, and whether the collective works
/// in place on one buffer (the input's copy is the output).
const COLLECTIVES: [(&str, &str, bool); 5] = [
    (
        "_c10d_functional.all_reduce.default",
        "fxmlir.all_reduce",
        true,
    ),
    (
        "_c10d_functional.broadcast.default",
        "fxmlir.broadcast",
        true,
    ),
    (
        "_c10d_functional.all_gather_into_tensor.default",
        "fxmlir.all_gather",
        false,
    ),
    (
        "_c10d_functional.reduce_scatter_tensor.default",
        "fxmlir.reduce_scatter",
        false,
    ),
    (
        "_c10d_functional.all_to_all_single.default",
        "fxmlir.all_to_all",
        false,
    ),
];

/// The wait on a collective's result.
const WAIT: &str = "_c10d_functional.wait_tensor.default";

pub(super) fn register(r: &mut Registry) {
    for (target, op, in_place) in COLLECTIVES {
        r.add_host(target, Whole { op, attributes }, move |ctx, node| {
            lower_collective(ctx, node, in_place)
        });
    }
    r.add(WAIT, lower_wait);
}

/// The op's attributes: each argument after the input tensor, under its schema name (a
/// string, an integer or a list of integers).
fn attributes(_: &LowerCtx, node: &Node) -> Result<Vec<(&'static str, String)>> {
    const NAMES: [&str; 6] = [
        "reduce_op",
        "group_name",
        "group_size",
        "src",
        "output_split_sizes",
        "input_split_sizes",
    ];
    let mut out = Vec::new();
    for (arg, name) in node.args.iter().zip(&node.arg_names).skip(1) {
        let Some(&known) = NAMES.iter().find(|n| *n == name) else {
            return fail(format!("unexpected argument `{name}`"));
        };
        let text = match arg {
            Arg::Str(s) => string_literal(s),
            Arg::Int(v) => format!("{v} : i64"),
            Arg::List(items) => {
                let values = items
                    .iter()
                    .map(|item| match item {
                        Arg::Int(v) => Ok(v.to_string()),
                        _ => fail(format!("argument `{name}` holds a non-integer")),
                    })
                    .collect::<Result<Vec<_>>>()?;
                match values.is_empty() {
                    true => "array<i64>".to_string(),
                    false => format!("array<i64: {}>", values.join(", ")),
                }
            }
            _ => {
                return fail(format!(
                    "argument `{name}` is neither a string nor integers"
                ));
            }
        };
        out.push((known, text));
    }
    Ok(out)
}

/// `s` as an MLIR string literal: printable ASCII as it is, other bytes (and the quote and
/// backslash) as `\XX`.
fn string_literal(s: &str) -> String {
    let mut text = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => text.push_str(&format!("\\{b:02X}")),
            0x20..=0x7e => text.push(b as char),
            _ => text.push_str(&format!("\\{b:02X}")),
        }
    }
    text.push('"');
    text
}

/// `bufferization.alloc_tensor`, a copy of `copy` when given: a buffer of its own,
/// contiguous whatever the layout of what it copies.
fn fresh<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    shape: &[i64],
    dtype: crate::graph::DType,
    copy: Option<Value<'c, 'a>>,
) -> Result<Value<'c, 'a>> {
    let e = &ctx.e;
    let segments = e.attr(&format!("array<i32: 0, {}, 0>", i32::from(copy.is_some())))?;
    let operands: Vec<Value> = copy.into_iter().collect();
    e.op1(
        "bufferization.alloc_tensor",
        &operands,
        e.tensor_type(shape, dtype)?,
        &[("operandSegmentSizes", segments)],
    )
}

/// The buffer of the fresh tensor `t`, as an identity-layout memref.
fn buffer<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: Value<'c, 'a>,
    shape: &[i64],
    dtype: crate::graph::DType,
) -> Result<Value<'c, 'a>> {
    let e = &ctx.e;
    let ty = e.ty(&super::emit::memref_type_text(
        shape,
        &contiguous_strides(shape),
        dtype,
    ))?;
    e.op1("bufferization.to_buffer", &[t], ty, &[])
}

fn lower_collective<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    in_place: bool,
) -> Result<Vec<Value<'c, 'a>>> {
    let input = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if out.dtype != input.dtype {
        return fail(format!(
            "the output is {} but the input {}",
            out.dtype.name(),
            input.dtype.name()
        ));
    }
    let source_tensor = fresh(ctx, &input.shape, input.dtype, Some(input.value))?;
    let source = buffer(ctx, source_tensor, &input.shape, input.dtype)?;
    let target = if in_place {
        if out.shape != input.shape {
            return fail("an in-place collective changes the shape".to_string());
        }
        source
    } else {
        let t = fresh(ctx, &out.shape, out.dtype, None)?;
        buffer(ctx, t, &out.shape, out.dtype)?
    };
    ctx.call_host(source, target)?;
    let unit = Attribute::unit(ctx.e.context);
    let result = ctx.e.op1(
        "bufferization.to_tensor",
        &[target],
        ctx.e.tensor_type(&out.shape, out.dtype)?,
        &[("restrict", unit), ("writable", unit)],
    )?;
    Ok(vec![result])
}

/// `wait_tensor` of a collective of this graph, which is complete when its host call
/// returns: the identity. A wait on anything else (a collective that ran outside the
/// kernel) cannot be compiled.
fn lower_wait<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let waited = ctx.producer(node, 0);
    if !waited.is_some_and(|n| COLLECTIVES.iter().any(|(t, _, _)| *t == n.target)) {
        return fail(
            "it waits on a value no collective of this graph computes (the collective runs \
             outside the kernel)"
                .to_string(),
        );
    }
    Ok(vec![ctx.tensor(node, 0)?.value])
}
