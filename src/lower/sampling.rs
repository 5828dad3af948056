//! Sampling: `grid_sampler_2d` (`F.grid_sample` on images), the image read at per-pixel
//! fractional positions given by a grid, with nearest, bilinear or bicubic interpolation and
//! zeros, border or reflection padding.
//!
//! Two `linalg.generic`s over the output pixels flattened (`Ho·Wo` in one dimension, so the
//! loops are long and contiguous whatever the grid's shape). The first runs once per output
//! pixel (not per channel): for each axis it turns the grid's coordinate into the taps
//! PyTorch's kernel reads (`GridSampler.h`: unnormalise, clip or reflect, then round, floor or
//! the four cubic positions), each a source index (i32), `-1` where the tap falls outside the
//! image, and a weight. The second runs over [N, C, Ho·Wo] and, per channel, sums the taps:
//! `Σ_j wy_j · Σ_i wx_i · x[n, c, y_j, x_i]`, a tap outside the image reading zero. The image
//! is read with `tensor.extract` at clamped indices, so nothing is read out of bounds, whatever
//! the grid holds (NaN included).

use super::elements::linalg_index;
use super::loops::reuse;
use super::window::{check_shape, dims};
use super::{Emit, Iter, LowerCtx, Registry, Scalar, emit, fail};
use crate::error::Result;
use crate::graph::{DType, Node, dims};
use crate::pipeline::ir::maps::affine_map;
use melior::ir::Value;

pub(super) fn register(r: &mut Registry) {
    r.add("aten.grid_sampler_2d.default", lower_grid_sampler_2d);
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Bilinear,
    Nearest,
    Bicubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

impl Mode {
    /// PyTorch's `GridSamplerInterpolation` code.
    fn of(code: i64) -> Result<Mode> {
        match code {
            0 => Ok(Mode::Bilinear),
            1 => Ok(Mode::Nearest),
            2 => Ok(Mode::Bicubic),
            _ => fail(format!(
                "interpolation mode {code} is not one of 0 (bilinear), 1 (nearest), 2 (bicubic)"
            )),
        }
    }

    /// Taps per axis.
    fn taps(self) -> usize {
        match self {
            Mode::Nearest => 1,
            Mode::Bilinear => 2,
            Mode::Bicubic => 4,
        }
    }
}

impl Padding {
    /// PyTorch's `GridSamplerPadding` code.
    fn of(code: i64) -> Result<Padding> {
        match code {
            0 => Ok(Padding::Zeros),
            1 => Ok(Padding::Border),
            2 => Ok(Padding::Reflection),
            _ => fail(format!(
                "padding mode {code} is not one of 0 (zeros), 1 (border), 2 (reflection)"
            )),
        }
    }
}

/// How one axis of the grid maps to source positions.
#[derive(Clone, Copy)]
struct Axis {
    size: i64,
    mode: Mode,
    padding: Padding,
    align_corners: bool,
    /// The type coordinates are computed in (f32, or f64 for double images).
    acc: DType,
}

impl Axis {
    fn float<'c, 'b>(&self, b: &Emit<'c, 'b>, v: f64) -> Result<Value<'c, 'b>> {
        b.constant(Scalar::Float(v), self.acc)
    }

    /// The axis's size plus `plus`, as a float: a constant, or for a symbolic size computed
    /// when the kernel runs.
    fn size_plus<'c, 'b>(&self, b: &Emit<'c, 'b>, plus: f64) -> Result<Value<'c, 'b>> {
        if !dims::is_symbolic(self.size) {
            return self.float(b, self.size as f64 + plus);
        }
        let size = b.size_value(self.size, self.acc)?;
        b.same("arith.addf", &[size, self.float(b, plus)?])
    }

    /// The grid's coordinate in [-1, 1] as a pixel position.
    fn unnormalize<'c, 'b>(&self, b: &Emit<'c, 'b>, g: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let one = self.float(b, 1.0)?;
        let shifted = b.same("arith.addf", &[g, one])?;
        if self.align_corners {
            let half = b.same("arith.divf", &[shifted, self.float(b, 2.0)?])?;
            b.same("arith.mulf", &[half, self.size_plus(b, -1.0)?])
        } else {
            let scaled = b.same("arith.mulf", &[shifted, self.size_plus(b, 0.0)?])?;
            let less = b.same("arith.subf", &[scaled, one])?;
            b.same("arith.divf", &[less, self.float(b, 2.0)?])
        }
    }

    /// `min(size - 1, max(p, 0))`, NaN kept.
    fn clip<'c, 'b>(&self, b: &Emit<'c, 'b>, p: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let low = b.same("arith.maximumf", &[p, self.float(b, 0.0)?])?;
        b.same("arith.minimumf", &[low, self.size_plus(b, -1.0)?])
    }

    /// `p` reflected into `[low, low + span]`, as `reflect_coordinates` (a span of 0, a fixed
    /// size of 1 with aligned corners, gives 0).
    fn reflect<'c, 'b>(
        &self,
        b: &Emit<'c, 'b>,
        p: Value<'c, 'b>,
        low: f64,
        span: Value<'c, 'b>,
    ) -> Result<Value<'c, 'b>> {
        if self.align_corners && self.size == 1 {
            return self.float(b, 0.0);
        }
        let min = self.float(b, low)?;
        let from_min = b.same("arith.subf", &[p, min])?;
        let distance = b.same("math.absf", &[from_min])?;
        let extra = b.same("arith.remf", &[distance, span])?;
        let flips = b.same("math.floor", &[b.same("arith.divf", &[distance, span])?])?;
        let half_flips = b.same("arith.mulf", &[flips, self.float(b, 0.5)?])?;
        let even = b.cmpf("oeq", b.same("math.floor", &[half_flips])?, half_flips)?;
        let forward = b.same("arith.addf", &[extra, min])?;
        let back = b.same("arith.subf", &[span, extra])?;
        let backward = b.same("arith.addf", &[back, min])?;
        b.select(even, forward, backward)
    }

    /// The padding mode applied to a position (`compute_coordinates`).
    fn pad<'c, 'b>(&self, b: &Emit<'c, 'b>, p: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        match self.padding {
            Padding::Zeros => Ok(p),
            Padding::Border => self.clip(b, p),
            Padding::Reflection => {
                let reflected = if self.align_corners {
                    self.reflect(b, p, 0.0, self.size_plus(b, -1.0)?)?
                } else {
                    self.reflect(b, p, -0.5, self.size_plus(b, 0.0)?)?
                };
                self.clip(b, reflected)
            }
        }
    }

    /// A tap at the integral position `p`: its index as i32, `-1` outside the image (NaN
    /// included, which fails both ordered comparisons).
    fn index<'c, 'b>(&self, b: &Emit<'c, 'b>, p: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let above = b.cmpf("oge", p, self.float(b, 0.0)?)?;
        let below = b.cmpf("ole", p, self.size_plus(b, -1.0)?)?;
        let inside = b.same("arith.andi", &[above, below])?;
        let p = b.select(inside, p, self.float(b, -1.0)?)?;
        b.op1("arith.fptosi", &[p], b.elem_type(DType::Int32)?, &[])
    }

    /// The cubic convolution weights (A = -0.75) of the four taps around a fraction `t`.
    fn cubic<'c, 'b>(&self, b: &Emit<'c, 'b>, t: Value<'c, 'b>) -> Result<Vec<Value<'c, 'b>>> {
        const A: f64 = -0.75;
        let mul = |x, y| b.same("arith.mulf", &[x, y]);
        let add = |x, y| b.same("arith.addf", &[x, y]);
        let c = |v| self.float(b, v);
        // |x| <= 1: ((A + 2) x - (A + 3)) x x + 1.
        let near = |x: Value<'c, 'b>| -> Result<Value<'c, 'b>> {
            let inner = b.same("arith.subf", &[mul(c(A + 2.0)?, x)?, c(A + 3.0)?])?;
            add(mul(mul(inner, x)?, x)?, c(1.0)?)
        };
        // 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A.
        let far = |x: Value<'c, 'b>| -> Result<Value<'c, 'b>> {
            let inner = b.same("arith.subf", &[mul(c(A)?, x)?, c(5.0 * A)?])?;
            let inner = add(mul(inner, x)?, c(8.0 * A)?)?;
            b.same("arith.subf", &[mul(inner, x)?, c(4.0 * A)?])
        };
        let rest = b.same("arith.subf", &[c(1.0)?, t])?;
        Ok(vec![
            far(add(t, c(1.0)?)?)?,
            near(t)?,
            near(rest)?,
            far(add(rest, c(1.0)?)?)?,
        ])
    }

    /// The taps of one grid coordinate: (index, weight) pairs.
    fn taps<'c, 'b>(
        &self,
        b: &Emit<'c, 'b>,
        g: Value<'c, 'b>,
    ) -> Result<Vec<(Value<'c, 'b>, Value<'c, 'b>)>> {
        let p = self.unnormalize(b, g)?;
        match self.mode {
            Mode::Nearest => {
                let r = b.same("math.roundeven", &[self.pad(b, p)?])?;
                Ok(vec![(self.index(b, r)?, self.float(b, 1.0)?)])
            }
            Mode::Bilinear => {
                let p = self.pad(b, p)?;
                let first = b.same("math.floor", &[p])?;
                let second = b.same("arith.addf", &[first, self.float(b, 1.0)?])?;
                let w1 = b.same("arith.subf", &[p, first])?;
                let w0 = b.same("arith.subf", &[self.float(b, 1.0)?, w1])?;
                Ok(vec![
                    (self.index(b, first)?, w0),
                    (self.index(b, second)?, w1),
                ])
            }
            Mode::Bicubic => {
                // Positions are padded one by one, after the weights are taken.
                let first = b.same("math.floor", &[p])?;
                let t = b.same("arith.subf", &[p, first])?;
                let weights = self.cubic(b, t)?;
                let mut taps = Vec::new();
                for (i, w) in weights.into_iter().enumerate() {
                    let at = b.same("arith.addf", &[first, self.float(b, i as f64 - 1.0)?])?;
                    taps.push((self.index(b, self.pad(b, at)?)?, w));
                }
                Ok(taps)
            }
        }
    }
}

fn lower_grid_sampler_2d<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let grid = ctx.tensor(node, 1)?;
    let mode = Mode::of(ctx.int(node, 2)?)?;
    let padding = Padding::of(ctx.int(node, 3)?)?;
    let align_corners = ctx.bool(node, 4)?;
    let out = ctx.out(0)?.clone();
    if x.rank() != 4 || grid.rank() != 4 || grid.shape[3] != 2 {
        return fail(format!(
            "expected a 4-D input and a grid of shape [N, H, W, 2], got {:?} and {:?}",
            x.shape, grid.shape
        ));
    }
    if !dims::may_be_equal(grid.shape[0], x.shape[0]) {
        return fail(format!(
            "the grid's batch {} differs from the input's {}",
            dims::poly_of(grid.shape[0]),
            dims::poly_of(x.shape[0])
        ));
    }
    let dtype = x.dtype;
    if !dtype.is_float() || grid.dtype != dtype {
        return fail(format!(
            "expected a floating-point input and a grid of the same dtype, got {} and {}",
            dtype.name(),
            grid.dtype.name()
        ));
    }
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (oh, ow) = (grid.shape[1], grid.shape[2]);
    check_shape(&out.shape, &[n, c, oh, ow])?;
    if h == 0 || w == 0 {
        return fail(format!("input shape {:?} has no pixels", x.shape));
    }
    if out.shape.contains(&0) {
        return Ok(vec![ctx.e.empty(&out.shape, dtype)?]);
    }
    let acc = dtype.compute();
    let axis = |size| Axis {
        size,
        mode,
        padding,
        align_corners,
        acc,
    };
    let (across, down) = (axis(w), axis(h));
    let pixels = dims::product(&[oh, ow])?;
    let grid = ctx.e.reshape(
        grid.value,
        &grid.shape,
        &[dims::product(&[n, pixels])?, 2],
        dtype,
    )?;
    let tables = taps(ctx, grid, (n, pixels), (across, down), dtype)?;
    let count = mode.taps();
    let pixel = affine_map(3, &dims([0, 2]));
    let inputs: Vec<(Value<'c, 'a>, String)> =
        tables.into_iter().map(|t| (t, pixel.clone())).collect();
    let init = ctx.e.empty(&[n, c, pixels], dtype)?;
    let source = x.value;
    let result = ctx.e.generic(
        &inputs,
        &[(init, emit::identity_map(3))],
        &[Iter::Parallel; 3],
        |b, v| {
            // Table order: x indices, x weights, y indices, y weights.
            let (xs, xw, ys, yw) = (
                &v[..count],
                &v[count..2 * count],
                &v[2 * count..3 * count],
                &v[3 * count..4 * count],
            );
            let batch = linalg_index(b, 0)?;
            let channel = linalg_index(b, 1)?;
            let zero = b.constant(Scalar::Int(0), DType::Int32)?;
            let nothing = b.constant(Scalar::Float(0.0), acc)?;
            let elem = b.elem_type(dtype)?;
            let at = |t| -> Result<Value<'c, '_>> {
                let clamped = b.same("arith.maxsi", &[t, zero])?;
                b.op1("arith.index_cast", &[clamped], b.ty("index")?, &[])
            };
            let columns = xs.iter().map(|&t| at(t)).collect::<Result<Vec<_>>>()?;
            let mut sum = None;
            for j in 0..count {
                let line = at(ys[j])?;
                let mut row = None;
                for i in 0..count {
                    // -1 in either index (outside the image) makes their bitwise or negative.
                    let inside = b.cmpi("sge", b.same("arith.ori", &[ys[j], xs[i]])?, zero)?;
                    let read = b.op1(
                        "tensor.extract",
                        &[reuse(source), batch, channel, line, columns[i]],
                        elem,
                        &[],
                    )?;
                    let value = b.select(inside, b.convert(read, dtype, acc)?, nothing)?;
                    let term = b.same("arith.mulf", &[value, xw[i]])?;
                    row = Some(match row {
                        None => term,
                        Some(r) => b.same("arith.addf", &[r, term])?,
                    });
                }
                let term = b.same("arith.mulf", &[row.unwrap_or(nothing), yw[j]])?;
                sum = Some(match sum {
                    None => term,
                    Some(s) => b.same("arith.addf", &[s, term])?,
                });
            }
            Ok(vec![b.convert(sum.unwrap_or(nothing), acc, dtype)?])
        },
    )?;
    Ok(vec![ctx.e.reshape(
        result[0],
        &[n, c, pixels],
        &out.shape,
        dtype,
    )?])
}

/// Per output pixel (the grid flattened to [`batch` · `pixels`, 2], computed over the pixels
/// flattened) and per tap: x indices, x weights, y indices, y weights, each a table of
/// [`batch`, `pixels`].
fn taps<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    grid: Value<'c, 'a>,
    (batch, per_image): (i64, i64),
    (across, down): (Axis, Axis),
    dtype: DType,
) -> Result<Vec<Value<'c, 'a>>> {
    let e = &ctx.e;
    let pixels = dims::product(&[batch, per_image])?;
    let acc = across.acc;
    let count = across.mode.taps();
    let pixel = emit::identity_map(1);
    let mut inputs = Vec::new();
    for k in 0..2 {
        let coordinate = e.extract_slice(grid, &[0, k], &[pixels, 1], &[1, 1], &[pixels], dtype)?;
        inputs.push((coordinate, pixel.clone()));
    }
    // Per axis: the taps' indices, then their weights.
    let per_axis = [vec![DType::Int32; count], vec![acc; count]].concat();
    let elems = [per_axis.clone(), per_axis].concat();
    let outputs = elems
        .iter()
        .map(|&elem| Ok((e.empty(&[pixels], elem)?, pixel.clone())))
        .collect::<Result<Vec<_>>>()?;
    let tables = e.generic(&inputs, &outputs, &[Iter::Parallel; 1], |b, v| {
        let mut yielded = Vec::new();
        for (axis, g) in [(across, v[0]), (down, v[1])] {
            let taps = axis.taps(b, b.convert(g, dtype, acc)?)?;
            yielded.extend(taps.iter().map(|t| t.0));
            yielded.extend(taps.iter().map(|t| t.1));
        }
        Ok(yielded)
    })?;
    tables
        .into_iter()
        .zip(elems)
        .map(|(t, elem)| e.reshape(t, &[pixels], &[batch, per_image], elem))
        .collect()
}
