//! Resizing: constant, reflection and replication padding, nearest and bilinear upsampling.
//!
//! Padding is built from slices (reflected or replicated edges are reversed or broadcast
//! slices), so every read is affine. Upsampling reads through per-dimension index tables that
//! are computed here with PyTorch's exact floating-point formulas (`UpSample.h`), so the
//! chosen source pixels and weights are the ones eager uses.

use super::data_movement::{Position, read_computed};
use super::elements::{linalg_index, to_index};
use super::loops::reuse;
use super::window::{check_shape, dims, int_table, place, table};
use super::{Iter, LowerCtx, Registry, Scalar, Tensor, emit, fail};
use crate::error::Result;
use crate::graph::{Arg, DType, Node, dims as sizes};
use crate::pipeline::ir::maps::affine_map;
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add("aten.constant_pad_nd.default", lower_constant_pad);
    r.add("aten.reflection_pad1d.default", |ctx, node| {
        lower_edge_pad(ctx, node, 1, Edge::Reflect)
    });
    r.add("aten.reflection_pad2d.default", |ctx, node| {
        lower_edge_pad(ctx, node, 2, Edge::Reflect)
    });
    r.add("aten.reflection_pad3d.default", |ctx, node| {
        lower_edge_pad(ctx, node, 3, Edge::Reflect)
    });
    r.add("aten.replication_pad2d.default", |ctx, node| {
        lower_edge_pad(ctx, node, 2, Edge::Replicate)
    });
    r.add("aten.replication_pad3d.default", |ctx, node| {
        lower_edge_pad(ctx, node, 3, Edge::Replicate)
    });
    for (op, mode, vec) in [
        ("aten.upsample_nearest2d.vec", Mode::Nearest, true),
        ("aten.upsample_nearest2d.default", Mode::Nearest, false),
        ("aten.upsample_bilinear2d.vec", Mode::Bilinear, true),
        ("aten.upsample_bilinear2d.default", Mode::Bilinear, false),
    ] {
        r.add(op, move |ctx, node| lower_upsample(ctx, node, mode, vec));
    }
}

/// A list argument of exactly `n` ints.
fn exact_list(ctx: &LowerCtx<'_, '_>, node: &Node, index: usize, n: usize) -> Result<Vec<i64>> {
    let list = ctx.int_list(node, index)?;
    if list.len() != n {
        return fail(format!(
            "expected {n} padding values, got {}: {list:?}",
            list.len()
        ));
    }
    Ok(list)
}

// ---- constant padding ---------------------------------------------------------------------

fn lower_constant_pad<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let pad = ctx.int_list(node, 1)?;
    let value = ctx.scalar(node, 2)?;
    let out = ctx.out(0)?.clone();
    let rank = x.rank();
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return fail(format!(
            "padding {pad:?} must have an even length of at most {} for rank {rank}",
            2 * rank
        ));
    }
    let mut shape = x.shape.clone();
    let mut offsets = vec![0; rank];
    for (k, pair) in pad.chunks(2).enumerate() {
        let d = rank - 1 - k;
        shape[d] = sizes::sum(sizes::sum(x.shape[d], pair[0])?, pair[1])?;
        if !sizes::is_symbolic(shape[d]) && shape[d] < 0 {
            return fail(format!(
                "padding {pad:?} gives a negative size for dimension {d} of shape {}",
                sizes::shown(&x.shape)
            ));
        }
        offsets[d] = pair[0];
    }
    check_shape(&out.shape, &shape)?;
    if out.dtype != x.dtype {
        return fail("constant padding keeps the input dtype");
    }
    if pad.iter().any(|&p| sizes::is_symbolic(p)) {
        // Amounts that are sizes (a shifted window's `(7 - w % 7) % 7`, a UNet's `diff // 2`),
        // whose sign only the run decides: each output element reads its computed position.
        let how = Position::Shifted {
            before: &offsets,
            fill: value,
        };
        return Ok(vec![read_computed(ctx, &x, &shape, how)?]);
    }
    let symbolic = x.shape.iter().chain(&shape).any(|&d| sizes::is_symbolic(d));
    let x = if symbolic && pad.iter().any(|&p| p < 0) {
        // A canvas of symbolic sizes holds its input whole: the negative amounts crop first.
        let mut first = vec![0; rank];
        let mut kept = x.shape.clone();
        for (k, pair) in pad.chunks(2).enumerate() {
            let d = rank - 1 - k;
            first[d] = (-pair[0]).max(0);
            kept[d] = sizes::sum(x.shape[d], pair[0].min(0) + pair[1].min(0))?;
            offsets[d] = pair[0].max(0);
        }
        let ones = vec![1; rank];
        let value = ctx
            .e
            .extract_slice(x.value, &first, &kept, &ones, &kept, x.dtype)?;
        Tensor {
            value,
            shape: kept,
            dtype: x.dtype,
        }
    } else {
        x
    };
    let placed = place(ctx, &x, value, &shape, &offsets, &vec![1; rank])?;
    Ok(vec![placed.value])
}

// ---- reflection and replication padding ---------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Edge {
    Reflect,
    Replicate,
}

fn lower_edge_pad<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    spatial: usize,
    edge: Edge,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let pad = exact_list(ctx, node, 1, 2 * spatial)?;
    let out = ctx.out(0)?.clone();
    let rank = x.rank();
    if rank != spatial + 1 && rank != spatial + 2 {
        return fail(format!(
            "expected a {}-D or {}-D input, got shape {:?}",
            spatial + 1,
            spatial + 2,
            x.shape
        ));
    }
    let mut shape = x.shape.clone();
    for k in 0..spatial {
        let d = rank - 1 - k;
        let (size, lo, hi) = (x.shape[d], pad[2 * k], pad[2 * k + 1]);
        if size == 0 {
            return fail(format!(
                "cannot pad the empty dimension {d} of shape {:?}",
                x.shape
            ));
        }
        shape[d] = sizes::sum(size, lo + hi)?;
        if sizes::is_symbolic(size) {
            // Dynamo's guards hold the amounts within the size.
            continue;
        }
        if edge == Edge::Reflect && (lo >= size || hi >= size) {
            return fail(format!(
                "reflection padding ({lo}, {hi}) must be smaller than dimension {d} of shape {:?}",
                x.shape
            ));
        }
        if shape[d] < 1 {
            return fail(format!(
                "padding {pad:?} leaves no elements in dimension {d} of shape {:?}",
                x.shape
            ));
        }
    }
    check_shape(&out.shape, &shape)?;
    if shape.contains(&0) {
        return Ok(vec![ctx.e.empty(&shape, x.dtype)?]);
    }
    let mut current = x;
    for k in 0..spatial {
        let d = rank - 1 - k;
        current = pad_edges(ctx, &current, d, pad[2 * k], pad[2 * k + 1], edge)?;
    }
    Ok(vec![current.value])
}

/// Pads (or crops, for negative amounts) dimension `dim` by `lo` before and `hi` after.
/// In input coordinates the result spans `[-lo, size + hi)`: positions before 0 read the
/// reflected (`-u`) or first element, positions past the end the reflected
/// (`2 (size - 1) - u`) or last one, as PyTorch's index formulas do for any sign of padding.
fn pad_edges<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    dim: usize,
    lo: i64,
    hi: i64,
    edge: Edge,
) -> Result<Tensor<'c, 'a>> {
    let size = x.shape[dim];
    let rank = x.rank();
    let mut shape = x.shape.clone();
    shape[dim] = sizes::sum(size, lo + hi)?;
    let mut canvas = ctx.e.empty(&shape, x.dtype)?;
    // The shape of a piece `len` long in `dim`.
    let piece_shape = |len: i64| {
        let mut s = x.shape.clone();
        s[dim] = len;
        s
    };
    let extract = |start: i64, len: i64| -> Result<Value<'c, 'a>> {
        if start == 0 && len == size {
            return Ok(x.value);
        }
        let mut offsets = vec![0; rank];
        offsets[dim] = start;
        let sizes = piece_shape(len);
        ctx.e
            .extract_slice(x.value, &offsets, &sizes, &vec![1; rank], &sizes, x.dtype)
    };
    // Reflect: the input slice [low, low + len) reversed. Replicate: the first or last
    // element broadcast `len` times.
    let edge_piece = |low: i64, len: i64, at_end: bool| -> Result<Value<'c, 'a>> {
        let init = ctx.e.empty(&piece_shape(len), x.dtype)?;
        let mut read = dims(0..rank);
        let source = match edge {
            Edge::Reflect => {
                read[dim] = format!("{} - d{dim}", len - 1);
                extract(low, len)?
            }
            Edge::Replicate => {
                read[dim] = "0".to_string();
                extract(if at_end { sizes::sum(size, -1)? } else { 0 }, 1)?
            }
        };
        Ok(ctx.e.generic(
            &[(source, affine_map(rank, &read))],
            &[(init, emit::identity_map(rank))],
            &vec![Iter::Parallel; rank],
            |_, v| Ok(vec![v[0]]),
        )?[0])
    };
    if sizes::is_symbolic(size) {
        // Amounts within the size (Dynamo's guards hold them so): the reflected or replicated
        // `lo` first elements, the input cropped by the negative amounts, then the `hi` last
        // elements at a symbolic offset.
        let mut offsets = vec![0; rank];
        if lo > 0 {
            let piece = edge_piece(1, lo, false)?;
            canvas = ctx
                .e
                .insert_slice(piece, canvas, &offsets, &piece_shape(lo))?;
        }
        let kept = sizes::sum(size, lo.min(0) + hi.min(0))?;
        offsets[dim] = lo.max(0);
        let middle = extract((-lo).max(0), kept)?;
        canvas = ctx
            .e
            .insert_slice(middle, canvas, &offsets, &piece_shape(kept))?;
        if hi > 0 {
            let piece = edge_piece(sizes::sum(size, -1 - hi)?, hi, true)?;
            offsets[dim] = sizes::sum(size, lo)?;
            canvas = ctx
                .e
                .insert_slice(piece, canvas, &offsets, &piece_shape(hi))?;
        }
        return Ok(Tensor {
            value: canvas,
            shape,
            dtype: x.dtype,
        });
    }
    // The kept window is u in [-lo, size + hi); output position j holds u = j - lo. Each of
    // the three regions (u < 0, inside, u >= size) is clipped to the window, since a negative
    // amount on one side can crop into the other side's padding.
    let (first, end) = (-lo, size + hi);
    let mut offsets = vec![0; rank];
    let (l0, l1) = (first, end.min(0));
    if l1 > l0 {
        // u in [l0, l1) reads -u: input -l1+1 ..= -l0, reversed.
        let piece = edge_piece(1 - l1, l1 - l0, false)?;
        offsets[dim] = l0 + lo;
        canvas = ctx
            .e
            .insert_slice(piece, canvas, &offsets, &piece_shape(l1 - l0))?;
    }
    let (m0, m1) = (first.max(0), end.min(size));
    if m1 > m0 {
        offsets[dim] = m0 + lo;
        let middle = extract(m0, m1 - m0)?;
        canvas = ctx
            .e
            .insert_slice(middle, canvas, &offsets, &piece_shape(m1 - m0))?;
    }
    let (r0, r1) = (first.max(size), end);
    if r1 > r0 {
        // u in [r0, r1) reads 2 (size - 1) - u: input 2 size - 1 - r1 ..= 2 (size - 1) - r0,
        // reversed.
        let piece = edge_piece(2 * size - 1 - r1, r1 - r0, true)?;
        offsets[dim] = r0 + lo;
        canvas = ctx
            .e
            .insert_slice(piece, canvas, &offsets, &piece_shape(r1 - r0))?;
    }
    Ok(Tensor {
        value: canvas,
        shape,
        dtype: x.dtype,
    })
}

// ---- upsampling ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Bilinear,
}

/// An optional list of floats (`scale_factors`).
fn opt_float_list(node: &Node, index: usize) -> Result<Option<Vec<f64>>> {
    match node.args.get(index) {
        None | Some(Arg::None) => Ok(None),
        Some(Arg::List(items)) => items
            .iter()
            .map(|a| match a {
                Arg::Float(f) => Ok(f.value()),
                Arg::Int(i) => Ok(*i as f64),
                _ => fail(format!("argument {index} must hold floats")),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(_) => fail(format!("argument {index} must be a list of floats or None")),
    }
}

fn opt_float(node: &Node, index: usize) -> Result<Option<f64>> {
    match node.args.get(index) {
        None | Some(Arg::None) => Ok(None),
        Some(Arg::Float(f)) => Ok(Some(f.value())),
        Some(Arg::Int(i)) => Ok(Some(*i as f64)),
        Some(_) => fail(format!("argument {index} must be a float or None")),
    }
}

/// The scalar type PyTorch computes source indices in: `f32` (float, the halves and, for
/// nearest, uint8) or `f64`. Each formula below is written once per width.
#[derive(Clone, Copy, PartialEq)]
enum Width {
    F32,
    F64,
}

impl Width {
    /// Rounds a value to this width.
    fn round(self, v: f64) -> f64 {
        match self {
            Width::F32 => v as f32 as f64,
            Width::F64 => v,
        }
    }

    /// `compute_scales_value`: `1 / scale` when a positive scale is given, else in / out.
    fn scales_value(self, scale: Option<f64>, input: i64, output: i64) -> f64 {
        match scale {
            Some(s) if s > 0.0 => self.round(1.0 / s),
            _ => self.round(self.round(input as f64) / self.round(output as f64)),
        }
    }

    /// `area_pixel_compute_scale`.
    fn area_scale(self, input: i64, output: i64, align_corners: bool, scale: Option<f64>) -> f64 {
        if align_corners {
            if output > 1 {
                self.round(self.round((input - 1) as f64) / self.round((output - 1) as f64))
            } else {
                0.0
            }
        } else {
            self.scales_value(scale, input, output)
        }
    }

    /// `area_pixel_compute_source_index` (linear modes): negative indices clamp to 0.
    fn source_index(self, scale: f64, o: i64, align_corners: bool) -> f64 {
        if align_corners {
            self.round(scale * o as f64)
        } else {
            let r = self.round(self.round(scale * self.round(o as f64 + 0.5)) - 0.5);
            if r < 0.0 { 0.0 } else { r }
        }
    }
}

/// The nearest source index: `nearest_idx` of PyTorch's `UpSample.h` (sizes equal: the same
/// index; output twice the input: `o >> 1`; otherwise `floorf(o * scale)` in f32, whatever
/// the input dtype).
fn nearest_index(o: i64, input: i64, output: i64, scale: Option<f64>) -> i64 {
    if output == input {
        o
    } else if output == 2 * input {
        o >> 1
    } else {
        let s = Width::F32.scales_value(scale, input, output) as f32;
        ((o as f32 * s).floor() as i64).min(input - 1)
    }
}

/// `compute_source_index_and_lambda`: (i0, i1, lambda0, lambda1).
fn linear_taps(
    o: i64,
    input: i64,
    output: i64,
    align_corners: bool,
    scale: Option<f64>,
    width: Width,
) -> (i64, i64, f64, f64) {
    if output == input {
        return (o, o, 1.0, 0.0);
    }
    let ratio = width.area_scale(input, output, align_corners, scale);
    let real = width.source_index(ratio, o, align_corners);
    let (i0, lambda1) = guard_index(real, input, width);
    let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
    (i0, i1, width.round(1.0 - lambda1), lambda1)
}

/// `guard_index_and_lambda`: the index floors through `floorf` (a float) at either width.
fn guard_index(real: f64, input: i64, width: Width) -> (i64, f64) {
    let index = ((real as f32).floor() as i64).min(input - 1);
    let lambda = width.round(real - index as f64).clamp(0.0, 1.0);
    (index, lambda)
}

/// A weight in [0, 1] rounded (to nearest, ties to even) to a half type's precision; other
/// dtypes keep it.
fn round_to(v: f64, dtype: DType) -> f64 {
    let (bits, min_exponent) = match dtype {
        DType::Float16 => (11, -14),
        DType::Bfloat16 => (8, -126),
        _ => return v,
    };
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let exponent = (v.abs().log2().floor() as i32).max(min_exponent);
    let quantum = 2f64.powi(exponent - (bits - 1));
    let q = v / quantum;
    let mut r = q.round();
    if (q - q.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r -= q.signum();
    }
    r * quantum
}

/// uint8 taps (`_compute_indices_min_size_weights` without antialiasing, in f64): the first
/// index, two weights (merged into the first at the last input element), and the int16
/// fixed-point weights with their precision, as `_compute_index_ranges_int16_weights`.
fn uint8_taps(
    input: i64,
    output: i64,
    align_corners: bool,
    scale: Option<f64>,
) -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, u32) {
    let ratio = Width::F64.area_scale(input, output, align_corners, scale);
    let mut first = Vec::new();
    let mut second = Vec::new();
    let mut weights = Vec::new();
    let mut largest = 0.0f64;
    for o in 0..output {
        let real = Width::F64.source_index(ratio, o, align_corners);
        let (index, lambda) = guard_index(real, input, Width::F64);
        let size = ((index + 2).min(input) - index).clamp(0, 2);
        let mut w = [0.0f64; 2];
        let mut slot = 0usize;
        for j in 0..2i64 {
            let x = (j as f64 - lambda).abs();
            let v = if x < 1.0 { 1.0 - x } else { 0.0 };
            if index + j <= 0 {
                slot = 0;
            } else if index + j >= input - 1 {
                slot = (size - 1).max(0) as usize;
            }
            if slot < 2 {
                w[slot] += v;
                largest = largest.max(w[slot]);
            }
            slot += 1;
        }
        first.push(index);
        second.push(if size > 1 { index + 1 } else { index });
        weights.push(w);
    }
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + largest * f64::from(1u32 << (precision + 1))) as i64;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let fixed = |v: f64| {
        let v = v * f64::from(1u32 << precision);
        if v < 0.0 {
            (-0.5 + v) as i64
        } else {
            (0.5 + v) as i64
        }
    };
    let w0 = weights.iter().map(|w| fixed(w[0])).collect();
    let w1 = weights.iter().map(|w| fixed(w[1])).collect();
    (first, second, w0, w1, precision)
}

fn lower_upsample<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
    mode: Mode,
    vec: bool,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let out = ctx.out(0)?.clone();
    if x.rank() != 4 {
        return fail(format!("expected a 4-D input, got shape {:?}", x.shape));
    }
    let align_corners = match mode {
        Mode::Bilinear => ctx.bool(node, 2)?,
        Mode::Nearest => false,
    };
    let requested = match node.args.get(1) {
        None | Some(Arg::None) => None,
        Some(_) => Some(ctx.int_list(node, 1)?),
    };
    let at = if mode == Mode::Bilinear { 3 } else { 2 };
    let scales: [Option<f64>; 2] = if vec {
        match opt_float_list(node, at)? {
            Some(f) if f.len() == 2 => [Some(f[0]), Some(f[1])],
            Some(f) => return fail(format!("expected 2 scale factors, got {f:?}")),
            None => [None, None],
        }
    } else {
        [opt_float(node, at)?, opt_float(node, at + 1)?]
    };
    if let Some(size) = &requested {
        if size.len() != 2 {
            return fail(format!("expected 2 output sizes, got {size:?}"));
        }
    } else if scales[0].is_none() || scales[1].is_none() {
        return fail("either output_size or scale_factors must be given");
    }
    let (n, c, ih, iw) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    // With only scale factors, the size is floor(in * scale) and the formulas use the scales.
    let (oh, ow) = match &requested {
        Some(size) => (size[0], size[1]),
        None => (
            (ih as f64 * scales[0].unwrap_or(1.0)) as i64,
            (iw as f64 * scales[1].unwrap_or(1.0)) as i64,
        ),
    };
    check_shape(&out.shape, &[n, c, oh, ow])?;
    if oh <= 0 || ow <= 0 {
        return fail(format!("output size ({oh}, {ow}) must be positive"));
    }
    if out.dtype != x.dtype {
        return fail("upsampling keeps the input dtype");
    }
    if ih == 0 || iw == 0 {
        return fail(format!("input shape {:?} has no pixels", x.shape));
    }
    if out.shape.contains(&0) {
        return Ok(vec![ctx.e.empty(&out.shape, out.dtype)?]);
    }
    let dtype = x.dtype;
    let width = if dtype == DType::Float64 {
        Width::F64
    } else {
        Width::F32
    };
    let value = match mode {
        Mode::Nearest => {
            let rows: Vec<i64> = (0..oh)
                .map(|o| nearest_index(o, ih, oh, scales[0]))
                .collect();
            let cols: Vec<i64> = (0..ow)
                .map(|o| nearest_index(o, iw, ow, scales[1]))
                .collect();
            let rows = int_table(&ctx.e, &rows, &[oh])?;
            let cols = int_table(&ctx.e, &cols, &[ow])?;
            let init = ctx.e.empty(&out.shape, dtype)?;
            let source = x.value;
            ctx.e.generic(
                &[
                    (rows, affine_map(4, &dims([2]))),
                    (cols, affine_map(4, &dims([3]))),
                ],
                &[(init, emit::identity_map(4))],
                &[Iter::Parallel; 4],
                |b, v| {
                    let n = linalg_index(b, 0)?;
                    let c = linalg_index(b, 1)?;
                    let h = to_index(b, v[0], DType::Int64)?;
                    let w = to_index(b, v[1], DType::Int64)?;
                    let elem = b.elem_type(dtype)?;
                    Ok(vec![b.op1(
                        "tensor.extract",
                        &[reuse(source), n, c, h, w],
                        elem,
                        &[],
                    )?])
                },
            )?[0]
        }
        Mode::Bilinear if dtype == DType::Uint8 => {
            if oh == ih && ow == iw {
                return Ok(vec![x.value]);
            }
            // Horizontal pass, then vertical, each rounding to uint8 (the AVX kernel's
            // separable fixed-point interpolation).
            let mut current = x.value;
            let mut shape = x.shape.clone();
            for (dim, input, output, scale) in [(3, iw, ow, scales[1]), (2, ih, oh, scales[0])] {
                if input == output {
                    continue;
                }
                shape[dim] = output;
                current = fixed_point_pass(
                    ctx,
                    current,
                    &shape,
                    dim,
                    uint8_taps(input, output, align_corners, scale),
                )?;
            }
            current
        }
        Mode::Bilinear => {
            if !dtype.is_float() {
                return fail(format!(
                    "bilinear upsampling of {} is not supported",
                    dtype.name()
                ));
            }
            let acc = dtype.compute();
            // PyTorch picks its kernel by output size: small outputs take the vectorised
            // kernel, which sums the four taps with product weights (in opmath); larger ones
            // the generic kernel, which stores the weights in the input's dtype and
            // interpolates each row, then between the rows.
            let product_weights = oh + ow <= 128;
            let stored = if product_weights {
                DType::Float32
            } else {
                dtype
            };
            let taps = |input: i64, output: i64, scale: Option<f64>| {
                let t: Vec<_> = (0..output)
                    .map(|o| {
                        let (i0, i1, l0, l1) =
                            linear_taps(o, input, output, align_corners, scale, width);
                        if stored == dtype && dtype.bits() == 16 {
                            // lambda0 = (half)(1 - lambda1), lambda1 itself a half.
                            let l1 = round_to(l1, stored);
                            (i0, i1, round_to(1.0 - l1, stored), l1)
                        } else {
                            (i0, i1, l0, l1)
                        }
                    })
                    .collect();
                let i0: Vec<i64> = t.iter().map(|t| t.0).collect();
                let i1: Vec<i64> = t.iter().map(|t| t.1).collect();
                let l0: Vec<f64> = t.iter().map(|t| t.2).collect();
                let l1: Vec<f64> = t.iter().map(|t| t.3).collect();
                (i0, i1, l0, l1)
            };
            let (h0, h1, hl0, hl1) = taps(ih, oh, scales[0]);
            let (w0, w1, wl0, wl1) = taps(iw, ow, scales[1]);
            let row = affine_map(4, &dims([2]));
            let col = affine_map(4, &dims([3]));
            let inputs = [
                (int_table(&ctx.e, &h0, &[oh])?, row.clone()),
                (int_table(&ctx.e, &h1, &[oh])?, row.clone()),
                (table(&ctx.e, &hl0, &[oh], acc)?, row.clone()),
                (table(&ctx.e, &hl1, &[oh], acc)?, row),
                (int_table(&ctx.e, &w0, &[ow])?, col.clone()),
                (int_table(&ctx.e, &w1, &[ow])?, col.clone()),
                (table(&ctx.e, &wl0, &[ow], acc)?, col.clone()),
                (table(&ctx.e, &wl1, &[ow], acc)?, col),
            ];
            let init = ctx.e.empty(&out.shape, dtype)?;
            let source = x.value;
            ctx.e.generic(
                &inputs,
                &[(init, emit::identity_map(4))],
                &[Iter::Parallel; 4],
                |b, v| {
                    let n = linalg_index(b, 0)?;
                    let c = linalg_index(b, 1)?;
                    let (h0, h1) = (
                        to_index(b, v[0], DType::Int64)?,
                        to_index(b, v[1], DType::Int64)?,
                    );
                    let (w0, w1) = (
                        to_index(b, v[4], DType::Int64)?,
                        to_index(b, v[5], DType::Int64)?,
                    );
                    let (hl0, hl1, wl0, wl1) = (v[2], v[3], v[6], v[7]);
                    let elem = b.elem_type(dtype)?;
                    let mut pixels = Vec::new();
                    for (h, w) in [(h0, w0), (h0, w1), (h1, w0), (h1, w1)] {
                        let p = b.op1("tensor.extract", &[reuse(source), n, c, h, w], elem, &[])?;
                        pixels.push(b.convert(p, dtype, acc)?);
                    }
                    let mul = |a, w| b.same("arith.mulf", &[a, w]);
                    let add = |a, z| b.same("arith.addf", &[a, z]);
                    let r = if product_weights {
                        let weights = [
                            mul(hl0, wl0)?,
                            mul(hl0, wl1)?,
                            mul(hl1, wl0)?,
                            mul(hl1, wl1)?,
                        ];
                        let mut r = mul(pixels[0], weights[0])?;
                        for k in 1..4 {
                            r = add(r, mul(pixels[k], weights[k])?)?;
                        }
                        r
                    } else {
                        let top = add(mul(pixels[0], wl0)?, mul(pixels[1], wl1)?)?;
                        let bottom = add(mul(pixels[2], wl0)?, mul(pixels[3], wl1)?)?;
                        add(mul(top, hl0)?, mul(bottom, hl1)?)?
                    };
                    Ok(vec![b.convert(r, acc, dtype)?])
                },
            )?[0]
        }
    };
    Ok(vec![value])
}

/// One separable uint8 pass along `dim` (2 or 3) of a rank-4 tensor:
/// `clamp((2^(p-1) + w0 x[i0] + w1 x[i1]) >> p, 0, 255)` in i32.
fn fixed_point_pass<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    source: Value<'c, 'a>,
    shape: &[i64],
    dim: usize,
    taps: (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, u32),
) -> Result<Value<'c, 'a>> {
    let (i0, i1, w0, w1, precision) = taps;
    let size = shape[dim];
    let map = affine_map(4, &dims([dim]));
    let inputs = [
        (int_table(&ctx.e, &i0, &[size])?, map.clone()),
        (int_table(&ctx.e, &i1, &[size])?, map.clone()),
        (int_table(&ctx.e, &w0, &[size])?, map.clone()),
        (int_table(&ctx.e, &w1, &[size])?, map),
    ];
    let init = ctx.e.empty(shape, DType::Uint8)?;
    let half = 1i64 << precision.max(1).saturating_sub(1);
    let results = ctx.e.generic(
        &inputs,
        &[(init, emit::identity_map(4))],
        &[Iter::Parallel; 4],
        |b, v| {
            let mut at = Vec::new();
            for d in 0..4 {
                at.push(linalg_index(b, d)?);
            }
            let i32t = DType::Int32;
            let mut acc = b.constant(Scalar::Int(half), i32t)?;
            for (index, weight) in [(v[0], v[2]), (v[1], v[3])] {
                let mut position = at.clone();
                position[dim] = to_index(b, index, DType::Int64)?;
                let mut operands = vec![reuse(source)];
                operands.extend(position);
                let p = b.op1("tensor.extract", &operands, b.elem_type(DType::Uint8)?, &[])?;
                let p = b.convert(p, DType::Uint8, i32t)?;
                let w = b.convert(weight, DType::Int64, i32t)?;
                let term = b.same("arith.muli", &[p, w])?;
                acc = b.same("arith.addi", &[acc, term])?;
            }
            let shift = b.constant(Scalar::Int(i64::from(precision)), i32t)?;
            let r = b.same("arith.shrsi", &[acc, shift])?;
            let r = b.same("arith.maxsi", &[r, b.constant(Scalar::Int(0), i32t)?])?;
            let r = b.same("arith.minsi", &[r, b.constant(Scalar::Int(255), i32t)?])?;
            Ok(vec![b.convert(r, i32t, DType::Uint8)?])
        },
    )?;
    Ok(results[0])
}
