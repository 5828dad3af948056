"""fxmlir's own decompositions, added to core ATen's for every graph it traces.

PyTorch's fused inference fast paths, traced as the ops they fuse. In eval mode without
gradients, ``nn.TransformerEncoderLayer`` (batch-first, ReLU or GELU) calls one ATen op for the
whole layer, ``aten._transformer_encoder_layer_fwd``, which has no decomposition: left whole it
runs in eager PyTorch and splits the graph around it. Here it becomes the layer written out
(the linear layers, ``scaled_dot_product_attention``, layer norms and residual additions that
the module's own slow path computes), which fxmlir lowers and fuses like any other model. A
layer given a mask keeps the fused op: the fast path's masks come in several forms (key
padding, per-head, merged) whose conventions are the native kernel's own.

Backward ops that core ATen leaves whole, so that a training step's backward graph compiles
in one piece: a convolution's backward as convolutions (the input's gradient is the transposed
convolution of the output's; the weight's a grouped convolution of the input by the output's
gradient with batch and channels swapped, or for a 1x1 kernel one matrix product), max
pooling's as PyTorch's own scatter-add decomposition, and average pooling's (fixed and
adaptive windows) as products with the windows' membership matrices.

Dropout in training, so that a training step's forward graph compiles in one piece: only the
uniform draws run eagerly (``torch.rand``, before the compiled partition), the rest is
compiled. Its masks are therefore not eager's (which draws with ``bernoulli``), as with
Inductor; they follow ``torch.manual_seed``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table

aten = torch.ops.aten


def _self_attention(
    x: torch.Tensor,
    heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
) -> torch.Tensor:
    """Multi-head self-attention of ``x`` [B, L, E] with packed q/k/v projections."""
    batch, length, embed = x.shape
    q, k, v = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(batch, length, heads, embed // heads).transpose(1, 2)

    scale = 1.0 / math.sqrt(embed // heads)
    attended = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=scale)
    return F.linear(attended.transpose(1, 2).reshape(batch, length, embed), proj_weight, proj_bias)


def transformer_encoder_layer(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_type: int | None = None,
) -> Any:
    """``aten._transformer_encoder_layer_fwd`` without a mask on a [B, L, E] input;
    ``NotImplemented`` (the op stays whole) otherwise."""
    if mask is not None or src.dim() != 3 or src.is_nested:
        return NotImplemented

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
        return F.linear(hidden, ffn_weight_2, ffn_bias_2)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def convolution_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: list[int] | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> Any:
    """``aten.convolution_backward`` of a convolution that is not transposed, as convolutions;
    ``NotImplemented`` (the op stays whole) for a transposed one."""
    if transposed:
        return NotImplemented
    spatial = range(2, x.dim())
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        # Output padding: the input positions after the last window's reach.
        extra = [
            x.shape[d]
            + 2 * padding[i]
            - dilation[i] * (weight.shape[d] - 1)
            - 1
            - (grad.shape[d] - 1) * stride[i]
            for i, d in enumerate(spatial)
        ]
        grad_input = aten.convolution.default(
            grad, weight, None, stride, padding, dilation, True, extra, groups
        )
    pointwise = groups == 1 and all(weight.shape[d] == 1 for d in spatial) and not any(padding)
    if output_mask[1] and pointwise:
        # A 1x1 kernel: w'[o, c] = sum over n and o… of grad[n, o, o…] · x[n, c, o·s], one
        # matrix product over every batch element and position.
        reached = (slice(0, (grad.shape[d] - 1) * s + 1, s) for d, s in zip(spatial, stride))
        taken = x[(slice(None), slice(None), *reached)]
        rows = grad.transpose(0, 1).reshape(grad.shape[1], -1)
        columns = taken.transpose(0, 1).reshape(x.shape[1], -1)
        grad_weight = (rows @ columns.t()).reshape(weight.shape)
    elif output_mask[1] and groups > 1 and x.shape[1] > groups:
        grad_weight = _grouped_weight_gradient(grad, x, weight, stride, padding, dilation, groups)
    elif output_mask[1]:
        # w'[(g, o), c, k…] = sum over n and o… of x[n, (g, c), o·s + k·d] · grad[n, (g, o), o…]:
        # a grouped convolution whose batch is the input's channels within a group, whose
        # input channels are (group, n) and whose filters the gradient's channels, stride and
        # dilation swapping roles; windows past the kernel (inputs no window reached) are cut.
        batch, rest = x.shape[0], x.shape[2:]
        within = x.shape[1] // groups
        outs = grad.shape[1] // groups
        rows = x.reshape(batch, groups, within, *rest).transpose(0, 2)
        rows = rows.reshape(within, groups * batch, *rest)
        filters = grad.reshape(batch, groups, outs, *grad.shape[2:]).permute(
            1, 2, 0, *range(3, grad.dim() + 1)
        )
        filters = filters.reshape(groups * outs, batch, *grad.shape[2:])
        swapped = aten.convolution.default(
            rows, filters, None, dilation, padding, stride, False, [0] * len(stride), groups
        )
        kernel = [slice(None), slice(None)] + [slice(0, weight.shape[d]) for d in spatial]
        grad_weight = swapped[tuple(kernel)].transpose(0, 1).contiguous()
    if output_mask[2]:
        grad_bias = grad.sum([0, *spatial])
    return grad_input, grad_weight, grad_bias


def _grouped_weight_gradient(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    """The weight gradient of a grouped convolution with several input channels per group:
    w'[(g, o), c, k…] = sum over n and positions p of grad[n, (g, o), p] · x[n, (g, c), p·s +
    k·d], for each group one matrix product of the gradient's rows (o x (n, p)) by the input's
    patches ((n, p) x (c, k…)), the groups batched. As a convolution with batch and channels
    swapped (the other weight gradients), its reduction was only the batch and the kernel,
    which the lowering computed as a plain loop nest: resnext50's grouped 3x3 weight
    gradients took a fifth of its backward."""
    spatial = range(2, x.dim())
    pad = [p for size in reversed(padding) for p in (size, size)]
    padded = aten.constant_pad_nd.default(x, pad) if any(padding) else x
    positions = grad.shape[2:]
    taps = [
        padded[
            (
                slice(None),
                slice(None),
                *(
                    slice(k * d, k * d + (n - 1) * s + 1, s)
                    for k, d, n, s in zip(offsets, dilation, positions, stride)
                ),
            )
        ]
        for offsets in itertools.product(*(range(weight.shape[d]) for d in spatial))
    ]
    batch, within, outs = x.shape[0], x.shape[1] // groups, grad.shape[1] // groups
    count = math.prod(positions)
    patches = torch.stack(taps, 2).reshape(batch, groups, within * len(taps), count)
    patches = patches.permute(1, 0, 3, 2).reshape(groups, batch * count, within * len(taps))
    rows = grad.reshape(batch, groups, outs, count).permute(1, 2, 0, 3)
    rows = rows.reshape(groups, outs, batch * count)
    return torch.bmm(rows, patches).reshape(weight.shape)


Window = tuple[torch.Tensor, torch.Tensor]


def _spread(
    grad: torch.Tensor, x: torch.Tensor, windows: list[Window], divisor: Any
) -> torch.Tensor:
    """The input's gradient of window averages over the last two dimensions: each output's
    gradient, divided by ``divisor`` (per output, [out_h, out_w], or one number), added to
    every input position of its window. ``windows`` holds, per axis, each output's window
    within the input (start and end, int64 tensors of the outputs). Windows are separable, so
    the sum is two products with 0/1 membership matrices: grad_in[h, w] = Σ_i Σ_j rows[i, h] ·
    (grad / divisor)[i, j] · cols[j, w]. Everything is computed from ``arange`` (no constant
    tensors, which aot_autograd's functional graph rejects)."""
    rows, cols = (
        ((p >= start[:, None]) & (p < end[:, None])).to(grad.dtype)
        for (start, end), p in (
            (window, torch.arange(size)) for window, size in zip(windows, x.shape[-2:])
        )
    )
    return (rows.t() @ (grad / divisor) @ cols).to(x.dtype)


def _area(lengths: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """[out_h, out_w]: the product of each output's two window lengths."""
    return (lengths[0][:, None] * lengths[1][None, :]).to(dtype)


def avg_pool2d_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """``aten.avg_pool2d_backward``: each output's window along an axis starts at ``i·s - p``
    and ends ``k`` later, cut at the padded input's end; the divisor is the override, or the
    product of the two windows' lengths, counting padding (``count_include_pad``) or only the
    input."""

    def pair(values: list[int], default: list[int]) -> list[int]:
        values = list(values) or default
        return values * 2 if len(values) == 1 else values

    kernel = pair(kernel_size, [])
    steps = pair(stride, kernel)
    pads = pair(padding, [0])
    windows, lengths = [], []
    for size, out, k, s, p in zip(x.shape[-2:], grad.shape[-2:], kernel, steps, pads):
        start = torch.arange(out) * s - p
        end = torch.clamp(start + k, max=size + p)
        inside = (torch.clamp(start, min=0), torch.clamp(end, max=size))
        windows.append(inside)
        lengths.append(end - start if count_include_pad else inside[1] - inside[0])
    divisor = divisor_override or _area(lengths, grad.dtype)
    return _spread(grad, x, windows, divisor)


def adaptive_avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``aten._adaptive_avg_pool2d_backward``: output ``i`` of ``out`` averages input positions
    ``floor(i·in/out)`` to ``ceil((i+1)·in/out)``, divided by the window's area."""
    windows = []
    for size, out in zip(x.shape[-2:], grad.shape[-2:]):
        i = torch.arange(out)
        windows.append(
            (
                torch.div(i * size, out, rounding_mode="floor"),
                -torch.div(-(i + 1) * size, out, rounding_mode="floor"),
            )
        )
    lengths = [end - start for start, end in windows]
    return _spread(grad, x, windows, _area(lengths, grad.dtype))


def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> Any:
    """``aten.native_dropout`` in training: the uniform draws are a ``rand`` of the input's
    shape, which reads no tensor, so it runs in eager PyTorch (from its generator, under
    ``torch.manual_seed``) before the compiled partition instead of cutting the graph in two
    around each dropout; the comparison, the mask and the scaling are compiled with their
    neighbours. PyTorch's own decomposition (``rand_like``) reads the input, and each dropout
    still split the graph. Other cases (evaluation, p = 0 or 1, integers) are left whole."""
    if not train or not 0 < p < 1 or not x.dtype.is_floating_point:
        return NotImplemented
    # Half-precision draws would round p's threshold to 8 or 11 bits: drawn in f32 at least.
    draws = torch.promote_types(x.dtype, torch.float32)
    keep = torch.rand(x.shape, dtype=draws, device=x.device) > p
    return keep * x * float(1.0 / (1.0 - p)), keep


def index_add(
    x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, alpha: Any = 1
) -> torch.Tensor:
    """``index_add`` as a scatter-add of ``source`` along ``dim`` (the index spread over the
    source's other dimensions): duplicates add up, and an index out of range, negative ones
    included, raises ``RuntimeError`` as eager's ``index_add`` does. With an ``alpha``, eager
    takes another path, which raises ``IndexError``, as core ATen's decomposition (an
    ``index_put``) does, which this then is."""
    if alpha != 1:
        return decomposition_table[aten.index_add.default](x, dim, index, source, alpha=alpha)
    if source.dim() == 0:
        source = source.reshape(1)
    dim = dim % max(x.dim(), 1)
    shape = [1] * source.dim()
    shape[dim] = -1
    spread = index.reshape(shape).expand(source.shape)
    if x.dim() == 0:
        return aten.scatter_add(x.reshape(1), 0, spread, source).reshape(())
    return aten.scatter_add(x, dim, spread, source)


#: Op -> the function that writes it out.
DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer,
    aten.convolution_backward.default: convolution_backward,
    aten.max_pool2d_with_indices_backward.default: decomposition_table[
        aten.max_pool2d_with_indices_backward.default
    ],
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    aten.native_dropout.default: native_dropout,
    aten.index_add.default: index_add,
}
