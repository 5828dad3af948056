"""PyTorch's fused inference fast paths, traced as the ops they fuse. In eval mode without
gradients, ``nn.TransformerEncoderLayer`` (batch-first, ReLU or GELU) calls one ATen op for the
whole layer, ``aten._transformer_encoder_layer_fwd``, which has no decomposition: left whole it
runs in eager PyTorch and splits the graph around it. Here it becomes the layer written out
(the linear layers, ``scaled_dot_product_attention``, layer norms and residual additions that
the module's own slow path computes), which fxmlir lowers and fuses like any other model.

A layer given a mask keeps the fused op: the fast path's masks come in several forms (key
padding, per-head, merged) whose conventions are the native kernel's own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

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


#: Fast-path op -> the function that writes it out.
DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer,
}
