"""bf16 matrix products on AVX512-BF16's dot product.

``vdpbf16ps`` multiplies 16 pairs of bf16 values by 16 other pairs and adds each pair's two
products to an f32 lane: twice the multiply-adds of an f32 FMA per instruction. It wants the
right operand of ``a @ b`` packed in pairs along the reduction, ``pairs[k // 2, n, k % 2] =
b[k, n]``, so that one 64-byte load holds a pair for each of 16 columns. Packing costs a copy of
``b``: a weight is packed here, once; the kernel packs the right operand of a product of two
computed operands (attention's) itself, on every call, where enough rows repay the copy
(``computed_pairs`` in ``src/lower/linear.rs``).

So before hoisting, each bf16 ``mm`` / ``addmm`` whose right operand the graph computes from
parameters alone (a linear layer's ``t(weight)``) becomes

    pairs = clone(permute(view(b, [k // 2, 2, n]), [0, 2, 1]))   # weight-only: hoisted
    out = _to_copy(mm_pairs(a, pairs) [+ bias], bfloat16)

``fxmlir::mm_pairs`` (defined here, with an eager implementation for PyTorch and a fake one for
tracing) returns the f32 accumulator, so the bias is added before the one rounding to bf16, as
PyTorch's own bf16 ``addmm`` does. :mod:`fxmlir.passes.hoist` then computes ``pairs`` once, outside
the kernel; the kernel's schedule turns the product into dot products (see
``docs/architecture.md``). A width that is no multiple of 16 (GPT-2's vocabulary of 50257) is
padded with zero columns, which the result drops again, and so is one of a multiple of 1024
columns, whose packed rows would be a multiple of 4 KiB apart. Hosts without AVX512-BF16, dynamic
shapes, an odd ``k`` and narrow products of such widths keep the plain bf16 product.

bf16 convolutions without groups whose weight is weight-only become

    pairs = clone(permute(view(w, [oc, c // 2, 2, *k]), [0, 1, 3, ..., 2]))   # hoisted
    out = _to_copy(conv_pairs(x, pairs, stride, padding, dilation) [+ bias], bfloat16)

with the weight's input channels in pairs (an odd count gets a zero channel first): the kernel
computes ``weight @ patches`` with the patches written in pairs of channels as it gathers them,
and the weight as it is packed here (see ``fxmlir.conv_pairs`` in ``src/lower/conv.rs``).
"""

from __future__ import annotations

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

from .. import _fxmlir
from . import hoist

aten = torch.ops.aten

#: The columns of one dot product: a product's width is padded to a multiple of it.
LANES = 16

#: Packed rows of a multiple of this many columns are a multiple of 4 KiB apart: the rows a
#: register tile walks down then share cache sets and evict one another (a 1 x 2816 x 1024
#: product took 0.11 ms, 0.045 with its rows ``SKEW`` columns longer; 128 x 4096 x 4096 8.2
#: ms, 6.4). Such widths get ``SKEW`` more zero columns.
ALIASED_COLUMNS = 1024
SKEW = 32

#: The narrowest product whose width is padded (by at most 15 columns, an eighth of it: as much
#: as :mod:`fxmlir.passes.hoist` materialises); narrower ones whose width is no multiple of
#: ``LANES`` are left as they are.
MIN_PADDED = 128


@torch.library.custom_op("fxmlir::mm_pairs", mutates_args=())
def mm_pairs(a: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``a @ b`` accumulated in float32, for a bf16 ``a`` (m x k) and ``b`` (k x n) given as
    ``pairs`` (k/2 x n x 2, ``pairs[k // 2, n, k % 2] = b[k, n]``)."""
    _check(a, pairs)
    half, n, _ = pairs.shape
    return a.float() @ pairs.float().permute(0, 2, 1).reshape(2 * half, n)


def _check(a: torch.Tensor, pairs: torch.Tensor) -> None:
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


@mm_pairs.register_fake
def _mm_pairs_fake(a: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    _check(a, pairs)
    return a.new_empty((a.shape[0], pairs.shape[1]), dtype=torch.float32)


@torch.library.custom_op("fxmlir::conv_pairs", mutates_args=())
def conv_pairs(
    x: torch.Tensor,
    pairs: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    """The convolution of a bf16 ``x`` (n x c x s...) by a weight given in pairs of input
    channels (``pairs[oc, c // 2, k..., c % 2] = w[oc, c, k...]``; one zero channel more for an
    odd ``c``), without groups, accumulated and returned in float32."""
    _check_conv(x, pairs)
    nd = pairs.dim() - 3
    order = [0, 1, nd + 2, *range(2, nd + 2)]
    out, half = pairs.shape[:2]
    weight = pairs.permute(order).reshape(out, 2 * half, *pairs.shape[2 : nd + 2])
    weight = weight[:, : x.shape[1]].float()
    return torch.convolution(x.float(), weight, None, stride, padding, dilation, False, [0] * nd, 1)


def _check_conv(x: torch.Tensor, pairs: torch.Tensor) -> None:
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


@conv_pairs.register_fake
def _conv_pairs_fake(
    x: torch.Tensor,
    pairs: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    _check_conv(x, pairs)
    nd = pairs.dim() - 3
    size = [
        (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (pairs.shape[2 + i] - 1) - 1) // stride[i]
        + 1
        for i in range(nd)
    ]
    return x.new_empty((x.shape[0], pairs.shape[0], *size), dtype=torch.float32)


def fake_val(node: object) -> FakeTensor | None:
    """The fake tensor a traced node holds (what :func:`chain` computes new values with)."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, FakeTensor) else None


def operands(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, object] | None:
    """``(a, b, bias)`` of an ``mm`` or of an ``addmm`` with unit scales (``bias`` None for
    ``mm``); None for anything else."""
    if node.op != "call_function":
        return None
    if node.target is aten.mm.default:
        a, b = node.args
        return a, b, None
    if node.target is aten.addmm.default:
        bias, a, b, *scales = node.args
        beta = node.kwargs.get("beta", scales[0] if scales else 1)
        alpha = node.kwargs.get("alpha", scales[1] if len(scales) > 1 else 1)
        return (a, b, bias) if beta == 1 and alpha == 1 else None
    return None


def weight_products(
    gm: torch.fx.GraphModule, weights: set[torch.fx.Node]
) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node, object]]:
    """``(node, a, b, bias)`` of each ``mm`` / unit-scale ``addmm`` of ``gm`` whose right operand
    ``b`` is one of ``weights`` (computed from parameters and buffers alone: the
    ``static_nodes`` of a :class:`hoist.Split`)."""
    found = [(node, operands(node)) for node in gm.graph.nodes]
    return [(node, *ops) for node, ops in found if ops is not None and ops[1] in weights]


def pack_weights(gm: torch.fx.GraphModule, static: frozenset[int], target: str = "host") -> int:
    """Rewrites the bf16 products and convolutions of ``gm`` whose weight is computed from the
    inputs at positions ``static`` alone (see the module docs), where the CPU ``target`` names
    has AVX512-BF16's dot product; returns how many."""
    if not _fxmlir.target_info(target)["bf16_dot"]:
        return 0
    weights = hoist.Split(gm, static).static_nodes
    rewritten = _pack_products(gm, weights) + _pack_convolutions(gm, weights)
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return rewritten


def _pack_convolutions(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> int:
    graph = gm.graph
    rewritten = 0
    for node in graph.find_nodes(op="call_function", target=aten.convolution.default):
        x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
        vx, vw = fake_val(x), fake_val(w)
        if (
            w not in weights
            or transposed
            or groups != 1
            or vx is None
            or vw is None
            or vx.dtype != torch.bfloat16
            or vw.dtype != torch.bfloat16
            or not 3 <= vw.dim() <= 5
            or not all(isinstance(d, int) for d in (*vx.shape, *vw.shape))
        ):
            continue
        nd = vw.dim() - 2
        out, channels, *kernel = vw.shape
        with graph.inserting_before(node):
            # An odd channel count gets a zero channel (the kernel reads the input's as zero).
            padded = (
                chain(graph, node, [(aten.constant_pad_nd.default, (w, [0, 0] * nd + [0, 1]), {})])
                if channels % 2
                else w
            )
            steps = [
                (aten.view.default, (padded, [out, (channels + 1) // 2, 2, *kernel]), {}),
                (aten.permute.default, (None, [0, 1, *range(3, nd + 3), 2]), {}),
                (aten.clone.default, (None,), {"memory_format": torch.contiguous_format}),
            ]
            packed = chain(graph, node, steps)
            conv = (torch.ops.fxmlir.conv_pairs.default, (x, packed, stride, padding, dilation), {})
            result = chain(graph, node, [conv])
            if bias is not None:
                bias = chain(graph, node, [(aten.view.default, (bias, [out] + [1] * nd), {})])
        replace(graph, node, result, bias)
        rewritten += 1
    return rewritten


def replace(
    graph: torch.fx.Graph, node: torch.fx.Node, result: torch.fx.Node, bias: object
) -> None:
    """Replaces ``node`` by the f32 ``result`` plus ``bias`` (if not None), rounded once to
    ``node``'s dtype."""
    dtype = fake_val(node).dtype
    with graph.inserting_before(node):
        if bias is not None:
            result = chain(graph, node, [(aten.add.Tensor, (result, bias), {})])
        result = chain(graph, node, [(aten._to_copy.default, (result,), {"dtype": dtype})])
    node.replace_all_uses_with(result)
    graph.erase_node(node)


def _pack_products(gm: torch.fx.GraphModule, weights: set[torch.fx.Node]) -> int:
    graph = gm.graph
    rewritten = 0
    for node, a, b, bias in weight_products(gm, weights):
        va, vb = fake_val(a), fake_val(b)
        if (
            va is None
            or vb is None
            or va.dtype != torch.bfloat16
            or vb.dtype != torch.bfloat16
            or va.dim() != 2
            or vb.dim() != 2
        ):
            continue
        k, n = vb.shape
        if not isinstance(k, int) or not isinstance(n, int) or k % 2:
            continue
        # Columns up to a whole number of dot products: zeros, cut off the result again.
        pad = -n % LANES
        if pad and n < MIN_PADDED:
            continue
        if (n + pad) % ALIASED_COLUMNS == 0:
            pad += SKEW
        with graph.inserting_before(node):
            steps = [
                (aten.view.default, (b, [k // 2, 2, n]), {}),
                (aten.permute.default, (None, [0, 2, 1]), {}),
                (aten.clone.default, (None,), {"memory_format": torch.contiguous_format})
                if not pad
                else (aten.constant_pad_nd.default, (None, [0, 0, 0, pad]), {}),
            ]
            packed = chain(graph, node, steps)
            product = chain(graph, node, [(torch.ops.fxmlir.mm_pairs.default, (a, packed), {})])
            if pad:
                product = chain(graph, node, [(aten.slice.Tensor, (product, 1, 0, n), {})])
        replace(graph, node, product, bias)
        rewritten += 1
    return rewritten


def chain(
    graph: torch.fx.Graph,
    origin: torch.fx.Node,
    steps: list[tuple[torch._ops.OpOverload, tuple, dict]],
) -> torch.fx.Node:
    """Appends ``steps`` (a ``None`` argument is the previous step's node), each with its fake
    value and ``origin``'s source location; returns the last."""
    node = None
    for target, args, kwargs in steps:
        args = tuple(node if arg is None else arg for arg in args)
        vals = [fake_val(arg) if isinstance(arg, torch.fx.Node) else arg for arg in args]
        fake = next(v for v in vals if isinstance(v, FakeTensor)).fake_mode
        with fake:
            val = target(*vals, **kwargs)
        node = graph.call_function(target, args, kwargs)
        node.meta["val"] = val
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in origin.meta:
                node.meta[key] = origin.meta[key]
    return node
