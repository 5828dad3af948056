//! Pooling: max pooling with indices (2-D, 3-D), average pooling (1-D to 3-D) and adaptive
//! average pooling (1-D to 3-D), over any leading (batch, channel) dimensions.
//!
//! Windows are read through affine maps from a padded copy of the input ([`place`]); what
//! depends on the window position but not on the data is computed here at compile time as
//! small constant tables: for max pooling the input position of each (output, kernel) tap (-1
//! for padding), for average pooling the divisor factor of each output position, for adaptive
//! pooling which taps of the widest window each output uses. The formulas are PyTorch's
//! (`Pool.h`, `AdaptivePooling.h`, the CPU kernels): max pooling takes the first maximum and
//! propagates NaN (a later NaN wins), average pooling divides once by the window's divisor,
//! adaptive pooling divides by each dimension's window length in turn.

use super::elements::linalg_index_i64;
use super::window::{
    Ints, check_shape, computed_table, dims, extent, int_table, per_dim, place, taps,
};
use super::{Iter, LowerCtx, Registry, Scalar, Tensor, fail};
use crate::error::Result;
use crate::graph::{DType, Node, dims as sizes};
use crate::pipeline::ir::maps::affine_map;
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add("aten.max_pool2d_with_indices.default", |ctx, node| {
        lower_max_pool(ctx, node, 2)
    });
    r.add("aten.max_pool3d_with_indices.default", |ctx, node| {
        lower_max_pool(ctx, node, 3)
    });
    r.add("aten.avg_pool1d.default", |ctx, node| {
        lower_avg_pool(ctx, node, 1)
    });
    r.add("aten.avg_pool2d.default", |ctx, node| {
        lower_avg_pool(ctx, node, 2)
    });
    r.add("aten.avg_pool3d.default", |ctx, node| {
        lower_avg_pool(ctx, node, 3)
    });
    r.add("aten.adaptive_avg_pool1d.default", |ctx, node| {
        lower_adaptive_avg_pool(ctx, node, 1)
    });
    r.add("aten._adaptive_avg_pool2d.default", |ctx, node| {
        lower_adaptive_avg_pool(ctx, node, 2)
    });
    r.add("aten._adaptive_avg_pool3d.default", |ctx, node| {
        lower_adaptive_avg_pool(ctx, node, 3)
    });
}

/// Kernel size, stride, padding, dilation and ceil mode, one value per pooled dimension.
struct Window {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    ceil_mode: bool,
}

impl Window {
    /// `pooling_output_shape_pad_lr` of `Pool.h`.
    fn output_size(&self, i: usize, input: i64) -> i64 {
        let (k, s, p, d) = (
            self.kernel[i],
            self.stride[i],
            self.padding[i],
            self.dilation[i],
        );
        let numerator = input + 2 * p - d * (k - 1) - 1 + if self.ceil_mode { s - 1 } else { 0 };
        let mut size = numerator.div_euclid(s) + 1;
        if self.ceil_mode && (size - 1) * s >= input + p {
            size -= 1;
        }
        size
    }

    /// Input extent the windows read, in padded coordinates.
    fn extent(&self, i: usize, output: i64) -> i64 {
        extent(output, self.kernel[i], self.stride[i], self.dilation[i])
    }

    /// The output sizes of pooling `input` (whose pooled sizes are `spatial`) where the graph
    /// records `recorded`. Fixed sizes are computed (and must be positive); symbolic ones are
    /// the recorded ones, checked against `pooling_output_shape` as a polynomial (not in ceil
    /// mode, whose test of the last window no polynomial writes: there the graph's tracing
    /// computed them).
    fn output_sizes(&self, input: &[i64], spatial: &[i64], recorded: &[i64]) -> Result<Vec<i64>> {
        let nd = spatial.len();
        if !spatial
            .iter()
            .chain(recorded)
            .any(|&d| sizes::is_symbolic(d))
        {
            let out: Vec<i64> = (0..nd).map(|i| self.output_size(i, spatial[i])).collect();
            if out.iter().any(|&o| o <= 0) {
                return fail(format!(
                    "output size {out:?} is too small for input shape {input:?}"
                ));
            }
            return Ok(out);
        }
        if !self.ceil_mode {
            let mut out = Vec::with_capacity(nd);
            for (i, &size) in spatial.iter().enumerate() {
                let reach = self.dilation[i] * (self.kernel[i] - 1);
                let span = sizes::sum(size, 2 * self.padding[i] - reach - 1)?;
                out.push(sizes::sum(sizes::floor_div(span, self.stride[i])?, 1)?);
            }
            check_shape(recorded, &out)?;
        }
        Ok(recorded.to_vec())
    }

    /// The padded canvas the windows read, `shape[..lead]` then per pooled dimension the
    /// extent the windows read; with symbolic sizes, at least the whole padded input (a
    /// canvas of symbolic sizes holds its input whole).
    fn canvas(&self, shape: &[i64], lead: usize, out_spatial: &[i64]) -> Result<Vec<i64>> {
        let mut canvas = shape[..lead].to_vec();
        for (i, &o) in out_spatial.iter().enumerate() {
            let input = shape[lead + i];
            if !sizes::is_symbolic(o) && !sizes::is_symbolic(input) {
                canvas.push(self.extent(i, o));
                continue;
            }
            let last = sizes::product(&[sizes::sum(o, -1)?, self.stride[i]])?;
            let extent = sizes::sum(last, self.dilation[i] * (self.kernel[i] - 1) + 1)?;
            let padded = sizes::sum(input, 2 * self.padding[i])?;
            canvas.push(sizes::larger(extent, padded));
        }
        Ok(canvas)
    }
}

/// Reads and checks the window arguments at `at` (kernel, stride, padding, then dilation when
/// `dilated`; the ceil mode follows).
fn window(ctx: &LowerCtx<'_, '_>, node: &Node, nd: usize, dilated: bool) -> Result<Window> {
    let kernel = per_dim(ctx.int_list(node, 1)?, nd, "kernel_size")?;
    let stride = match ctx.opt_int_list(node, 2)? {
        None => kernel.clone(),
        Some(s) => per_dim(s, nd, "stride")?,
    };
    let padding = per_dim(ctx.int_list(node, 3)?, nd, "padding")?;
    let (dilation, ceil_at) = if dilated {
        (per_dim(ctx.int_list(node, 4)?, nd, "dilation")?, 5)
    } else {
        (vec![1; nd], 4)
    };
    let ceil_mode = ctx.bool(node, ceil_at)?;
    for i in 0..nd {
        if kernel[i] <= 0 || stride[i] <= 0 || dilation[i] <= 0 {
            return fail(format!(
                "kernel_size {kernel:?}, stride {stride:?} and dilation {dilation:?} must be positive"
            ));
        }
        let effective = dilation[i] * (kernel[i] - 1) + 1;
        if padding[i] < 0 || padding[i] > effective / 2 {
            return fail(format!(
                "padding {padding:?} must be non-negative and at most half the kernel size {kernel:?}"
            ));
        }
    }
    Ok(Window {
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode,
    })
}

/// The leading (non-pooled) dimensions of an input to `nd`-D pooling.
fn leading(shape: &[i64], nd: usize) -> Result<usize> {
    let rank = shape.len();
    if rank != nd + 1 && rank != nd + 2 {
        return fail(format!(
            "expected a {}-D or {}-D input, got shape {shape:?}",
            nd + 1,
            nd + 2
        ));
    }
    if shape[rank - nd..].contains(&0) {
        return fail(format!(
            "the pooled dimensions of shape {shape:?} must not be empty"
        ));
    }
    Ok(rank - nd)
}

/// Whether every size of `s` is fixed.
fn fixed(s: &[i64]) -> bool {
    !s.iter().any(|&d| sizes::is_symbolic(d))
}

fn lowest(dtype: DType) -> Scalar {
    match dtype {
        d if d.is_float() => Scalar::Float(f64::NEG_INFINITY),
        DType::Uint8 | DType::Bool => Scalar::Int(0),
        DType::Int8 => Scalar::Int(i8::MIN as i64),
        DType::Int16 => Scalar::Int(i16::MIN as i64),
        DType::Int32 => Scalar::Int(i32::MIN as i64),
        _ => Scalar::Int(i64::MIN),
    }
}

fn lower_max_pool<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    nd: usize,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let lead = leading(&x.shape, nd)?;
    let win = window(ctx, node, nd, true)?;
    let spatial = x.shape[lead..].to_vec();
    let (values, indices) = (ctx.out(0)?.clone(), ctx.out(1)?.clone());
    let recorded = values.shape.get(lead..).unwrap_or_default();
    let out_spatial = win.output_sizes(&x.shape, &spatial, recorded)?;
    let mut shape = x.shape[..lead].to_vec();
    shape.extend(&out_spatial);
    check_shape(&values.shape, &shape)?;
    check_shape(&indices.shape, &shape)?;
    if values.dtype != x.dtype || indices.dtype != DType::Int64 {
        return fail("max pooling returns the input dtype and int64 indices");
    }
    if x.dtype.is_bool() {
        return fail("max pooling of bool tensors is not supported");
    }
    if shape.contains(&0) {
        return Ok(vec![
            ctx.e.empty(&shape, x.dtype)?,
            ctx.e.empty(&shape, DType::Int64)?,
        ]);
    }
    let canvas = win.canvas(&x.shape, lead, &out_spatial)?;
    let mut offsets = vec![0; lead];
    offsets.extend(&win.padding);
    let padded = place(
        ctx,
        &x,
        lowest(x.dtype),
        &canvas,
        &offsets,
        &vec![1; lead + nd],
    )?;

    // Loops: lead…, o…, k…. positions[i][o, k]: the input index of the tap, -1 in padding.
    let rank = lead + 2 * nd;
    let o = |i: usize| lead + i;
    let k = |i: usize| lead + nd + i;
    let mut inputs = Vec::new();
    let mut read = dims(0..lead);
    read.extend(taps(&win.stride, &win.dilation, o, k));
    inputs.push((padded.value, affine_map(rank, &read)));
    let write = affine_map(rank, &dims(0..lead + nd));
    let best = ctx.e.splat(&shape, x.dtype, lowest(x.dtype))?;
    let mut iters = vec![Iter::Parallel; lead + nd];
    iters.extend(vec![Iter::Reduction; nd]);
    let dtype = x.dtype;
    if !ctx.used(node, 1) {
        // The maximum alone (padding holds the lowest value, which never wins over an input
        // tap): no position tables, no index to carry. The window operand carries the kernel
        // extent, as in average pooling.
        let window = ctx.e.empty(&win.kernel, dtype)?;
        let reads = [
            inputs[0].clone(),
            (window, affine_map(rank, &dims(k(0)..rank))),
        ];
        let values = ctx.e.generic(&reads, &[(best, write)], &iters, |b, v| {
            let mut better = b.compare("gt", v[0], v[2], dtype)?;
            if dtype.is_float() {
                let nan = b.cmpf("uno", v[0], v[0])?;
                better = b.same("arith.ori", &[better, nan])?;
            }
            Ok(vec![b.select(better, v[0], v[2])?])
        })?[0];
        return Ok(vec![values, ctx.e.empty(&shape, DType::Int64)?]);
    }
    for i in 0..nd {
        let (stride, padding, dilation) = (win.stride[i], win.padding[i], win.dilation[i]);
        let table_shape = [out_spatial[i], win.kernel[i]];
        let t = if fixed(&[spatial[i], out_spatial[i]]) {
            let mut positions = Vec::new();
            for out_pos in 0..out_spatial[i] {
                for tap in 0..win.kernel[i] {
                    let p = out_pos * stride - padding + tap * dilation;
                    positions.push(if (0..spatial[i]).contains(&p) { p } else { -1 });
                }
            }
            int_table(&ctx.e, &positions, &table_shape)?
        } else {
            let size = spatial[i];
            computed_table(&ctx.e, &table_shape, |n, at| {
                let first = n.affine(at[0], stride, -padding)?;
                let p = n.op("addi", first, n.op("muli", at[1], n.constant(dilation)?)?)?;
                let above = n.compare("ge", p, n.constant(0)?)?;
                let below = n.compare("lt", p, n.size(size)?)?;
                let inside = n.op("andi", above, below)?;
                n.select(inside, p, n.constant(-1)?)
            })?
        };
        inputs.push((t, affine_map(rank, &dims([o(i), k(i)]))));
    }
    let none = ctx.e.splat(&shape, DType::Int64, Scalar::Int(-1))?;
    let results = ctx.e.generic(
        &inputs,
        &[(best, write.clone()), (none, write)],
        &iters,
        |b, v| {
            let (value, current, current_index) = (v[0], v[nd + 1], v[nd + 2]);
            let zero = b.constant(Scalar::Int(0), DType::Int64)?;
            let mut valid = b.compare("ge", v[1], zero, DType::Int64)?;
            let mut flat = v[1];
            for i in 1..nd {
                let ok = b.compare("ge", v[1 + i], zero, DType::Int64)?;
                valid = b.same("arith.andi", &[valid, ok])?;
                let size = Ints(b).size(spatial[i])?;
                flat = b.same("arith.muli", &[flat, size])?;
                flat = b.same("arith.addi", &[flat, v[1 + i]])?;
            }
            let mut better = b.compare("gt", value, current, dtype)?;
            if dtype.is_float() {
                let nan = b.cmpf("uno", value, value)?;
                better = b.same("arith.ori", &[better, nan])?;
            }
            let none = b.constant(Scalar::Int(-1), DType::Int64)?;
            let first = b.compare("eq", current_index, none, DType::Int64)?;
            let take = b.same("arith.ori", &[first, better])?;
            let take = b.same("arith.andi", &[valid, take])?;
            Ok(vec![
                b.select(take, value, current)?,
                b.select(take, flat, current_index)?,
            ])
        },
    )?;
    // With dilation a window can miss the input entirely (e.g. taps at -1 and 1 of a size-1
    // dimension). PyTorch then returns the lowest value and the flat index of the window's
    // clipped start (`start = o s - p`, raised by the dilation until non-negative), even
    // where that lies outside the input.
    // Symbolic sizes: the windows of a dimension without dilation never miss the input
    // (padding is at most half the kernel); with it, they may.
    let starts: Vec<Option<Vec<i64>>> = (0..nd)
        .map(|i| {
            fixed(&[spatial[i], out_spatial[i]]).then(|| {
                (0..out_spatial[i])
                    .map(|o| {
                        let mut start = o * win.stride[i] - win.padding[i];
                        while start < 0 {
                            start += win.dilation[i];
                        }
                        start
                    })
                    .collect()
            })
        })
        .collect();
    let missing = (0..nd).any(|i| match &starts[i] {
        Some(starts) => starts.iter().any(|&start| start >= spatial[i]),
        None => win.dilation[i] > 1,
    });
    if !missing {
        return Ok(results);
    }
    let rank = lead + nd;
    let mut inputs = vec![(results[1], super::emit::identity_map(rank))];
    for (i, start) in starts.iter().enumerate() {
        let (stride, padding, dilation) = (win.stride[i], win.padding[i], win.dilation[i]);
        let t = match start {
            Some(start) => int_table(&ctx.e, start, &[out_spatial[i]])?,
            // o s - p, raised by whole dilations until it is not negative.
            None => computed_table(&ctx.e, &[out_spatial[i]], |n, at| {
                let start = n.affine(at[0], stride, -padding)?;
                let short = n.op("subi", n.constant(0)?, start)?;
                let steps = n.op(
                    "divsi",
                    n.affine(short, 1, dilation - 1)?,
                    n.constant(dilation)?,
                )?;
                let raised = n.op("addi", start, n.op("muli", steps, n.constant(dilation)?)?)?;
                let negative = n.compare("lt", start, n.constant(0)?)?;
                n.select(negative, raised, start)
            })?,
        };
        inputs.push((t, affine_map(rank, &dims([lead + i]))));
    }
    let init = ctx.e.empty(&shape, DType::Int64)?;
    let fixed = ctx.e.generic(
        &inputs,
        &[(init, super::emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let mut flat = v[1];
            for i in 1..nd {
                let size = Ints(b).size(spatial[i])?;
                flat = b.same("arith.muli", &[flat, size])?;
                flat = b.same("arith.addi", &[flat, v[1 + i]])?;
            }
            let none = b.constant(Scalar::Int(-1), DType::Int64)?;
            let empty = b.compare("eq", v[0], none, DType::Int64)?;
            Ok(vec![b.select(empty, flat, v[0])?])
        },
    )?[0];
    Ok(vec![results[0], fixed])
}

fn lower_avg_pool<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    nd: usize,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let lead = leading(&x.shape, nd)?;
    let win = window(ctx, node, nd, false)?;
    let include_pad = ctx.bool(node, 5)?;
    let divisor_override = if nd == 1 { None } else { ctx.opt_int(node, 6)? };
    if divisor_override == Some(0) {
        return fail("divisor_override must not be zero");
    }
    let out = ctx.out(0)?.clone();
    let spatial = x.shape[lead..].to_vec();
    let recorded = out.shape.get(lead..).unwrap_or_default();
    let out_spatial = win.output_sizes(&x.shape, &spatial, recorded)?;
    let mut shape = x.shape[..lead].to_vec();
    shape.extend(&out_spatial);
    check_shape(&out.shape, &shape)?;
    if out.dtype != x.dtype || x.dtype.is_bool() {
        return fail("average pooling keeps the (non-bool) input dtype");
    }
    if shape.contains(&0) {
        return Ok(vec![ctx.e.empty(&shape, out.dtype)?]);
    }
    let acc = if x.dtype.is_float() {
        x.dtype.compute()
    } else {
        DType::Int64
    };
    let canvas = win.canvas(&x.shape, lead, &out_spatial)?;
    let mut offsets = vec![0; lead];
    offsets.extend(&win.padding);
    let padded = place(
        ctx,
        &x,
        Scalar::Int(0),
        &canvas,
        &offsets,
        &vec![1; lead + nd],
    )?;

    let rank = lead + 2 * nd;
    let mut read = dims(0..lead);
    read.extend((0..nd).map(|i| format!("d{} * {} + d{}", lead + i, win.stride[i], lead + nd + i)));
    let write = affine_map(rank, &dims(0..lead + nd));
    let zero = ctx.e.splat(&shape, acc, Scalar::Int(0))?;
    let mut iters = vec![Iter::Parallel; lead + nd];
    iters.extend(vec![Iter::Reduction; nd]);
    let from = x.dtype;
    let float = acc.is_float();
    // The window operand carries the kernel extent (a loop no other operand spans), as
    // linalg's named pooling ops do; its values are never read.
    let window = ctx.e.empty(&win.kernel, acc)?;
    let sum = ctx.e.generic(
        &[
            (padded.value, affine_map(rank, &read)),
            (window, affine_map(rank, &dims(lead + nd..rank))),
        ],
        &[(zero, write)],
        &iters,
        |b, v| {
            let xv = b.convert(v[0], from, acc)?;
            let add = if float { "arith.addf" } else { "arith.addi" };
            Ok(vec![b.same(add, &[v[2], xv])?])
        },
    )?[0];

    // factor[i][o]: 0 for a window with no input element (the output is 0), else the
    // dimension's share of the divisor (1 under divisor_override).
    let rank = lead + nd;
    let mut inputs = vec![(sum, super::emit::identity_map(rank))];
    for i in 0..nd {
        let (kernel, stride, padding) = (win.kernel[i], win.stride[i], win.padding[i]);
        if !fixed(&[spatial[i], out_spatial[i]]) {
            let size = spatial[i];
            let t = computed_table(&ctx.e, &[out_spatial[i]], |n, at| {
                let start = n.affine(at[0], stride, -padding)?;
                let beyond = n.op("addi", n.size(size)?, n.constant(padding)?)?;
                let end = n.op("minsi", n.op("addi", start, n.constant(kernel)?)?, beyond)?;
                let inside = n.op("maxsi", start, n.constant(0)?)?;
                let len = n.op("subi", n.op("minsi", end, n.size(size)?)?, inside)?;
                let factor = match (divisor_override, include_pad) {
                    (Some(_), _) => n.constant(1)?,
                    (None, true) => n.op("subi", end, start)?,
                    (None, false) => len,
                };
                let empty = n.compare("le", len, n.constant(0)?)?;
                n.select(empty, n.constant(0)?, factor)
            })?;
            inputs.push((t, affine_map(rank, &dims([lead + i]))));
            continue;
        }
        let factors: Vec<i64> = (0..out_spatial[i])
            .map(|o| {
                let start = o * win.stride[i] - win.padding[i];
                let end = (start + win.kernel[i]).min(spatial[i] + win.padding[i]);
                let pool = end - start;
                let len = end.min(spatial[i]) - start.max(0);
                if len <= 0 {
                    0
                } else if divisor_override.is_some() {
                    1
                } else if include_pad {
                    pool
                } else {
                    len
                }
            })
            .collect();
        let t = int_table(&ctx.e, &factors, &[out_spatial[i]])?;
        inputs.push((t, affine_map(rank, &dims([lead + i]))));
    }
    let init = ctx.e.empty(&shape, out.dtype)?;
    let out_dtype = out.dtype;
    let result = ctx.e.generic(
        &inputs,
        &[(init, super::emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let mut product = v[1];
            for f in &v[2..=nd] {
                product = b.same("arith.muli", &[product, *f])?;
            }
            let zero = b.constant(Scalar::Int(0), DType::Int64)?;
            let one = b.constant(Scalar::Int(1), DType::Int64)?;
            let empty = b.compare("eq", product, zero, DType::Int64)?;
            let divisor = match divisor_override {
                Some(d) => b.constant(Scalar::Int(d), DType::Int64)?,
                None => product,
            };
            let divisor = b.select(empty, one, divisor)?;
            let divisor = b.convert(divisor, DType::Int64, acc)?;
            let div = if float { "arith.divf" } else { "arith.divsi" };
            let r = b.same(div, &[v[0], divisor])?;
            Ok(vec![b.convert(r, acc, out_dtype)?])
        },
    )?;
    Ok(result)
}

fn lower_adaptive_avg_pool<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    nd: usize,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let lead = leading(&x.shape, nd)?;
    let out_spatial = ctx.int_list(node, 1)?;
    if out_spatial.len() != nd || out_spatial.iter().any(|&o| o < 0) {
        return fail(format!(
            "output_size must be {nd} non-negative values, got {out_spatial:?}"
        ));
    }
    let out = ctx.out(0)?.clone();
    let mut shape = x.shape[..lead].to_vec();
    shape.extend(&out_spatial);
    check_shape(&out.shape, &shape)?;
    if out.dtype != x.dtype || !x.dtype.is_float() {
        return fail("adaptive average pooling needs a floating-point input");
    }
    if shape.contains(&0) {
        return Ok(vec![ctx.e.empty(&shape, out.dtype)?]);
    }
    let spatial = x.shape[lead..].to_vec();
    if !fixed(&spatial) {
        return symbolic_adaptive(ctx, &x, lead, &out_spatial, out.dtype);
    }
    // start = floor(o·in/out), end = ceil((o+1)·in/out).
    let start = |o: i64, i: usize| o * spatial[i] / out_spatial[i];
    let end = |o: i64, i: usize| ((o + 1) * spatial[i] + out_spatial[i] - 1) / out_spatial[i];
    let widest: Vec<i64> = (0..nd)
        .map(|i| {
            (0..out_spatial[i])
                .map(|o| end(o, i) - start(o, i))
                .max()
                .unwrap_or(1)
        })
        .collect();
    let mut canvas = x.shape[..lead].to_vec();
    canvas.extend((0..nd).map(|i| spatial[i].max(start(out_spatial[i] - 1, i) + widest[i])));
    let padded = place(
        ctx,
        &x,
        Scalar::Int(0),
        &canvas,
        &vec![0; lead + nd],
        &vec![1; lead + nd],
    )?;
    let acc = x.dtype.compute();

    let rank = lead + 2 * nd;
    let o = |i: usize| lead + i;
    let k = |i: usize| lead + nd + i;
    let mut read = dims(0..lead);
    read.extend((0..nd).map(|i| {
        format!(
            "(d{} * {}) floordiv {} + d{}",
            o(i),
            spatial[i],
            out_spatial[i],
            k(i)
        )
    }));
    let mut inputs = vec![(padded.value, affine_map(rank, &read))];
    for i in 0..nd {
        let mut taps = Vec::new();
        for out_pos in 0..out_spatial[i] {
            let len = end(out_pos, i) - start(out_pos, i);
            taps.extend((0..widest[i]).map(|t| i64::from(t < len)));
        }
        let t = int_table(&ctx.e, &taps, &[out_spatial[i], widest[i]])?;
        inputs.push((t, affine_map(rank, &dims([o(i), k(i)]))));
    }
    let write = affine_map(rank, &dims(0..lead + nd));
    let zero = ctx.e.splat(&shape, acc, Scalar::Float(0.0))?;
    let mut iters = vec![Iter::Parallel; lead + nd];
    iters.extend(vec![Iter::Reduction; nd]);
    let from = x.dtype;
    let sum = ctx.e.generic(&inputs, &[(zero, write)], &iters, |b, v| {
        let zero = b.constant(Scalar::Int(0), DType::Int64)?;
        let mut valid = b.compare("ne", v[1], zero, DType::Int64)?;
        for t in &v[2..=nd] {
            let ok = b.compare("ne", *t, zero, DType::Int64)?;
            valid = b.same("arith.andi", &[valid, ok])?;
        }
        let xv = b.convert(v[0], from, acc)?;
        let added = b.same("arith.addf", &[v[nd + 1], xv])?;
        Ok(vec![b.select(valid, added, v[nd + 1])?])
    })?[0];

    // sum / len_0 / len_1 …, dimension by dimension as PyTorch's kernel divides.
    let rank = lead + nd;
    let mut inputs = vec![(sum, super::emit::identity_map(rank))];
    for (i, &size) in out_spatial.iter().enumerate() {
        let lengths: Vec<i64> = (0..size).map(|o| end(o, i) - start(o, i)).collect();
        let t = int_table(&ctx.e, &lengths, &[size])?;
        inputs.push((t, affine_map(rank, &dims([lead + i]))));
    }
    let init = ctx.e.empty(&shape, out.dtype)?;
    let out_dtype = out.dtype;
    let result = ctx.e.generic(
        &inputs,
        &[(init, super::emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let mut r = v[0];
            for len in &v[1..=nd] {
                let l = b.convert(*len, DType::Int64, acc)?;
                r = b.same("arith.divf", &[r, l])?;
            }
            Ok(vec![b.convert(r, acc, out_dtype)?])
        },
    )?;
    Ok(result)
}

/// Adaptive average pooling of symbolic input sizes to `out_spatial`: no affine map reads a
/// window whose start depends on a symbolic size, so each output sums every input position of
/// its pooled dimensions, masked to its window `[floor(o in / out), ceil((o + 1) in / out))`
/// computed in the body, then divides by each window's length in turn, as for fixed sizes.
/// It reads each input element once per output along a dimension: pooling to one output (a
/// global average) costs what the fixed-size kernel does.
fn symbolic_adaptive<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    lead: usize,
    out_spatial: &[i64],
    out_dtype: DType,
) -> Result<Vec<Value<'c, 'a>>> {
    let nd = out_spatial.len();
    let spatial = x.shape[lead..].to_vec();
    let acc = x.dtype.compute();
    let mut shape = x.shape[..lead].to_vec();
    shape.extend(out_spatial);
    let sizes = |i: usize| (spatial[i], out_spatial[i]);

    // Loops: lead…, o…, i… (the input positions, reductions).
    let rank = lead + 2 * nd;
    let mut read = dims(0..lead);
    read.extend(dims(lead + nd..rank));
    let write = affine_map(rank, &dims(0..lead + nd));
    let zero = ctx.e.splat(&shape, acc, Scalar::Float(0.0))?;
    let mut iters = vec![Iter::Parallel; lead + nd];
    iters.extend(vec![Iter::Reduction; nd]);
    let from = x.dtype;
    let sum = ctx.e.generic(
        &[(x.value, affine_map(rank, &read))],
        &[(zero, write)],
        &iters,
        |b, v| {
            let n = Ints(b);
            let mut inside = None;
            for i in 0..nd {
                let (o, h) = (
                    linalg_index_i64(b, lead + i)?,
                    linalg_index_i64(b, lead + nd + i)?,
                );
                let (start, end) = adaptive_window(&n, sizes(i), o)?;
                let after = n.compare("ge", h, start)?;
                let before = n.compare("lt", h, end)?;
                let here = n.op("andi", after, before)?;
                inside = Some(match inside {
                    Some(all) => n.op("andi", all, here)?,
                    None => here,
                });
            }
            let xv = b.convert(v[0], from, acc)?;
            let added = b.same("arith.addf", &[v[1], xv])?;
            match inside {
                Some(inside) => Ok(vec![b.select(inside, added, v[1])?]),
                None => Ok(vec![added]),
            }
        },
    )?[0];
    let rank = lead + nd;
    let init = ctx.e.empty(&shape, out_dtype)?;
    ctx.e.generic(
        &[(sum, super::emit::identity_map(rank))],
        &[(init, super::emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let n = Ints(b);
            let mut r = v[0];
            for i in 0..nd {
                let (start, end) = adaptive_window(&n, sizes(i), linalg_index_i64(b, lead + i)?)?;
                let len = b.convert(n.op("subi", end, start)?, DType::Int64, acc)?;
                r = b.same("arith.divf", &[r, len])?;
            }
            Ok(vec![b.convert(r, acc, out_dtype)?])
        },
    )
}

/// The window `[start, end)` of adaptive pooling's output `o` (an int64) along a dimension of
/// `(input, output)` sizes (the input's symbolic or not).
fn adaptive_window<'c, 'b>(
    n: &Ints<'_, 'c, 'b>,
    (input, output): (i64, i64),
    o: Value<'c, 'b>,
) -> Result<(Value<'c, 'b>, Value<'c, 'b>)> {
    let (input, output) = (n.size(input)?, n.constant(output)?);
    let start = n.op("divsi", n.op("muli", o, input)?, output)?;
    let next = n.op("muli", n.affine(o, 1, 1)?, input)?;
    let end = n.op(
        "divsi",
        n.op("addi", next, n.affine(output, 1, -1)?)?,
        output,
    )?;
    Ok((start, end))
}
