//! Convolution (`aten.convolution`): 1-D, 2-D and 3-D, strided, padded, dilated, grouped and
//! transposed, with an optional bias.
//!
//! Every case is a correlation over a padded input:
//!
//! ```text
//! out[n, g, oc, o…] += x[n, g, ic, o·s + k·d …] · w[g, oc, ic, k…]
//! ```
//!
//! The padded input is the input written into a zero canvas ([`place`]); a transposed
//! convolution is the correlation of the input spread out by its stride (zeros between
//! elements), padded by `d (k - 1) - p` on the left (negative amounts crop), with the spatially
//! flipped kernel whose channel axes are swapped. Float convolutions become an im2col matrix
//! product (a generic gathers the patches, `linalg.matmul` multiplies them by the weight
//! matrix, or `linalg.batch_matmul` group by group, and the matmul schedule vectorises it);
//! depthwise-like ones (fewer than 8 channels per group) and integer ones are one direct
//! `linalg.generic` with the group as its own loop. Accumulation is in f32 for
//! the half types (f64 for f64, the integer type itself for integers, wrapping as eager does);
//! the bias is added after the sum, then the result is rounded once to the output dtype.

use super::emit::Emit;
use super::loops::{for_loop, forall, nth, reuse};
use super::products::{computed_padded, first_entries, mapped_product, pair_product};
use super::window::{check_shape, dims, extent, per_dim, place, taps};
use super::{Iter, LowerCtx, Registry, Scalar, Tensor, Whole, emit, fail, layout};
use crate::error::Result;
use crate::graph::{DType, Node, TensorMeta, dims as sizes};
use crate::pipeline::ir::maps::affine_map;
use crate::target::Target;
use crate::tuning::{MIN_PARALLEL_PRODUCT_WORK, PAIR_LANES, SHARED_LEFT_BATCH_MAPS};
use melior::ir::Value;

/// Input and output channels per group from which a grouped convolution is a batched matrix
/// product (each group's product at least 8 x 8 by its taps); below it, a depthwise-like one
/// stays a direct loop nest.
const GROUP_PRODUCT_CHANNELS: i64 = 8;

pub(super) fn register(r: &mut Registry) {
    r.add("aten.convolution.default", lower_convolution);
    r.add_whole(
        "fxmlir.conv_pairs.default",
        Whole {
            op: "fxmlir.conv_pairs",
            attributes: conv_pairs_attributes,
        },
        lower_conv_pairs,
    );
}

/// A convolution's stride, padding and dilation: the int lists at argument `at` and the two
/// after it, one value per spatial dimension; strides and dilations positive, padding not
/// negative.
fn window_params(
    ctx: &LowerCtx<'_, '_>,
    node: &Node,
    at: usize,
    nd: usize,
) -> Result<(Vec<i64>, Vec<i64>, Vec<i64>)> {
    let stride = per_dim(ctx.int_list(node, at)?, nd, "stride")?;
    let padding = per_dim(ctx.int_list(node, at + 1)?, nd, "padding")?;
    let dilation = per_dim(ctx.int_list(node, at + 2)?, nd, "dilation")?;
    if [&stride, &padding, &dilation]
        .iter()
        .any(|list| list.iter().any(|&v| sizes::is_symbolic(v)))
    {
        return fail(format!(
            "stride {}, padding {} and dilation {} must be fixed numbers",
            sizes::shown(&stride),
            sizes::shown(&padding),
            sizes::shown(&dilation)
        ));
    }
    if stride.iter().any(|&s| s <= 0) || dilation.iter().any(|&d| d <= 0) {
        return fail(format!(
            "stride {stride:?} and dilation {dilation:?} must be positive"
        ));
    }
    if padding.iter().any(|&p| p < 0) {
        return fail(format!("padding {padding:?} must be non-negative"));
    }
    Ok((stride, padding, dilation))
}

fn lower_convolution<'c, 'a>(
    ctx: &mut LowerCtx<'c, 'a>,
    node: &Node,
) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let mut w = ctx.tensor(node, 1)?;
    let bias = ctx.opt_tensor(node, 2)?;
    let out = ctx.out(0)?.clone();
    if w.rank() < 3 || w.rank() > 5 {
        return fail(format!(
            "weight must be 3-D, 4-D or 5-D, got shape {:?}",
            w.shape
        ));
    }
    let nd = w.rank() - 2;
    if x.rank() != nd + 2 {
        return fail(format!(
            "input of shape {:?} does not match a {nd}-D convolution weight of shape {:?}",
            x.shape, w.shape
        ));
    }
    let (stride, mut padding, dilation) = window_params(ctx, node, 3, nd)?;
    let transposed = ctx.bool(node, 6)?;
    // A transposed convolution's output padding may be a size (a convolution's input
    // gradient under symbolic sizes: what the stride's floor division dropped).
    let output_padding = per_dim(ctx.int_list(node, 7)?, nd, "output_padding")?;
    let groups = ctx.int(node, 8)?;
    if output_padding
        .iter()
        .any(|&p| !sizes::is_symbolic(p) && p < 0)
    {
        return fail(format!(
            "output_padding {output_padding:?} must be non-negative"
        ));
    }
    if sizes::is_symbolic(groups) || groups <= 0 {
        return fail(format!(
            "groups must be a fixed positive number, got {}",
            sizes::poly_of(groups)
        ));
    }
    if out.dtype.is_bool() {
        return fail("convolution of bool tensors is not supported");
    }
    let (batch, channels) = (x.shape[0], x.shape[1]);
    let spatial = x.shape[2..].to_vec();
    let mut kernel = w.shape[2..].to_vec();
    if kernel.iter().any(|&k| !sizes::is_symbolic(k) && k <= 0) {
        return fail(format!("kernel size {kernel:?} must be positive"));
    }
    let reach: Vec<i64> = (0..nd).map(|i| dilation[i] * (kernel[i] - 1)).collect();
    let acc = if out.dtype.is_float() {
        out.dtype.compute()
    } else {
        out.dtype
    };
    // Floats become an im2col matrix product (the scheduled, vectorised path), batched over
    // the groups if there are several; depthwise-like convolutions (too few channels per
    // group for a product) and integer ones stay one direct generic, which reads each input
    // element once per tap: a half-precision input is widened once, into the padded canvas,
    // rather than at every read (ConvNeXt's 7 x 7 depthwise convolutions in bf16 took 40% less).
    // Channels per group, from the weight ([cout, cin/g, k…]; transposed [cin, cout/g, k…]),
    // checked against the input below.
    let (in_per_group, out_per_group) = if transposed {
        (per_group(w.shape[0], groups)?, w.shape[1])
    } else {
        (w.shape[1], per_group(w.shape[0], groups)?)
    };
    // Symbolic channels (in traces of every size) count as wide enough for a product.
    let wide = |c: i64| sizes::is_symbolic(c) || c >= GROUP_PRODUCT_CHANNELS;
    let product = acc.is_float()
        && in_per_group != 0
        && (groups == 1 || (wide(in_per_group) && wide(out_per_group)));
    let x = if product { x } else { ctx.cast(&x, acc)? };
    let symbolic = [&x.shape, &w.shape, &out.shape]
        .iter()
        .any(|shape| shape.iter().any(|&d| sizes::is_symbolic(d)));
    if symbolic && transposed && kernel.iter().any(|&k| sizes::is_symbolic(k)) {
        return fail(
            "a transposed convolution's kernel sizes must be fixed (compile the graph for fixed sizes)",
        );
    }
    if symbolic && !transposed {
        let params = (&stride[..], &padding[..], &dilation[..]);
        let summed = symbolic_correlation(ctx, (&x, &w, &out), params, groups, acc, product)?;
        return epilogue(ctx, &out, summed, bias.as_ref(), acc);
    }

    // The correlation: padded input [batch, channels, padded…], weight [g, cout/g, cin/g, k…].
    let mut cropped_taps = false;
    let (out_channels, out_spatial, padded, weight, shifted) = if !transposed {
        let out_channels = w.shape[0];
        if in_per_group * groups != channels || out_channels % groups != 0 {
            return fail(format!(
                "input of shape {:?} and weight of shape {:?} do not fit {groups} groups",
                x.shape, w.shape
            ));
        }
        let out_spatial = output_sizes(&spatial, &kernel, &stride, &padding, &dilation)?;
        let live = live_taps(
            &spatial,
            &kernel,
            (&stride, &padding, &dilation),
            &out_spatial,
        );
        if let Some(live) = &live {
            (w, kernel, padding) = cropped(ctx, &w, live, &padding, &dilation)?;
            cropped_taps = true;
        }
        let windows = (&stride[..], &dilation[..]);
        let shifted = (x.dtype == acc)
            .then(|| {
                shifts(
                    ctx.target,
                    &x.shape,
                    &w.shape,
                    windows,
                    &out_spatial,
                    (groups, acc),
                )
            })
            .flatten();
        // Shifted products of several images read them channel-major, `[c, n, …]`, each
        // channel's images one after the other in the canvas.
        let (placed, lead) = match shifted {
            Some(s) if batch > 1 => {
                let mut perm = vec![1, 0];
                perm.extend(2..nd + 2);
                let mut shape = vec![channels, batch];
                shape.extend(&spatial);
                let value = layout::permute(ctx, &x, &perm)?;
                let placed = Tensor {
                    value,
                    shape,
                    dtype: x.dtype,
                };
                (placed, batch + s.extra_images)
            }
            _ => (x.clone(), channels),
        };
        let padded = windowed(
            ctx,
            &placed,
            lead,
            (&kernel, &stride, &padding, &dilation),
            &out_spatial,
            shifted.map_or(0, |s| s.extra_rows),
        )?;
        let mut shape = vec![groups, out_channels / groups, in_per_group];
        shape.extend(&kernel);
        let weight = ctx.reshape(&w, &shape)?;
        (out_channels, out_spatial, padded, weight, shifted)
    } else {
        let in_channels = w.shape[0];
        let divides = sizes::is_symbolic(in_channels) || in_channels % groups == 0;
        if !sizes::may_be_equal(in_channels, channels) || !divides {
            return fail(format!(
                "input of shape {} and transposed weight of shape {} do not fit {groups} groups",
                sizes::shown(&x.shape),
                sizes::shown(&w.shape)
            ));
        }
        let mut out_spatial = Vec::with_capacity(nd);
        for i in 0..nd {
            let extra = output_padding[i];
            if !sizes::is_symbolic(extra) && extra >= stride[i] && extra >= dilation[i] {
                return fail(format!(
                    "output_padding {output_padding:?} must be smaller than stride {stride:?} or dilation {dilation:?}"
                ));
            }
            let spread = sizes::product(&[sizes::sum(spatial[i], -1)?, stride[i]])?;
            let size = sizes::sum(sizes::sum(spread, extra)?, reach[i] + 1 - 2 * padding[i])?;
            if !sizes::is_symbolic(size) && size <= 0 {
                return fail(format!(
                    "transposed convolution output size {size} is not positive"
                ));
            }
            out_spatial.push(size);
        }
        // Input element i lands at d (k - 1) - p + i s of a canvas o + d (k - 1) long.
        let mut canvas = vec![batch, channels];
        for i in 0..nd {
            canvas.push(sizes::sum(out_spatial[i], reach[i])?);
        }
        let mut offsets = vec![0, 0];
        offsets.extend((0..nd).map(|i| reach[i] - padding[i]));
        let mut strides = vec![1, 1];
        strides.extend(&stride);
        let padded = if spatial.contains(&0) || batch == 0 || channels == 0 {
            let t = ctx.e.splat(&canvas, x.dtype, Scalar::Int(0))?;
            Tensor {
                value: t,
                shape: canvas,
                dtype: x.dtype,
            }
        } else {
            place(ctx, &x, Scalar::Int(0), &canvas, &offsets, &strides)?
        };
        // w[g·cin/g + ic, oc, k] becomes w'[g, oc, ic, K - 1 - k].
        let mut grouped = vec![groups, in_per_group, out_per_group];
        grouped.extend(&kernel);
        let grouped = ctx.reshape(&w, &grouped)?;
        let mut flipped = vec![groups, out_per_group, in_per_group];
        flipped.extend(&kernel);
        let rank = nd + 3;
        let mut read = vec!["d0".to_string(), "d2".to_string(), "d1".to_string()];
        // A kernel dimension of one is read as it is: a map without a reversed dimension is a
        // plain permutation, which the parallel stage can split and transpose in registers.
        read.extend((0..nd).map(|i| match kernel[i] {
            1 => format!("d{}", i + 3),
            k => format!("{} - d{}", k - 1, i + 3),
        }));
        let init = ctx.e.empty(&flipped, w.dtype)?;
        let value = if flipped.contains(&0) {
            init
        } else {
            ctx.e.generic(
                &[(grouped.value, affine_map(rank, &read))],
                &[(init, emit::identity_map(rank))],
                &vec![Iter::Parallel; rank],
                |_, v| Ok(vec![v[0]]),
            )?[0]
        };
        let weight = Tensor {
            value,
            shape: flipped,
            dtype: w.dtype,
        };
        // Transposed: stride 1 over the spread input.
        (out_per_group * groups, out_spatial, padded, weight, None)
    };
    let correlation_stride = if transposed {
        vec![1; nd]
    } else {
        stride.clone()
    };
    let mut expected = vec![batch, out_channels];
    expected.extend(&out_spatial);
    check_shape(&out.shape, &expected)?;
    // Symbolic sizes as the graph records them (equal to the computed ones where its guards
    // hold).
    let (expected, out_spatial) = (out.shape.clone(), out.shape[2..].to_vec());
    if expected.contains(&0) {
        return Ok(vec![ctx.e.empty(&out.shape, out.dtype)?]);
    }

    let geometry = Geometry {
        batch,
        groups,
        in_per_group,
        out_channels,
        kernel: &kernel,
        out_spatial: &out_spatial,
        stride: &correlation_stride,
        dilation: &dilation,
    };
    let (sum, read_sum) = if product {
        if let Some(shifted) = shifted {
            // A cropped kernel has fewer taps than the tap-major weight the graph hands over.
            let tap_major = if cropped_taps {
                None
            } else {
                tap_major_weight(ctx, node, nd)?
            };
            let weight = (tap_major.as_ref(), &weight);
            let product = shifted_products(ctx, &geometry, &padded, weight, acc, shifted.columns)?;
            as_output(ctx, product, &expected)?
        } else {
            im2col_product(ctx, &geometry, &padded, &weight, acc)?
        }
    } else {
        let sum = direct_correlation(ctx, &geometry, &padded, &weight, acc)?;
        (ctx.reshape(&sum, &expected)?, emit::identity_map(nd + 2))
    };

    epilogue(ctx, &out, (sum, read_sum), bias.as_ref(), acc)
}

/// A convolution's product `[cout, n, o…]` and the map that reads it as the output `[n, cout,
/// o…]` (`expected`): a reshape for one image.
fn as_output<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    product: Tensor<'c, 'a>,
    expected: &[i64],
) -> Result<(Tensor<'c, 'a>, String)> {
    let rank = expected.len();
    if expected[0] == 1 {
        return Ok((ctx.reshape(&product, expected)?, emit::identity_map(rank)));
    }
    let mut read = dims([1, 0]);
    read.extend(dims(2..rank));
    Ok((product, affine_map(rank, &read)))
}

/// A convolution, not transposed, with symbolic sizes (images whose sizes Dynamo made
/// symbolic, with or without a symbolic batch; in traces of every size, channels and kernels
/// too): the input in a zero canvas padded by `padding`, then the patches' product (`product`)
/// or the direct correlation, as for fixed sizes but without the schedules that need them
/// (cropped taps, shifted products, columns padded to whole vectors). Returns the sum and the
/// map that reads it as the output (see [`epilogue`]).
fn symbolic_correlation<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    (x, w, out): (&Tensor<'c, 'a>, &Tensor<'c, 'a>, &TensorMeta),
    (stride, padding, dilation): (&[i64], &[i64], &[i64]),
    groups: i64,
    acc: DType,
    product: bool,
) -> Result<(Tensor<'c, 'a>, String)> {
    let nd = w.rank() - 2;
    let (batch, channels) = (x.shape[0], x.shape[1]);
    let (out_channels, in_per_group) = (w.shape[0], w.shape[1]);
    let kernel = &w.shape[2..];
    if !sizes::may_be_equal(sizes::product(&[in_per_group, groups])?, channels) {
        return fail(format!(
            "input of shape {} and weight of shape {} do not fit {groups} groups",
            sizes::shown(&x.shape),
            sizes::shown(&w.shape)
        ));
    }
    let mut canvas = vec![batch, channels];
    for (&size, &pad) in x.shape[2..].iter().zip(padding) {
        canvas.push(sizes::sum(size, 2 * pad)?);
    }
    let mut expected = vec![batch, out_channels];
    expected.extend(output_sizes(
        &x.shape[2..],
        kernel,
        stride,
        padding,
        dilation,
    )?);
    check_shape(&out.shape, &expected)?;
    let mut offsets = vec![0, 0];
    offsets.extend(padding);
    let padded = place(ctx, x, Scalar::Int(0), &canvas, &offsets, &vec![1; nd + 2])?;
    let mut shape = vec![groups, per_group(out_channels, groups)?, in_per_group];
    shape.extend(kernel);
    let weight = ctx.reshape(w, &shape)?;
    let geometry = Geometry {
        batch,
        groups,
        in_per_group,
        out_channels,
        kernel,
        out_spatial: &out.shape[2..],
        stride,
        dilation,
    };
    if product {
        return im2col_product(ctx, &geometry, &padded, &weight, acc);
    }
    let sum = direct_correlation(ctx, &geometry, &padded, &weight, acc)?;
    Ok((ctx.reshape(&sum, &out.shape)?, emit::identity_map(nd + 2)))
}

/// A size per group of `groups`: `size / groups` (symbolic sizes included).
fn per_group(size: i64, groups: i64) -> Result<i64> {
    match groups {
        1 => Ok(size),
        _ => sizes::floor_div(size, groups),
    }
}

/// A convolution's sum (`acc`, read through `read_sum` as `[n, cout, o…]`) plus the bias
/// (one per output channel), rounded to the output dtype.
fn epilogue<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    out: &TensorMeta,
    (sum, read_sum): (Tensor<'c, 'a>, String),
    bias: Option<&Tensor<'c, 'a>>,
    acc: DType,
) -> Result<Vec<Value<'c, 'a>>> {
    let rank = out.shape.len();
    let out_channels = out.shape[1];
    if let Some(b) = bias
        && !sizes::may_be_equal(sizes::product(&b.shape)?, out_channels)
    {
        return fail(format!(
            "bias of shape {} does not match {} output channels",
            sizes::shown(&b.shape),
            sizes::poly_of(out_channels)
        ));
    }
    if bias.is_none() && acc == out.dtype && read_sum == emit::identity_map(rank) {
        return Ok(vec![sum.value]);
    }
    let mut inputs = vec![(sum.value, read_sum)];
    let mut bias_dtype = acc;
    if let Some(b) = bias {
        let flat = ctx.reshape(b, &[out_channels])?;
        bias_dtype = b.dtype;
        inputs.push((flat.value, affine_map(rank, &dims([1]))));
    }
    let has_bias = bias.is_some();
    let float = acc.is_float();
    let out_dtype = out.dtype;
    let init = ctx.e.empty(&out.shape, out.dtype)?;
    let result = ctx.e.generic(
        &inputs,
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| {
            let mut y = v[0];
            if has_bias {
                let bv = b.convert(v[1], bias_dtype, acc)?;
                let add = if float { "arith.addf" } else { "arith.addi" };
                y = b.same(add, &[y, bv])?;
            }
            Ok(vec![b.convert(y, acc, out_dtype)?])
        },
    )?;
    Ok(result)
}

/// `fxmlir.conv_pairs(x, pairs, stride, padding, dilation)`: a convolution without groups of a
/// bf16 input `x` [n, c, s…] and a bf16 weight packed in pairs of input channels, `pairs[oc,
/// c / 2, k…, c % 2] = w[oc, c, k…]` (an odd `c` is one zero channel short), accumulated and
/// returned in f32 [n, oc, o…]. It is `w @ patches` as for a float convolution, with the
/// weight as the left operand `[oc, (c / 2, k…), 2]` and the patches written straight into
/// the pairs layout of the right one, `[(c / 2, k…), (n, o…), 2]`: the contraction AVX512-BF16's
/// dot product computes (see [`pair_product`]). `fxmlir.passes.bf16_pairs` rewrites bf16
/// convolutions so.
/// `fxmlir.conv_pairs`'s `stride`, `padding` and `dilation`, one per spatial dimension.
fn conv_pairs_attributes(ctx: &LowerCtx, node: &Node) -> Result<Vec<(&'static str, String)>> {
    let nd = ctx.tensor(node, 1)?.rank().saturating_sub(3);
    let (stride, padding, dilation) = window_params(ctx, node, 2, nd)?;
    let array = |values: Vec<i64>| format!("array<i64: {}>", crate::pipeline::ir::items(&values));
    Ok(vec![
        ("stride", array(stride)),
        ("padding", array(padding)),
        ("dilation", array(dilation)),
    ])
}

fn lower_conv_pairs<'c, 'a>(ctx: &mut LowerCtx<'c, 'a>, node: &Node) -> Result<Vec<Value<'c, 'a>>> {
    let x = ctx.tensor(node, 0)?;
    let pairs = ctx.tensor(node, 1)?;
    let out = ctx.out(0)?.clone();
    if x.dtype != DType::Bfloat16 || pairs.dtype != DType::Bfloat16 {
        return fail(format!(
            "conv_pairs takes bfloat16 operands, got {} and {}",
            x.dtype.name(),
            pairs.dtype.name()
        ));
    }
    let nd = pairs.rank().saturating_sub(3);
    let fits = (1..=3).contains(&nd)
        && x.rank() == nd + 2
        && pairs.shape[nd + 2] == 2
        && matches!(2 * pairs.shape[1] - x.shape[1], 0 | 1);
    if !fits {
        return fail(format!(
            "conv_pairs: input of shape {:?} does not match a weight packed as {:?} (out, in / 2, kernel..., 2)",
            x.shape, pairs.shape
        ));
    }
    let (stride, padding, dilation) = window_params(ctx, node, 2, nd)?;
    let (out_channels, half) = (pairs.shape[0], pairs.shape[1]);
    let kernel = pairs.shape[2..nd + 2].to_vec();
    let out_spatial = output_sizes(&x.shape[2..], &kernel, &stride, &padding, &dilation)?;
    let window = (&kernel[..], &stride[..], &padding[..], &dilation[..]);
    let padded = windowed(ctx, &x, 2 * half, window, &out_spatial, 0)?;
    let batch = x.shape[0];
    let mut expected = vec![batch, out_channels];
    expected.extend(&out_spatial);
    check_shape(&out.shape, &expected)?;
    if out.dtype != DType::Float32 {
        return fail(format!(
            "conv_pairs returns float32, not {}",
            out.dtype.name()
        ));
    }
    if expected.contains(&0) || x.shape[1] == 0 {
        return Ok(vec![ctx.e.splat(&out.shape, out.dtype, Scalar::Int(0))?]);
    }
    // Loops: c / 2, k…, n, o…, c % 2.
    let rank = 2 * nd + 3;
    let geo = Geometry {
        batch,
        groups: 1,
        in_per_group: 2 * half,
        out_channels,
        kernel: &kernel,
        out_spatial: &out_spatial,
        stride: &stride,
        dilation: &dilation,
    };
    let mut read = dims([nd + 1]);
    read.push(format!("d0 * 2 + d{}", rank - 1));
    read.extend(taps(geo.stride, geo.dilation, |i| nd + 2 + i, |i| 1 + i));
    let mut patch_shape = vec![half];
    patch_shape.extend(&kernel);
    patch_shape.push(batch);
    patch_shape.extend(&out_spatial);
    patch_shape.push(2);
    let taps = half * kernel.iter().product::<i64>();
    let columns = batch * out_spatial.iter().product::<i64>();
    let patches = computed_padded(
        ctx,
        &[taps, columns, 2],
        DType::Bfloat16,
        (1, PAIR_LANES),
        || gather(ctx, &padded, &read, patch_shape, DType::Bfloat16),
    )?;
    let weight = ctx.reshape(&pairs, &[out_channels, taps, 2])?;
    let product = first_entries(ctx, &pair_product(ctx, &weight, &patches)?, 1, columns)?;
    // [oc, (n, o…)] is the result for one image; several are [n, oc, o…] read from [oc, n, o…].
    if batch == 1 {
        return Ok(vec![ctx.reshape(&product, &out.shape)?.value]);
    }
    let mut by_channel = vec![out_channels, batch];
    by_channel.extend(&out_spatial);
    let product = ctx.reshape(&product, &by_channel)?;
    let mut read = dims([1, 0]);
    read.extend(dims(2..nd + 2));
    let init = ctx.e.empty(&out.shape, DType::Float32)?;
    ctx.e.generic(
        &[(product.value, affine_map(nd + 2, &read))],
        &[(init, emit::identity_map(nd + 2))],
        &vec![Iter::Parallel; nd + 2],
        |_, v| Ok(vec![v[0]]),
    )
}

/// Per spatial dimension, the first and last kernel tap whose windows read the input rather
/// than only its zero padding, when some dimension has taps that read only padding (and
/// every dimension a tap that reads the input): the kernel can be cropped to those. An
/// atrous convolution whose dilation is about the input's size (DeepLabV3's ASPP at rates 24
/// and 36 on a 14 x 14 map) reads the input with its centre tap only: cropped, it is a 1 x 1
/// convolution, not a product nine times as deep over a canvas mostly of padding.
fn live_taps(
    spatial: &[i64],
    kernel: &[i64],
    (stride, padding, dilation): (&[i64], &[i64], &[i64]),
    out_spatial: &[i64],
) -> Option<Vec<(i64, i64)>> {
    let reads_input = |i: usize, tap: i64| {
        // Output position o reads input o s + tap d - p: the first o at or after input 0.
        let start = tap * dilation[i] - padding[i];
        let first = if start >= 0 {
            0
        } else {
            (-start + stride[i] - 1) / stride[i]
        };
        first < out_spatial[i] && first * stride[i] + start < spatial[i]
    };
    let mut live = Vec::with_capacity(kernel.len());
    for (i, &k) in kernel.iter().enumerate() {
        let first = (0..k).find(|&t| reads_input(i, t))?;
        let last = (0..k).rev().find(|&t| reads_input(i, t))?;
        live.push((first, last));
    }
    let whole = live
        .iter()
        .zip(kernel)
        .all(|(&(a, b), &k)| a == 0 && b == k - 1);
    (!whole).then_some(live)
}

/// The weight, kernel and padding of a convolution whose kernel is cropped to the taps
/// `live` (see [`live_taps`]): the padding shrinks by the dropped leading taps' reach (it may
/// become negative: the canvas then crops the input).
fn cropped<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    w: &Tensor<'c, 'a>,
    live: &[(i64, i64)],
    padding: &[i64],
    dilation: &[i64],
) -> Result<(Tensor<'c, 'a>, Vec<i64>, Vec<i64>)> {
    let kernel: Vec<i64> = live.iter().map(|&(a, b)| b - a + 1).collect();
    let mut offsets = vec![0, 0];
    offsets.extend(live.iter().map(|&(a, _)| a));
    let mut shape = w.shape[..2].to_vec();
    shape.extend(&kernel);
    let ones = vec![1; shape.len()];
    let value = ctx
        .e
        .extract_slice(w.value, &offsets, &shape, &ones, &shape, w.dtype)?;
    let padding = (0..live.len())
        .map(|i| padding[i] - live[i].0 * dilation[i])
        .collect();
    let weight = Tensor {
        value,
        shape,
        dtype: w.dtype,
    };
    Ok((weight, kernel, padding))
}

/// The output size of a (non-transposed) correlation along each spatial dimension (symbolic
/// sizes included: `(s0 + 2 p - d (k - 1) - 1)//s + 1`).
fn output_sizes(
    spatial: &[i64],
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
) -> Result<Vec<i64>> {
    let mut out_spatial = Vec::with_capacity(kernel.len());
    for i in 0..kernel.len() {
        if sizes::is_symbolic(spatial[i]) || sizes::is_symbolic(kernel[i]) {
            let reach = sizes::product(&[dilation[i], sizes::sum(kernel[i], -1)?])?;
            let span = sizes::difference(sizes::sum(spatial[i], 2 * padding[i] - 1)?, reach)?;
            out_spatial.push(sizes::sum(sizes::floor_div(span, stride[i])?, 1)?);
            continue;
        }
        let reach = dilation[i] * (kernel[i] - 1);
        let span = spatial[i] + 2 * padding[i] - reach - 1;
        if span < 0 {
            return fail(format!(
                "input size {} (padded by {}) is smaller than the dilated kernel {}",
                spatial[i],
                padding[i],
                reach + 1
            ));
        }
        out_spatial.push(span / stride[i] + 1);
    }
    Ok(out_spatial)
}

/// The input a (non-transposed) correlation of `window` (kernel, stride, padding, dilation)
/// with output sizes `out_spatial` reads: `x` in a zero canvas of `channels` entries in its
/// second dimension (at least `x`'s; the extra ones are zero), padded by `padding` and cut to the part the windows
/// read, `[0, (o - 1) s + d (k - 1) + 1)`, with `extra_rows` zero rows more along the first
/// spatial dimension.
fn windowed<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    x: &Tensor<'c, 'a>,
    channels: i64,
    (kernel, stride, padding, dilation): (&[i64], &[i64], &[i64], &[i64]),
    out_spatial: &[i64],
    extra_rows: i64,
) -> Result<Tensor<'c, 'a>> {
    let nd = kernel.len();
    let mut canvas = vec![x.shape[0], channels];
    canvas.extend((0..nd).map(|i| extent(out_spatial[i], kernel[i], stride[i], dilation[i])));
    canvas[2] += extra_rows;
    let mut offsets = vec![0, 0];
    offsets.extend(padding);
    place(ctx, x, Scalar::Int(0), &canvas, &offsets, &vec![1; nd + 2])
}

/// The correlation's sizes: the padded input is [batch, groups · in_per_group, padded…], the
/// weight [groups, out_channels / groups, in_per_group, kernel…].
struct Geometry<'g> {
    batch: i64,
    groups: i64,
    in_per_group: i64,
    out_channels: i64,
    kernel: &'g [i64],
    out_spatial: &'g [i64],
    stride: &'g [i64],
    dilation: &'g [i64],
}

/// One generic over (n, g, oc, ic, o…, k…) accumulating `x · w` in `acc`; the result is
/// [batch, groups, out_channels / groups, out…]. The input channel comes before the output
/// positions, so that the innermost loops are the output row under the (unrolled) window
/// loops: each step adds one channel's taps to a whole row of outputs, contiguous vectors of
/// the input's row and the output's. With the channel innermost, its loop was vectorised as
/// a gather across channel planes: ResNeXt-50's 3 x 3 convolutions of 4 channels a group ran
/// at about 20 GFLOP/s.
fn direct_correlation<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    geo: &Geometry<'_>,
    padded: &Tensor<'c, 'a>,
    weight: &Tensor<'c, 'a>,
    acc: DType,
) -> Result<Tensor<'c, 'a>> {
    let nd = geo.kernel.len();
    let mut grouped_input = vec![geo.batch, geo.groups, geo.in_per_group];
    grouped_input.extend(&padded.shape[2..]);
    let input = ctx.reshape(padded, &grouped_input)?;
    let mut acc_shape = vec![
        geo.batch,
        geo.groups,
        per_group(geo.out_channels, geo.groups)?,
    ];
    acc_shape.extend(geo.out_spatial);
    let zero = ctx.e.splat(&acc_shape, acc, Scalar::Int(0))?;
    // Loops: n, g, oc, ic, o…, k….
    let rank = 4 + 2 * nd;
    let ic = 3;
    let mut read_input = dims([0, 1, ic]);
    read_input.extend(taps(geo.stride, geo.dilation, |i| 4 + i, |i| 4 + nd + i));
    let mut read_weight = dims([1, 2, ic]);
    read_weight.extend(dims((0..nd).map(|i| 4 + nd + i)));
    let mut write = dims([0, 1, 2]);
    write.extend(dims((0..nd).map(|i| 4 + i)));
    let mut iters = vec![Iter::Parallel; 3];
    iters.push(Iter::Reduction);
    iters.extend(vec![Iter::Parallel; nd]);
    iters.extend(vec![Iter::Reduction; nd]);
    let (xd, wd) = (input.dtype, weight.dtype);
    let float = acc.is_float();
    let sum = ctx.e.generic(
        &[
            (input.value, affine_map(rank, &read_input)),
            (weight.value, affine_map(rank, &read_weight)),
        ],
        &[(zero, affine_map(rank, &write))],
        &iters,
        |b, v| {
            let xv = b.convert(v[0], xd, acc)?;
            let wv = b.convert(v[1], wd, acc)?;
            let (mul, add) = if float {
                ("arith.mulf", "arith.addf")
            } else {
                ("arith.muli", "arith.addi")
            };
            let p = b.same(mul, &[xv, wv])?;
            Ok(vec![b.same(add, &[v[2], p])?])
        },
    )?[0];
    Ok(Tensor {
        value: sum,
        shape: acc_shape,
        dtype: acc,
    })
}

/// How a convolution is [`shifted_products`]: the columns each tap's product computes (the
/// output's rows as wide as the canvas, rounded up to whole vectors on every thread) and the
/// zero rows or images the canvas needs beyond the windows for the last tap's slice (see
/// [`shifts`]).
#[derive(Clone, Copy)]
struct Shifted {
    columns: i64,
    extra_rows: i64,
    extra_images: i64,
}

/// Whether, and how, a convolution of an input `[n, c, s…]` by a weight `[cout, c / g, k…]` of
/// `(stride, dilation)` with output sizes `out`, `(groups, dtype)`, is [`shifted_products`]:
/// a stride-1 f32 or f64 convolution without groups, of several taps over at least
/// [`SHIFTED_MIN_CHANNELS`] input channels, whose canvas widens the output by at most
/// [`SHIFTED_MAX_WIDENING`], unless its im2col product is faster ([`patches_in_cache`]).
/// The columns are a multiple of a vector on each thread, so that the
/// products are cut across the threads by columns, each reading its share of the input, rather
/// than by rows, each reading all of it.
///
/// One image computes the first `o_0` rows of its canvas, whose last taps read `extra_rows`
/// zero rows below it. Several images lie one after the other in the canvas (`[c, n, …]`),
/// each computed whole (its last rows are dropped), and the last taps of the last image read
/// `extra_images` zero images after them.
fn shifts(
    target: &Target,
    input: &[i64],
    weight: &[i64],
    (stride, dilation): (&[i64], &[i64]),
    out: &[i64],
    (groups, dtype): (i64, DType),
) -> Option<Shifted> {
    let nd = weight.len().saturating_sub(2);
    let kernel = &weight[2..];
    let (images, channels) = (input[0], input[1]);
    let reach: Vec<i64> = (0..nd).map(|i| dilation[i] * (kernel[i] - 1)).collect();
    let row: i64 = (1..nd).map(|i| out[i] + reach[i]).product();
    let narrow: i64 = out[1..].iter().product();
    let image = (out[0] + reach[0]) * row;
    let used = if images == 1 {
        out[0] * row
    } else {
        images * image
    };
    let lanes = thread_columns(target, dtype);
    let columns = used + (-used).rem_euclid(lanes);
    let applies = matches!(dtype, DType::Float32 | DType::Float64)
        && images >= 1
        && groups == 1
        && weight[1] == channels
        && stride.iter().all(|&s| s == 1)
        && kernel.iter().product::<i64>() > 1
        && channels >= SHIFTED_MIN_CHANNELS
        && (columns as f64) <= SHIFTED_MAX_WIDENING * (images * out[0] * narrow) as f64
        && !patches_in_cache(target, images, (weight[0], channels), (kernel, out), dtype);
    if !applies {
        return None;
    }
    // The last tap's shift in the flattened canvas (each dimension's stride its rows' length).
    let mut stride_of = row;
    let mut shift = 0;
    for i in 0..nd {
        shift += reach[i] * stride_of;
        stride_of /= out.get(i + 1).map_or(1, |&o| o + reach[i + 1]);
    }
    let read = shift + columns;
    Some(if images == 1 {
        let rows = (read + row - 1) / row;
        Shifted {
            columns,
            extra_rows: (rows - out[0] - reach[0]).max(0),
            extra_images: 0,
        }
    } else {
        Shifted {
            columns,
            extra_rows: 0,
            extra_images: (read - used + image - 1) / image,
        }
    })
}

/// Whether a convolution, not transposed, of an input of `input` shape and `dtype` by a
/// weight of `weight` shape is `shifted_products` on `target` (the lowering's own rule,
/// `shifts`): what `fxmlir.passes.taps` asks before it hands such a convolution its weight
/// tap-major (hoisted, so the kernel need not transpose it per call).
pub fn shifted_convolution(
    target: &Target,
    input: &[i64],
    weight: &[i64],
    (stride, padding, dilation): (&[i64], &[i64], &[i64]),
    groups: i64,
    dtype: DType,
) -> bool {
    let nd = weight.len().saturating_sub(2);
    let fits = |v: &[i64]| v.len() == nd;
    if nd == 0 || input.len() != nd + 2 || !(fits(stride) && fits(padding) && fits(dilation)) {
        return false;
    }
    output_sizes(&input[2..], &weight[2..], stride, padding, dilation).is_ok_and(|out| {
        shifts(
            target,
            input,
            weight,
            (stride, dilation),
            &out,
            (groups, dtype),
        )
        .is_some()
    })
}

/// The permutation of a weight `[cout, c, k…]` into its tap-major layout `[k…, cout, c]`, and
/// the one back, `permute(permute(w, to), back) == w`.
pub fn tap_major_permutations(nd: usize) -> (Vec<i64>, Vec<i64>) {
    let nd = nd as i64;
    let to = (2..nd + 2).chain([0, 1]).collect();
    let back = [nd, nd + 1].into_iter().chain(0..nd).collect();
    (to, back)
}

/// A vector of `acc` on each of the target's threads: the columns a product's thread chunks
/// are whole vectors of, so that it can be cut across the threads by columns (each thread
/// then packs and reads its share of the right operand; cut by rows, each packs all of it).
fn thread_columns(target: &Target, acc: DType) -> i64 {
    target.vector_bytes() / acc.byte_size() as i64 * target.threads as i64
}

/// The multiple an im2col patch matrix's columns are padded to: whole pair tiles
/// ([`PAIR_LANES`], so that a narrow last tile is never left: ResNet's 49 columns at 7 x 7)
/// and [`thread_columns`]. DenseNet-121's 196 columns at 14 x 14 padded to 208 were cut by
/// rows, each thread packing the whole right operand; to 224, by columns.
fn patch_columns(target: &Target, acc: DType) -> i64 {
    let threads = thread_columns(target, acc);
    let (mut a, mut b) = (PAIR_LANES, threads);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    PAIR_LANES / a * threads
}

/// The columns of a block of [`Taps::blocked`] out of `columns` (whole vectors): as many as
/// fit half of `target`'s L2 with `rows` rows of `acc` (the sum's and the canvas's), evened
/// out over the blocks `columns` then takes.
fn column_block(target: &Target, rows: i64, acc: DType, columns: i64) -> i64 {
    let fit = (target.l2_bytes / 2 / (rows * acc.byte_size() as i64)).max(PAIR_LANES);
    let blocks = (columns + fit - 1) / fit;
    if blocks <= 1 {
        return columns;
    }
    let even = (columns + blocks - 1) / blocks;
    even + (-even).rem_euclid(PAIR_LANES)
}

/// Whether one image's im2col product beats its taps' products: at least as many output
/// channels as input ones, and a patch matrix within half of each thread's L2. The gather
/// is then repaid by the output channels that read each patch, and stays in cache, where the
/// taps' products reread their sum once a tap, each only `channels` deep. In turns (Zen 4, two
/// threads, 1 MiB L2, 2026-12-08), im2col against taps: 32 -> 128 at 27 x 27 (a 0.84 MB
/// patch matrix) 0.33 against 0.42 ms, 32 -> 64 at 28 x 28 0.22 against 0.25, 40 -> 160 at
/// 20 x 20 0.29 against 0.36, 64 -> 128 at 20 x 20 0.47 against 0.51; beyond L2 the taps win
/// (32 -> 64 at 56 x 56, 3.6 MB: 1.35 against 0.95; 64 -> 64 at 28 x 28, 1.8 MB: 0.82
/// against 0.76), and with fewer output channels too (DenseNet's 128 -> 32 at 14 x 14: 0.19
/// against 0.15).
fn patches_in_cache(
    target: &Target,
    images: i64,
    (out_channels, channels): (i64, i64),
    (kernel, out): (&[i64], &[i64]),
    dtype: DType,
) -> bool {
    let taps: i64 = kernel.iter().product();
    let patches = taps * channels * out.iter().product::<i64>() * dtype.byte_size() as i64;
    images == 1
        && out_channels >= channels
        && patches <= target.threads as i64 * target.l2_bytes / 2
}

/// Input channels from which a convolution is [`shifted_products`]: each tap's product is
/// `channels` deep, and shallower ones would run its register tiles from memory more than
/// from registers (an im2col product is one product `channels x taps` deep).
const SHIFTED_MIN_CHANNELS: i64 = 32;

/// Most columns a [`shifted_products`] convolution computes per output column: each row of
/// the output is computed as wide as the canvas and cut after, `(o + d (k - 1)) / o`, and the
/// columns are padded to whole vectors on each thread (3 x 3 at 56 x 56: 3,264 for 3,136, at
/// 14 x 14: 224 for 196 with AVX-512 on two threads; at 7 x 7, 9 / 7 is too many, and at
/// 13 x 13, 224 for 169, whose im2col product took 6-18% less time in SqueezeNet's layers).
const SHIFTED_MAX_WIDENING: f64 = 1.2;

/// A stride-1 convolution without groups as one product per kernel tap, each reading the
/// padded input where it lies. With the canvas flattened to `[c, (h, w…)]` (row length `W`),
/// output pixel `(y, x)` reads, at tap `(i, j)`, canvas column `(y + d i) W + x + d j`: column
/// `y W + x` of the output, shifted by `d (i W + j)`. Computed over every canvas column of its
/// first `o_0` rows (the columns from `x = o_1` on are computed and dropped), the tap's right
/// operand is a plain slice `[c, o_0 W]` of the flattened canvas at its shift, its left
/// operand the weight of the tap, and the taps' products accumulate into one sum
/// `[cout, o_0 W]`. No patch matrix is gathered: DenseNet-121's 3 x 3 convolutions spent a
/// third of their time writing and rereading theirs. The canvas has zero rows more than the
/// windows read (see [`windowed`]), so that the last tap's slice stays inside it.
///
/// Several images lie channel-major in the canvas, `[c, n, (h, w…)]`, flattened to
/// `[c, (n, h, w…)]`: image `b`'s pixel reads the same shifts from column `b H W + y W + x`, so
/// one product per tap covers every image, its columns every image's whole canvas (the rows
/// below the output dropped too), with zero images after the last one (im2col's patch matrix
/// of a batch of 8 at 40 x 40, 64 channels, is 29 MB). The result is `[cout, n, o…]`, as
/// [`im2col_product`]'s.
fn shifted_products<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    geo: &Geometry<'_>,
    padded: &Tensor<'c, 'a>,
    (tap_major, weight): (Option<&Tensor<'c, 'a>>, &Tensor<'c, 'a>),
    acc: DType,
    columns: i64,
) -> Result<Tensor<'c, 'a>> {
    let nd = geo.kernel.len();
    let channels = geo.in_per_group;
    let canvas = &padded.shape[2..];
    // Each spatial dimension's stride in the flattened canvas.
    let mut strides = vec![1; nd];
    for i in (0..nd - 1).rev() {
        strides[i] = strides[i + 1] * canvas[i + 1];
    }
    // One image `[1, c, …]`, or several channel-major `[c, n, …]`: either way `[c, L]` flat.
    let length = padded.shape.iter().product::<i64>() / channels;
    let flat = ctx.reshape(padded, &[channels, length])?;
    // The weight tap by tap, [k…, cout, c]: as `fxmlir.passes.taps` hands it over (hoisted),
    // else transposed here.
    let rank = nd + 2;
    let per_tap = match tap_major {
        Some(t) => t.clone(),
        None => {
            let mut shape = geo.kernel.to_vec();
            shape.extend([geo.out_channels, channels]);
            let mut read = dims([nd, nd + 1]);
            read.extend(dims(0..nd));
            let source = ctx.reshape(
                weight,
                &[&[geo.out_channels, channels][..], geo.kernel].concat(),
            )?;
            let init = ctx.e.empty(&shape, weight.dtype)?;
            let value = ctx.e.generic(
                &[(source.value, affine_map(rank, &read))],
                &[(init, emit::identity_map(rank))],
                &vec![Iter::Parallel; rank],
                |_, v| Ok(vec![v[0]]),
            )?[0];
            Tensor {
                value,
                shape,
                dtype: weight.dtype,
            }
        }
    };
    let per_tap = ctx.reshape(
        &ctx.cast(&per_tap, acc)?,
        &[geo.kernel.iter().product(), geo.out_channels, channels],
    )?;
    let taps = Taps {
        per_tap: per_tap.value,
        flat: flat.value,
        shape: [channels, length],
        strides: &strides,
        acc,
    };
    // On several threads the taps are cut together: one chunk of columns per thread (whole
    // vectors, see [`shifts`]), each computing every tap's product over its columns in one
    // parallel region, rather than one region per tap (DenseNet-121's 3 x 3 layers at 14 x 14,
    // 32 x 128 x 224 a tap, too small to be cut one by one, had been one im2col product, its
    // patch matrix gathered at the product's own cost; larger taps ran 3-5% faster so on a
    // Zen 3, as fast on a Zen 5).
    let threads = ctx.target.threads as i64;
    let work = geo.out_channels * channels * columns * geo.kernel.iter().product::<i64>();
    let sum = if threads > 1 && work >= MIN_PARALLEL_PRODUCT_WORK {
        let chunk = columns / threads;
        let shape = [geo.out_channels, columns];
        let init = ctx.e.empty(&shape, acc)?;
        let taps = &taps;
        forall(&ctx.e, threads, &[init], |b, writes, iv, shared| {
            let first = b.same("arith.muli", &[iv, b.index(chunk)?])?;
            let part = taps.blocked(b, geo, first, chunk, ctx.target)?;
            writes.insert_at(part, nth(shared, 0)?, &shape, (1, first, Some(chunk)), true)?;
            Ok(())
        })?[0]
    } else {
        taps.blocked(&ctx.e, geo, ctx.e.index(0)?, columns, ctx.target)?
    };
    let sum = Tensor {
        value: sum,
        shape: vec![geo.out_channels, columns],
        dtype: acc,
    };
    // The computed rows of each image, as wide as the canvas: one image's first `o_0`, every
    // row of several images'.
    let rows = if geo.batch == 1 {
        geo.out_spatial[0]
    } else {
        canvas[0]
    };
    let mut wide = vec![geo.out_channels, geo.batch, rows];
    wide.extend(&canvas[1..]);
    let wide = ctx.reshape(
        &first_entries(ctx, &sum, 1, geo.batch * rows * strides[0])?,
        &wide,
    )?;
    let mut narrow = vec![geo.out_channels, geo.batch];
    narrow.extend(geo.out_spatial);
    let value = ctx.e.extract_slice(
        wide.value,
        &vec![0; nd + 2],
        &narrow,
        &vec![1; nd + 2],
        &narrow,
        acc,
    )?;
    Ok(Tensor {
        value,
        shape: narrow,
        dtype: acc,
    })
}

/// What the taps' products of [`shifted_products`] read: the weight tap by tap `[t, cout, c]`
/// (the taps in order, the last kernel dimension fastest) and the flattened canvas `[c, L]`
/// (`shape`) with its spatial dimensions' `strides`.
struct Taps<'c, 'a, 's> {
    per_tap: Value<'c, 'a>,
    flat: Value<'c, 'a>,
    shape: [i64; 2],
    strides: &'s [i64],
    acc: DType,
}

impl<'c> Taps<'c, '_, '_> {
    /// The sum `[cout, columns]` of the taps' products over `columns` columns of the output,
    /// from column `first` (an index in `e`'s block; `None`: 0): the first tap's product
    /// starts from zeros, an `scf.for` over the others adds theirs. One product in a loop,
    /// not one per tap: a 7 x 7 kernel's 49 products, each scheduled (inside a thread's
    /// chunk, where identical products are not merged), took 27 s to compile.
    fn sum<'b>(
        &self,
        e: &Emit<'c, 'b>,
        geo: &Geometry<'_>,
        first: Option<Value<'c, 'b>>,
        columns: i64,
    ) -> Result<Value<'c, 'b>> {
        let zeros = e.splat(&[geo.out_channels, columns], self.acc, Scalar::Int(0))?;
        let sum = self.add_tap(e, geo, (first, columns), e.index(0)?, zeros)?;
        let taps: i64 = geo.kernel.iter().product();
        if taps == 1 {
            return Ok(sum);
        }
        let (one, count) = (e.index(1)?, e.index(taps)?);
        let sum = for_loop(e, one, count, one, &[sum], |b, tap, carried| {
            let part = (first.map(reuse), columns);
            Ok(vec![self.add_tap(b, geo, part, tap, nth(carried, 0)?)?])
        })?;
        nth(&sum, 0)
    }

    /// The sum `[cout, columns]` from column `first`, block by block: each block's sum and
    /// the canvas columns its taps read take at most half of the target's L2
    /// ([`column_block`]), so that every tap after the first finds both there (a batch of 8
    /// images of 40 x 40 and 64 channels sums 1.8 MB of columns a thread).
    fn blocked<'b>(
        &self,
        e: &Emit<'c, 'b>,
        geo: &Geometry<'_>,
        first: Value<'c, 'b>,
        columns: i64,
        target: &Target,
    ) -> Result<Value<'c, 'b>> {
        let block = column_block(target, geo.out_channels + self.shape[0], self.acc, columns);
        if block == columns {
            return self.sum(e, geo, Some(first), columns);
        }
        let (whole, rest) = (columns / block * block, columns % block);
        let shape = [geo.out_channels, columns];
        let init = e.empty(&shape, self.acc)?;
        let (zero, end, step) = (e.index(0)?, e.index(whole)?, e.index(block)?);
        let blocks = for_loop(e, zero, end, step, &[init], |b, at, carried| {
            let from = b.same("arith.addi", &[reuse(first), at])?;
            let part = self.sum(b, geo, Some(from), block)?;
            let at = (1, at, Some(block));
            Ok(vec![b.insert_at(
                part,
                nth(carried, 0)?,
                &shape,
                at,
                false,
            )?])
        })?;
        let blocks = nth(&blocks, 0)?;
        if rest == 0 {
            return Ok(blocks);
        }
        let at = e.index(whole)?;
        let from = e.same("arith.addi", &[first, at])?;
        let part = self.sum(e, geo, Some(from), rest)?;
        e.insert_at(part, blocks, &shape, (1, at, Some(rest)), false)
    }

    /// `sum` plus the product of tap `tap` (an index) over `columns` columns from `first`.
    fn add_tap<'b>(
        &self,
        e: &Emit<'c, 'b>,
        geo: &Geometry<'_>,
        (first, columns): (Option<Value<'c, 'b>>, i64),
        tap: Value<'c, 'b>,
        sum: Value<'c, 'b>,
    ) -> Result<Value<'c, 'b>> {
        let (nd, acc) = (geo.kernel.len(), self.acc);
        let channels = self.shape[0];
        // The tap's shift in the canvas: its position, last dimension fastest, times the
        // dilation and the dimension's stride.
        let mut rest = tap;
        let mut shift = first.map_or_else(|| e.index(0), Ok)?;
        for i in (0..nd).rev() {
            let extent = e.index(geo.kernel[i])?;
            let position = e.same("arith.remui", &[rest, extent])?;
            rest = e.same("arith.divui", &[rest, extent])?;
            let step = e.index(geo.dilation[i] * self.strides[i])?;
            let offset = e.same("arith.muli", &[position, step])?;
            shift = e.same("arith.addi", &[shift, offset])?;
        }
        let taps = geo.kernel.iter().product();
        let weights = [taps, geo.out_channels, channels];
        let left = e.extract_at(reuse(self.per_tap), &weights, 0, tap, None, acc)?;
        let right = e.extract_at(reuse(self.flat), &self.shape, 1, shift, Some(columns), acc)?;
        e.named_linalg("linalg.matmul", &[left, right], sum, &[])
    }
}

/// The weight of convolution `node` in its tap-major layout `[k…, cout, c]` when the graph
/// hands it over so: as `permute(t, back)` of a tensor `t` of that layout (see
/// [`tap_major_permutations`]; `fxmlir.passes.taps` writes it, `t` hoisted out of the kernel).
fn tap_major_weight<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    node: &Node,
    nd: usize,
) -> Result<Option<Tensor<'c, 'a>>> {
    let Some(permute) = ctx
        .producer(node, 1)
        .filter(|p| p.target == "aten.permute.default")
    else {
        return Ok(None);
    };
    let (_, back) = tap_major_permutations(nd);
    if ctx.int_list(permute, 1)? != back {
        return Ok(None);
    }
    Ok(Some(ctx.tensor(permute, 0)?))
}

/// Columns of one image's output from which a convolution of several images without groups
/// is one product per image by the same weight ([`per_image_product`]) rather than one
/// product over every image's columns, which reads its input and writes its sum channel-major
/// (`[c, n, …]`, `[cout, n, …]`) and so costs a transposition on either side (ResNet-50 at
/// 224, batch 8: 447 ms, per image 401). Narrower images keep the one product: products per
/// image at 14 x 14 (196 columns, a short last column tile in each) measured no faster.
const PER_IMAGE_MIN_COLUMNS: i64 = 512;

/// The output columns of one image when a convolution of `geo` is [`per_image_product`]: a
/// fixed batch of several images (a symbolic one is a loop over images, each a convolution
/// of one), no groups, fixed output sizes of at least [`PER_IMAGE_MIN_COLUMNS`] an image.
fn per_image_columns(geo: &Geometry<'_>) -> Option<i64> {
    let fixed =
        !sizes::is_symbolic(geo.batch) && geo.out_spatial.iter().all(|&d| !sizes::is_symbolic(d));
    if !fixed || geo.groups != 1 || geo.batch == 1 {
        return None;
    }
    let columns = geo.out_spatial.iter().product::<i64>();
    (columns >= PER_IMAGE_MIN_COLUMNS).then_some(columns)
}

/// Whether a convolution of `geo` over `padded` (of `padded_dtype`) multiplies its input as
/// it lies: a 1 x 1 kernel at stride 1 with nothing to convert, whose input's channels and
/// positions are its patch matrix's rows and columns.
fn pointwise(geo: &Geometry<'_>, padded_dtype: DType, acc: DType) -> bool {
    geo.kernel.iter().all(|&k| k == 1) && geo.stride.iter().all(|&s| s == 1) && padded_dtype == acc
}

/// Float convolution as a matrix product: the patches
/// `p[g, (c, k…), (n, o…)] = x[n, g, c, o·s + k·d]` (converted to `acc`) and the weight as
/// [g, cout / g, c·k…] give `w @ p`, [cout, n, o…]: one `linalg.matmul` without groups, one
/// `linalg.batch_matmul` over the groups with them. A pointwise convolution of one image
/// multiplies the input itself, whose layout [c, (h, w)] is its patch matrix. Several images
/// with wide enough outputs are [`per_image_product`]. Returns the sum and the map that reads
/// it as the output `[n, cout, o…]` (see [`epilogue`]).
fn im2col_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    geo: &Geometry<'_>,
    padded: &Tensor<'c, 'a>,
    weight: &Tensor<'c, 'a>,
    acc: DType,
) -> Result<(Tensor<'c, 'a>, String)> {
    if let Some(columns) = per_image_columns(geo) {
        return per_image_product(ctx, geo, padded, weight, (acc, columns));
    }
    let (taps, columns) = patch_sizes(geo)?;
    // Without groups, no group loop: the patches and the product are plain matrices.
    let lead: Vec<i64> = if geo.groups > 1 {
        vec![geo.groups]
    } else {
        vec![]
    };
    let g = lead.len();
    let patches = if geo.batch == 1 && g == 0 && pointwise(geo, padded.dtype, acc) {
        // The input, materialized in the padded matrix: a producer the fusion stage can point
        // there (a concatenation's parts) writes there; any other is copied there, as before.
        let multiple = patch_columns(ctx.target, acc);
        computed_padded(ctx, &[taps, columns], acc, (1, multiple), || {
            Ok(padded.clone())
        })?
    } else {
        gathered_patches(ctx, geo, padded, &lead, acc)?
    };
    let rows = per_group(geo.out_channels, geo.groups)?;
    let matrix = ctx.reshape(weight, &[lead.clone(), vec![rows, taps]].concat())?;
    let matrix = ctx.cast(&matrix, acc)?;
    let product_shape = [lead, vec![rows, patches.shape[g + 1]]].concat();
    let zero = ctx.e.splat(&product_shape, acc, Scalar::Int(0))?;
    let name = if g == 0 {
        "linalg.matmul"
    } else {
        "linalg.batch_matmul"
    };
    let product = ctx
        .e
        .named_linalg(name, &[matrix.value, patches.value], zero, &[])?;
    let product = Tensor {
        value: product,
        shape: product_shape,
        dtype: acc,
    };
    let mut shape = vec![geo.out_channels, geo.batch];
    shape.extend(geo.out_spatial);
    let product = ctx.reshape(&first_entries(ctx, &product, g + 1, columns)?, &shape)?;
    let mut expected = vec![geo.batch, geo.out_channels];
    expected.extend(geo.out_spatial);
    as_output(ctx, product, &expected)
}

/// A convolution of several images, without groups, as one product per image by the same
/// weight `[cout, (c, k…)]`: a `linalg.batch_matmul` over [`SHARED_LEFT_BATCH_MAPS`] of the
/// images' patch matrices `[n, (c, k…), (o…)]` (`columns` per image), whose sum
/// `[n, cout, (o…)]` is the output's layout. A pointwise one multiplies the input where it
/// lies; any other gathers each image's patches. The schedule cuts the batch across the
/// threads when it divides (see `pipeline::schedule`'s thread chunks).
fn per_image_product<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    geo: &Geometry<'_>,
    padded: &Tensor<'c, 'a>,
    weight: &Tensor<'c, 'a>,
    (acc, columns): (DType, i64),
) -> Result<(Tensor<'c, 'a>, String)> {
    let nd = geo.kernel.len();
    let (depth, _) = patch_sizes(geo)?;
    let matrix = [geo.batch, depth, columns];
    let patches = if pointwise(geo, padded.dtype, acc) {
        ctx.reshape(padded, &matrix)?
    } else {
        // Loops: n, c, k…, o….
        let mut read = dims([0, 1]);
        read.extend(taps(geo.stride, geo.dilation, |i| 2 + nd + i, |i| 2 + i));
        let mut shape = vec![geo.batch, geo.in_per_group];
        shape.extend(geo.kernel);
        shape.extend(geo.out_spatial);
        ctx.reshape(&gather(ctx, padded, &read, shape, acc)?, &matrix)?
    };
    let weight = ctx.cast(&ctx.reshape(weight, &[geo.out_channels, depth])?, acc)?;
    let shape = [geo.batch, geo.out_channels, columns];
    let product = ("linalg.batch_matmul", SHARED_LEFT_BATCH_MAPS);
    let sum = mapped_product(ctx, product, (&weight, &patches), &shape, acc)?;
    let mut expected = vec![geo.batch, geo.out_channels];
    expected.extend(geo.out_spatial);
    Ok((ctx.reshape(&sum, &expected)?, emit::identity_map(nd + 2)))
}

/// The rows (`(c, k…)`, a group's) and columns (`(n, o…)`) of a convolution's patch matrix.
fn patch_sizes(geo: &Geometry<'_>) -> Result<(i64, i64)> {
    let taps = sizes::product(&[&[geo.in_per_group][..], geo.kernel].concat())?;
    let columns = sizes::product(&[&[geo.batch][..], geo.out_spatial].concat())?;
    Ok((taps, columns))
}

/// The patch matrix `p[(g), (c, k…), (n, o…)]` of [`im2col_product`], gathered from the
/// padded input (one generic) and converted to `acc`; `lead` is `[groups]` or empty.
fn gathered_patches<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    geo: &Geometry<'_>,
    padded: &Tensor<'c, 'a>,
    lead: &[i64],
    acc: DType,
) -> Result<Tensor<'c, 'a>> {
    let nd = geo.kernel.len();
    let channels = geo.in_per_group;
    let g = lead.len();
    let mut grouped_input = vec![geo.batch];
    grouped_input.extend(lead);
    grouped_input.push(channels);
    grouped_input.extend(&padded.shape[2..]);
    let input = ctx.reshape(padded, &grouped_input)?;
    // Loops: (g), c, k…, n, o… (the patch matrix's rows, then its columns).
    let mut patch_shape = lead.to_vec();
    patch_shape.push(channels);
    patch_shape.extend(geo.kernel);
    patch_shape.push(geo.batch);
    patch_shape.extend(geo.out_spatial);
    let mut read = dims([g + 1 + nd]);
    read.extend(dims(0..g + 1));
    read.extend(taps(
        geo.stride,
        geo.dilation,
        |i| g + 2 + nd + i,
        |i| g + 1 + i,
    ));
    let (taps, columns) = patch_sizes(geo)?;
    let matrix = [lead.to_vec(), vec![taps, columns]].concat();
    computed_padded(
        ctx,
        &matrix,
        acc,
        (g + 1, patch_columns(ctx.target, acc)),
        || gather(ctx, &input, &read, patch_shape, acc),
    )
}

/// The patches of `source`: one parallel generic over the loops of `shape`, each element read
/// from `source` through the map whose results are `read` (a window's tap positions) and
/// converted to `dtype`.
fn gather<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    source: &Tensor<'c, 'a>,
    read: &[String],
    shape: Vec<i64>,
    dtype: DType,
) -> Result<Tensor<'c, 'a>> {
    let rank = shape.len();
    let init = ctx.e.empty(&shape, dtype)?;
    let from = source.dtype;
    let value = ctx.e.generic(
        &[(source.value, affine_map(rank, read))],
        &[(init, emit::identity_map(rank))],
        &vec![Iter::Parallel; rank],
        |b, v| Ok(vec![b.convert(v[0], from, dtype)?]),
    )?[0];
    Ok(Tensor {
        value,
        shape,
        dtype,
    })
}
