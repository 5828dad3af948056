"""Outputs of POOLED_OUTPUT_BYTES or more live in blocks of fxmlir's allocator, handed to torch
through DLPack and given back (already mapped) when torch frees them. They must behave as any
tensor: right values, dtype and layout, independent of later calls, usable by autograd."""

import fxmlir
import pytest
import torch
from fxmlir import runtime
from fxmlir.backend import GraphCompiler
from fxmlir.runtime import POOLED_OUTPUT_BYTES
from torch.fx.experimental.proxy_tensor import make_fx

# Elementwise f32 work, computed the same way as eager: a few ulps at most.
ATOL = RTOL = 1e-6

LARGE = (1024, 1024)

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def _input(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(0, 100, shape, dtype=dtype)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="fxmlir")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_outputs_of_every_dtype_match_eager(dtype):
    def fn(x):
        return x.clone() if dtype == torch.bool else x * 3

    x = _input(LARGE, dtype)
    out = _compiled(fn)(x)
    expected = fn(x)
    assert out.dtype == dtype and out.shape == expected.shape
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_outputs_on_both_sides_of_the_threshold():
    floats = POOLED_OUTPUT_BYTES // 4

    def fn(x, y):
        return x + 1.0, y + 1.0

    x, y = torch.randn(floats), torch.randn(floats - 1)
    big, small = _compiled(fn)(x, y)
    torch.testing.assert_close(big, x + 1.0, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(small, y + 1.0, atol=ATOL, rtol=RTOL)
    # Only torch's own storage can grow; the pooled one cannot, as DLPack tensors.
    small.resize_(floats * 2)
    with pytest.raises(RuntimeError, match="not resizable"):
        big.resize_(floats * 2)


def test_a_freed_output_block_is_reused_with_fresh_values():
    compiled = _compiled(lambda x: torch.exp(x))
    x = torch.randn(LARGE)
    first = compiled(x)
    address = first.data_ptr()
    del first
    x2 = torch.randn(LARGE)
    second = compiled(x2)
    assert second.data_ptr() == address, "the freed block is handed out again"
    torch.testing.assert_close(second, torch.exp(x2), atol=ATOL, rtol=RTOL)


def test_kept_outputs_are_not_overwritten_by_later_calls():
    compiled = _compiled(lambda x: x * 2.0)
    xs = [torch.randn(LARGE) for _ in range(3)]
    outs = [compiled(x) for x in xs]
    assert len({o.data_ptr() for o in outs}) == 3
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, x * 2.0, atol=ATOL, rtol=RTOL)
    outs[0].add_(1.0)
    torch.testing.assert_close(outs[0], xs[0] * 2.0 + 1.0, atol=ATOL, rtol=RTOL)
    assert outs[0].numpy().shape == LARGE


def test_non_contiguous_large_output_keeps_its_layout():
    def fn(x):
        return x.t() * 2.0

    x = torch.randn(2048, 512)
    out = _compiled(fn)(x)
    assert out.stride() == fn(x).stride() == (1, 512)
    torch.testing.assert_close(out, fn(x), atol=ATOL, rtol=RTOL)


def test_autograd_through_large_outputs():
    def fn(x, w):
        return torch.tanh(x * w).sum()

    x = torch.randn(LARGE, requires_grad=True)
    w = torch.randn(LARGE[1])
    _compiled(fn)(x, w).backward()
    expected = x.detach().clone().requires_grad_(True)
    fn(expected, w).backward()
    torch.testing.assert_close(x.grad, expected.grad, atol=1e-5, rtol=1e-5)


def test_output_buffers_nobody_takes_are_released():
    gm = make_fx(lambda x: x + 1.0)(torch.randn(LARGE))
    kernel = GraphCompiler(gm, runtime.Settings()).static.kernel
    address = torch.from_dlpack(kernel.output_buffer(0)).data_ptr()
    # Dropped without a consumer: the capsule's destructor gives the block back.
    kernel.output_buffer(0)
    assert torch.from_dlpack(kernel.output_buffer(0)).data_ptr() == address
    with pytest.raises(fxmlir.CallError, match="has 1 outputs, not 2"):
        kernel.output_buffer(1)
    with pytest.raises(fxmlir.CallError, match="has 1 outputs, not 2"):
        kernel.output_buffer(1)
