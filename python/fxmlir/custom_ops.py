"""fxmlir's own ops, ``torch.ops.fxmlir.*``: the bf16 products on operands packed in pairs
along the reduction, which AVX512-BF16's dot product multiplies (``vdpbf16ps``), and the f32
product by a right operand in panels of register tile columns.

``fxmlir::mm_pairs(a, pairs)`` is ``a @ b`` with ``b`` packed as ``pairs[k // 2, n, k % 2] =
b[k, n]``; ``fxmlir::conv_pairs(x, pairs, stride, padding, dilation)`` is a convolution without
groups by a weight packed in pairs of input channels. Both return the f32 accumulator. The
rewrite that packs weights so is :mod:`fxmlir.passes.bf16_pairs`.
``fxmlir::mm_panels(a, panels, bias)`` is the f32 ``a @ b [+ bias]`` with ``b`` (``k x n``)
given as ``panels[j // w, k, j % w] = b[k, j]``, written by :mod:`fxmlir.passes.panels`. The
kernel's lowering of each is native (``src/lower/linear.rs``, ``src/lower/conv.rs``). Each op
has an eager implementation here, which runs where the op is left to PyTorch (a partition's
eager part), and a fake one, with which graphs holding it are traced.

:func:`register` defines them; the package calls it once, when it is imported.
"""

from __future__ import annotations

import torch


def register() -> None:
    """Defines ``fxmlir::mm_pairs``, ``fxmlir::conv_pairs`` and ``fxmlir::mm_panels`` with their
    eager and fake implementations, each unless it is defined already: torch refuses to define
    an op twice in one process, and an op outlives the module that defined it (a reload)."""
    ops = (
        ("mm_pairs", _mm_pairs, _mm_pairs_fake),
        ("conv_pairs", _conv_pairs, _conv_pairs_fake),
        ("mm_panels", _mm_panels, _mm_panels_fake),
    )
    for name, eager, fake in ops:
        if not hasattr(torch.ops.fxmlir, name):
            torch.library.custom_op(f"fxmlir::{name}", eager, mutates_args=()).register_fake(fake)


def _mm_pairs(a: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``a @ b`` accumulated in float32, for a bf16 ``a`` (m x k) and ``b`` (k x n) given as
    ``pairs`` (k/2 x n x 2, ``pairs[k // 2, n, k % 2] = b[k, n]``)."""
    _check_mm_pairs(a, pairs)
    half, n, _ = pairs.shape
    return a.float() @ pairs.float().permute(0, 2, 1).reshape(2 * half, n)


def _check_mm_pairs(a: torch.Tensor, pairs: torch.Tensor) -> None:
    torch._check(
        a.dtype == torch.bfloat16 and pairs.dtype == torch.bfloat16,
        lambda: f"mm_pairs takes bfloat16 operands, got {a.dtype} and {pairs.dtype}",
    )
    shapes_match = (
        a.dim() == 2
        and pairs.dim() == 3
        and pairs.shape[2] == 2
        and a.shape[1] == 2 * pairs.shape[0]
    )
    torch._check(
        shapes_match,
        lambda: f"mm_pairs: shapes {list(a.shape)} and {list(pairs.shape)} do not match",
    )


def _mm_pairs_fake(a: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    _check_mm_pairs(a, pairs)
    return a.new_empty((a.shape[0], pairs.shape[1]), dtype=torch.float32)


def _mm_panels(
    a: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``a @ b [+ bias]`` for float32 ``a`` (m x k), ``b`` (k x n) given as ``panels`` (n / w x
    k x w, ``panels[j // w, k, j % w] = b[k, j]``) and ``bias`` (n)."""
    _check_mm_panels(a, panels, bias)
    count, k, width = panels.shape
    product = a @ panels.permute(1, 0, 2).reshape(k, count * width)
    return product if bias is None else product + bias


def _check_mm_panels(a: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None) -> None:
    dtypes = (a.dtype, panels.dtype) + (() if bias is None else (bias.dtype,))
    torch._check(
        all(d == torch.float32 for d in dtypes),
        lambda: f"mm_panels takes float32 operands, got {', '.join(map(str, dtypes))}",
    )
    shapes_match = (
        a.dim() == 2
        and panels.dim() == 3
        and a.shape[1] == panels.shape[1]
        and (bias is None or list(bias.shape) == [panels.shape[0] * panels.shape[2]])
    )
    torch._check(
        shapes_match,
        lambda: (
            f"mm_panels: shapes {list(a.shape)} and {list(panels.shape)}"
            + ("" if bias is None else f" and bias {list(bias.shape)}")
            + " do not match"
        ),
    )


def _mm_panels_fake(
    a: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    _check_mm_panels(a, panels, bias)
    return a.new_empty((a.shape[0], panels.shape[0] * panels.shape[2]))


def _conv_pairs(
    x: torch.Tensor,
    pairs: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    """The convolution of a bf16 ``x`` (n x c x s...) by a weight given in pairs of input
    channels (``pairs[oc, c // 2, k..., c % 2] = w[oc, c, k...]``; one zero channel more for an
    odd ``c``), without groups, accumulated and returned in float32."""
    _check_conv_pairs(x, pairs)
    nd = pairs.dim() - 3
    order = [0, 1, nd + 2, *range(2, nd + 2)]
    out, half = pairs.shape[:2]
    weight = pairs.permute(order).reshape(out, 2 * half, *pairs.shape[2 : nd + 2])
    weight = weight[:, : x.shape[1]].float()
    return torch.convolution(x.float(), weight, None, stride, padding, dilation, False, [0] * nd, 1)


def _check_conv_pairs(x: torch.Tensor, pairs: torch.Tensor) -> None:
    torch._check(
        x.dtype == torch.bfloat16 and pairs.dtype == torch.bfloat16,
        lambda: f"conv_pairs takes bfloat16 operands, got {x.dtype} and {pairs.dtype}",
    )
    nd = pairs.dim() - 3
    fits = (
        1 <= nd <= 3
        and x.dim() == nd + 2
        and pairs.shape[-1] == 2
        and 0 <= 2 * pairs.shape[1] - x.shape[1] <= 1
    )
    torch._check(
        fits,
        lambda: (
            f"conv_pairs: input {list(x.shape)} does not match packed weight {list(pairs.shape)}"
        ),
    )


def _conv_pairs_fake(
    x: torch.Tensor,
    pairs: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    _check_conv_pairs(x, pairs)
    nd = pairs.dim() - 3
    size = [
        (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (pairs.shape[2 + i] - 1) - 1) // stride[i]
        + 1
        for i in range(nd)
    ]
    return x.new_empty((x.shape[0], pairs.shape[0], *size), dtype=torch.float32)
