"""Indices out of range and integer divisions by zero raise as in eager PyTorch: the kernel
checks each index tensor or divisor once (a reduction over it, before the op) and the call
path raises PyTorch's exception type for the op, naming the node and the source line;
otherwise the results are eager's. Every case compiles whole (strict mode), so nothing here
ran eagerly."""

import fxmlir
import pytest
import torch

TABLE = torch.arange(12.0).reshape(3, 4)

CASES = {
    "embedding": lambda i: torch.nn.functional.embedding(i, TABLE),
    "index_select": lambda i: TABLE.index_select(0, i.reshape(-1)),
    "gather": lambda i: TABLE.gather(0, i.reshape(1, -1).expand(1, 4)),
    "index": lambda i: TABLE[i] * 2,
    "scatter": lambda i: TABLE.scatter(0, i.reshape(1, -1).expand(1, 4), 1.0),
    "scatter_add": lambda i: TABLE.scatter_add(0, i.reshape(1, -1).expand(1, 4), torch.ones(1, 4)),
    "index_put": lambda i: TABLE.index_put((i.reshape(-1),), torch.tensor(1.0)),
    "index_add": lambda i: TABLE.index_add(0, i.reshape(-1), torch.full((1, 4), 0.5)),
    "index_add_alpha": lambda i: TABLE.index_add(0, i.reshape(-1), torch.ones(1, 4), alpha=3),
    "index_copy": lambda i: TABLE.index_copy(0, i.reshape(-1), torch.ones(1, 4)),
    "index_fill": lambda i: TABLE.index_fill(0, i.reshape(-1), -1.0),
    "take": lambda i: torch.take(TABLE, i * 4 + 1),
}

#: Cases whose compiled result differs from eager, and why.
XFAIL = {
    ("index_add_alpha", "negative"): "eager's index_add with an alpha rejects index -1; "
    "its decomposition (index_put) takes it as the last row",
    ("index_copy", "negative"): "eager's index_copy rejects index -1; its decomposition "
    "(index_put) takes it as the last row",
}

#: Indices: in range, too large, negative (advanced indexing takes -3..-1), too negative.
INDICES = {"in range": [2], "too large": [3], "negative": [-1], "too negative": [-4]}


def _eager(fn, index):
    try:
        return fn(index), None
    except (IndexError, RuntimeError) as e:
        return None, type(e)


@pytest.mark.parametrize(
    "op, which",
    [
        pytest.param(
            op,
            which,
            marks=[pytest.mark.xfail(strict=True, reason=XFAIL[(op, which)])]
            if (op, which) in XFAIL
            else [],
        )
        for op in CASES
        for which in INDICES
    ],
)
def test_an_index_out_of_range_raises_like_eager(op, which):
    fn, index = CASES[op], torch.tensor(INDICES[which])
    expected, raised = _eager(fn, index)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxmlir")
    with fxmlir.config.patch(fallback="error", background=False):
        if raised is None:
            torch.testing.assert_close(compiled(index), expected)
            return
        with pytest.raises(raised) as e:
            compiled(index)
    message = str(e.value)
    assert message.startswith("index out of range in node `"), message
    assert "test_checks.py" in message, "the error names the source line"


def test_a_failed_check_leaves_the_kernel_usable():
    fn = CASES["embedding"]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxmlir")
    with fxmlir.config.patch(fallback="error", background=False):
        with pytest.raises(IndexError):
            compiled(torch.tensor([0, 10**8]))
        torch.testing.assert_close(compiled(torch.tensor([1, 2])), fn(torch.tensor([1, 2])))


def test_an_embedding_bag_checks_its_indices():
    bag = torch.nn.EmbeddingBag(5, 4, mode="sum")
    offsets = torch.tensor([0, 2])
    torch._dynamo.reset()
    compiled = torch.compile(bag, backend="fxmlir")
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=False):
        good = torch.tensor([0, 4, 1])
        torch.testing.assert_close(compiled(good, offsets), bag(good, offsets))
        with pytest.raises(RuntimeError, match="index out of range in node"):
            compiled(torch.tensor([0, 5, 1]), offsets)


DIVISIONS = {
    "floor_divide": lambda a, b: a // b,
    "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "scalar zero": lambda a, b: (a + b) // 0,
}


@pytest.mark.parametrize("op", DIVISIONS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_an_integer_division_by_zero_raises_like_eager(op, dtype):
    fn = DIVISIONS[op]
    a = torch.tensor([7, 9, 5], dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxmlir")
    with fxmlir.config.patch(fallback="error", background=False):
        if op != "scalar zero":
            b = torch.tensor([2, 4, 1], dtype=dtype)
            torch.testing.assert_close(compiled(a, b), fn(a, b))
        zero = torch.tensor([2, 0, 1], dtype=dtype)
        with pytest.raises(RuntimeError, match="ZeroDivisionError") as e:
            fn(a, zero)
        with pytest.raises(RuntimeError) as e:
            compiled(a, zero)
    assert str(e.value).startswith("ZeroDivisionError in node `"), str(e.value)


def test_floating_division_by_zero_is_not_checked():
    def fn(a, b):
        return a // b, a / b

    a, b = torch.tensor([1.0, -1.0, 0.0]), torch.zeros(3)
    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error", background=False):
        for got, want in zip(torch.compile(fn, backend="fxmlir")(a, b), fn(a, b), strict=True):
            torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize(
    "shape, dim, index",
    [([3, 4], 0, [2, 0, 2]), ([2, 5, 3], 1, [4, 4, 0, 1]), ([2, 5, 3], -1, [1]), ([6], 0, [5, 5])],
)
def test_index_add_matches_eager_with_duplicates(shape, dim, index):
    x = torch.randn(shape)
    index = torch.tensor(index)
    source_shape = list(shape)
    source_shape[dim] = len(index)
    source = torch.randn(source_shape)

    def fn(x, index, source):
        return x.index_add(dim, index, source)

    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error", background=False):
        got = torch.compile(fn, backend="fxmlir")(x, index, source)
    torch.testing.assert_close(got, fn(x, index, source))
