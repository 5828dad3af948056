"""Graphs with symbolic sizes compile once, into a kernel that serves every size their
symbols take (``fxmlir.config.symbolic``), when every op of them takes symbolic sizes; the
others compile per size. Every call is compared with eager PyTorch; the compile records count
the kernels."""

import logging
import re

import fxmlir
import pytest
import torch
from fxmlir import CallError, backend
from records import latest, since
from torch.fx.experimental.proxy_tensor import make_fx

SIZES = [3, 5, 7, 11, 2, 64, 100, 33, 9, 1000]


def _elementwise(x, y):
    return torch.tanh(x + y) * 2 - x.abs() / (1 + y * y)


def _kernels(start: int) -> list[backend.CompileRecord]:
    """The graphs given a kernel since ``start`` (compiled, or an identical one reused)."""
    return since(start)


def test_dynamic_true_compiles_one_kernel_for_ten_sizes():
    start = latest()
    compiled = torch.compile(_elementwise, backend="fxmlir", dynamic=True)
    with fxmlir.config.patch(fallback="error"):
        for n in SIZES:
            x, y = torch.randn(n, 8), torch.randn(8)
            torch.testing.assert_close(compiled(x, y), _elementwise(x, y))
    assert len(_kernels(start)) == 1


def test_two_symbols_broadcast_and_strided_inputs():
    start = latest()
    compiled = torch.compile(_elementwise, backend="fxmlir", dynamic=True)
    with fxmlir.config.patch(fallback="error"):
        for batch, width in [(3, 5), (4, 9), (17, 2), (6, 31)]:
            x = torch.randn(width, batch).t()  # non-contiguous
            y = torch.randn(batch, 1)
            torch.testing.assert_close(compiled(x, y), _elementwise(x, y))
    # Dynamo may specialise on the layout of the first call, but never on the sizes.
    assert len(_kernels(start)) <= 2


def test_mark_dynamic_and_automatic_dynamic():
    start = latest()
    compiled = torch.compile(_elementwise, backend="fxmlir")
    for n in [6, 9, 13]:
        x, y = torch.randn(n, 8), torch.randn(8)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x, y), _elementwise(x, y))
    assert len(_kernels(start)) == 1
    torch._dynamo.reset()
    # Automatic: the first size is compiled as it is; a second size makes Dynamo mark the
    # dimension dynamic, and that graph serves every later size.
    start = latest()
    compiled = torch.compile(_elementwise, backend="fxmlir")
    for n in SIZES:
        x, y = torch.randn(n, 8), torch.randn(8)
        torch.testing.assert_close(compiled(x, y), _elementwise(x, y))
    assert len(_kernels(start)) == 2


def test_sizes_zero_and_one_are_specialised_and_correct():
    compiled = torch.compile(_elementwise, backend="fxmlir", dynamic=True)
    for n in [4, 0, 1, 6]:
        x, y = torch.randn(n, 3), torch.randn(3)
        torch.testing.assert_close(compiled(x, y), _elementwise(x, y))


def test_a_size_outside_the_range_is_a_call_error():
    gm = make_fx(_elementwise, tracing_mode="symbolic")(torch.randn(5, 8), torch.randn(8))
    with fxmlir.config.patch(fallback="error"):
        compiled = fxmlir.compile_graph(gm, [torch.randn(5, 8), torch.randn(8)])
        for _ in range(2):  # the second call at a size builds its C++ check of the arguments
            torch.testing.assert_close(
                compiled([torch.ones(7, 8), torch.ones(8)])[0],
                _elementwise(torch.ones(7, 8), torch.ones(8)),
            )
        with pytest.raises(
            CallError,
            match=r"input `x\w*` \(argument 0\): compiled for float32\[7, 8\] strides \(8, 1\) "
            r"on cpu at sizes s\d+=7, s\d+=8, got float64",
        ):
            compiled([torch.ones(7, 8, dtype=torch.float64), torch.ones(8)])
        with pytest.raises(CallError, match=r"size s\d+ = 1 is outside the range \[2, "):
            compiled([torch.ones(1, 8), torch.ones(8)])
        with pytest.raises(CallError, match=r"input `y\w*` \(argument 1\): compiled for"):
            compiled([torch.ones(7, 8), torch.ones(9)])
        with pytest.raises(CallError, match=r"input `x\w*` \(argument 0\): compiled for 2 dim"):
            compiled([torch.ones(7), torch.ones(8)])
        with pytest.raises(CallError, match=r"input `x\w*` \(argument 0\): expected a tensor"):
            compiled([3.0, torch.ones(8)])


def test_linear_layers_compile_once_with_scheduled_products(tmp_path):
    """An MLP's products with symbolic rows are register-tiled like fixed-size ones (their
    row loops peeled: full tiles, then single rows), for row counts that are and are not
    multiples of the register tile."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(24, 80), torch.nn.GELU(), torch.nn.Linear(80, 24)
    ).eval()
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        for n in SIZES:
            x = torch.randn(n, 24)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    records = _kernels(start)
    assert [bool(r.symbols) for r in records] == [True], records
    assert not records[0].warnings, records[0].warnings
    scripts = [p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir")]
    assert sum(s.count("rows peeled") for s in scripts) == 2, scripts


def test_symbolic_rows_fuse_the_epilogue(tmp_path):
    """A linear layer and its activation over symbolic rows: the bias add and tanh are tiled
    with the product (full tiles, then single rows), so the product never reaches memory."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.Tanh()).eval()
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        for n in [3, 8, 13, 64, 2]:
            x = torch.randn(n, 48)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    records = _kernels(start)
    assert [bool(r.symbols) for r in records] == [True], records
    assert not records[0].warnings, records[0].warnings
    scripts = "".join(p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir"))
    assert "rows peeled, epilogue fused" in scripts, scripts


def test_an_encoder_over_sequences_of_any_length_compiles_once():
    """A BERT encoder called with sequences of several lengths: its position and token-type
    ids are a window of a fixed buffer (a slice up to the sequence's length) and a gather over
    batch and sequence; once Dynamo marks the length dynamic, one kernel serves every length."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
    )
    model = transformers.BertModel(config).eval()
    compiled = torch.compile(model, backend="fxmlir")
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=False):
        for length in [9, 17, 30, 12, 64]:
            ids = torch.randint(0, 100, (3, length))
            torch.testing.assert_close(
                compiled(ids).last_hidden_state,
                model(ids).last_hidden_state,
                rtol=1e-4,
                atol=1e-4,
            )
    # The first length's graph, then one for every length.
    assert [bool(r.symbols) for r in _kernels(start)] == [False, True]


def test_batched_products_with_a_symbolic_batch_and_rows():
    """``bmm`` over a symbolic batch and symbolic rows, then a product of its flattened rows
    (batch times sequence, a polynomial of two symbols)."""

    def fn(x, w1, w2):
        h = torch.bmm(x, w1.expand(x.shape[0], -1, -1))
        return torch.relu(h) @ w2

    w1, w2 = torch.randn(16, 40), torch.randn(40, 8)
    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error"):
        for batch, seq in [(2, 3), (3, 17), (5, 8), (4, 29), (7, 2)]:
            x = torch.randn(batch, seq, 16)
            torch.testing.assert_close(compiled(x, w1, w2), fn(x, w1, w2), rtol=1e-5, atol=1e-5)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_products_with_every_size_symbolic_are_vectorised(tmp_path):
    """Products whose columns and reduction are symbolic too (weights passed as arguments,
    ``dynamic=True`` makes their sizes symbols; attention's ``q @ kᵀ`` and ``p @ v`` over a
    sequence of any length): their row and column loops are peeled into full register tiles
    and single rows and columns, the reduction steps one at a time. Sizes that are and are
    not multiples of the 8 x 32 register tile, one kernel."""

    def fn(x, w, q, k, v):
        scores = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return x @ w, scores @ v

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        for m, k, n, seq in [(3, 5, 7, 11), (40, 33, 70, 9), (64, 64, 96, 64), (17, 100, 31, 2)]:
            args = [torch.randn(m, k), torch.randn(k, n)]
            args += [torch.randn(2, seq, 16) for _ in range(3)]
            for got, expected in zip(compiled(*args), fn(*args), strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]
    scripts = "".join(p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir"))
    assert "matmul ?x?x? f32" in scripts and "rows and columns peeled" in scripts, scripts
    assert "scalar product" not in scripts


def test_creations_from_symbolic_sizes_compile_once():
    """Positions counted on from a cache's length and tensors filled with a size, as models
    compute them in their forward (``arange(past, past + n)``, ``full(..., past)``): the start,
    the end and the fill value are symbolic, computed when the kernel runs."""

    def fn(x, cache):
        past, n = cache.shape[0], x.shape[0]
        positions = torch.arange(past, past + n)
        steps = torch.arange(0, 2 * n, 2, dtype=torch.float32)
        count = torch.full((n, 1), past, dtype=torch.float32)
        return torch.cat([cache, x * positions[:, None] + steps[:, None] - count])

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error"):
        for n, past in [(3, 5), (7, 2), (4, 31), (12, 9)]:
            x, cache = torch.randn(n, 6), torch.randn(past, 6)
            torch.testing.assert_close(compiled(x, cache), fn(x, cache))
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_graphs_with_other_ops_compile_per_size(caplog):
    def fn(x):
        return torch.softmax(x * 2, dim=-1).diagonal()

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    with caplog.at_level(logging.INFO, logger="fxmlir"):
        for n in [3, 5, 3]:
            x = torch.randn(n, 6)
            torch.testing.assert_close(compiled(x), fn(x))
    assert "compiles per size" in caplog.text


def test_a_size_used_as_a_value_compiles_once():
    """A size as an elementwise op's scalar is computed when the kernel runs, and promotes as
    the Python int would (an int64 tensor stays int64, a float32 one float32)."""

    def fn(x, i):
        n = x.shape[0]
        return x * n + 1, (i + n) // 2, x / (n - 1)

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error"):
        for n in [3, 5, 8, 13]:
            x, i = torch.randn(n, 2), torch.arange(n)
            for got, expected in zip(compiled(x, i), fn(x, i), strict=True):
                torch.testing.assert_close(got, expected)
                assert got.dtype == expected.dtype
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_sizes_with_floor_divisions_and_maxima_compile_once():
    """Sizes that Dynamo writes with floor divisions, moduli and maxima (every second column,
    halves, a trim to a multiple of 4, the stride after a dimension that may be empty): one
    kernel for every width, each call as eager computes it, odd and even widths alike."""

    def fn(x):
        n = x.shape[1]
        first, second = x.chunk(2, dim=1)
        return (
            x[:, ::2] * 2,
            x[:, 1::3] + 1,
            torch.cat([second, first], 1),
            x[:, : n - n % 4].sum(1),
        )

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False):
        # Widths that Dynamo's guards from the first keep in one graph: a multiple of 4 (no
        # trim) or a width below 5 (one element of `1::3`) would be traced again.
        for n in [6, 9, 13, 31, 7, 10, 15]:
            x = torch.randn(3, n)
            for got, expected in zip(compiled(x), fn(x), strict=True):
                torch.testing.assert_close(got, expected)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_floats_computed_from_sizes_compile_once():
    """Floats Dynamo computes from sizes (``1.0 / n``, ``n * 4 / 3``: a batch norm's backward
    scales by ``1 / (n*h*w)``) reach the kernel as ratios of sizes, computed in f64 when it
    runs, then used as the Python float would be: bit-exact against eager, one kernel."""

    def fn(x):
        n, m = x.shape
        return (
            x * (1.0 / n),
            x / (n * 4 / 3) + m / 2,
            x.to(torch.float64) * (n / m),
            x.to(torch.float16) * (1 / (n * m)),
        )

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False):
        for n, m in [(3, 5), (7, 2), (12, 9), (5, 33)]:
            x = torch.randn(n, m)
            for got, expected in zip(compiled(x), fn(x), strict=True):
                assert got.dtype == expected.dtype
                torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_floor_division_texts_round_trip_through_the_interchange():
    """The interchange's text of Dynamo's size expressions parses back (in Rust) to the same
    values: floor and ceiling division, moduli, maxima, minima, and divisors that are sizes."""
    import sympy
    from fxmlir import _fxmlir, interchange
    from torch.utils._sympy import functions as f

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    exprs = [
        f.FloorDiv(s0 - 1, 2) + 1,
        f.CeilDiv(s0, 3) * s1,
        f.PythonMod(s0, 4),
        f.ModularIndexing(s0 * s1, 2, 5),
        f.Max(1, f.FloorDiv(s0 + 1, 2)),
        f.Min(s0, s1 + 2),
        f.FloorDiv(s0 * 7, s1),
        # A shifted window's roll over a symbolic dimension: a modulo by a size.
        f.Mod(s0 + 3, s1 + 1),
        f.PythonMod(s0 * 3, s1),
        f.CeilDiv(s0, s1),
    ]
    for expr in exprs:
        text = interchange.size_text(expr)
        for a, b in [(2, 3), (7, 1), (16, 5), (33, 9)]:
            expected = int(expr.subs({s0: a, s1: b}))
            assert _fxmlir.size_value(text, {"s0": a, "s1": b}) == expected, (expr, text, a, b)
    with pytest.raises(fxmlir.UnsupportedOpError, match="no integer expression"):
        interchange.size_text(s0 / 3)


def test_a_size_where_only_a_number_is_supported_compiles_per_size(caplog):
    def fn(x):
        return torch.nn.functional.hardtanh(x, 0, x.shape[0])

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    with caplog.at_level(logging.INFO, logger="fxmlir"):
        for n in [3, 5, 3]:
            x = torch.randn(n, 4) * 10
            torch.testing.assert_close(compiled(x), fn(x))
    assert "is the symbolic size s" in caplog.text
    assert "only a fixed number is supported" in caplog.text


def test_a_resize_to_the_input_size_compiles_once():
    """A segmentation head's shape: a strided convolution, then bilinear resizes back to the
    input's size (Dynamo traces them as gathers at positions computed from the sizes, clamped
    to the last row and column) and a nearest one to twice its size. The first size compiles
    for its sizes alone; the second makes them symbolic: one kernel for every later size,
    each call as eager computes it."""
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def fn(x):
        y = torch.relu(conv(x))
        smooth = torch.nn.functional.interpolate(
            y, size=x.shape[-2:], mode="bilinear", align_corners=False
        )
        corners = torch.nn.functional.interpolate(
            y, size=x.shape[-2:], mode="bilinear", align_corners=True
        )
        return smooth + corners, torch.nn.functional.interpolate(y, scale_factor=2)

    compiled = torch.compile(fn, backend="fxmlir")
    start = latest()
    settings = {"fallback": "error", "background": False, "specializations": 0}
    with torch.no_grad(), fxmlir.config.patch(**settings):
        for size in [(16, 16), (24, 20), (20, 28), (37, 9), (24, 20)]:
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(compiled(x), fn(x))
    assert [bool(r.symbols) for r in _kernels(start)] == [False, True]


class _ConvNet(torch.nn.Module):
    """Every per-sample row a vision model uses: convolutions (strided, grouped, with and
    without bias), batch norm, max and average pooling, padding, resizes, adaptive pooling."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.grouped = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.stem(x)
        y = torch.nn.functional.pad(y, (1, 1, 1, 1), value=0.5)
        y = torch.nn.functional.avg_pool2d(y, 3, stride=1)
        y = torch.relu(self.grouped(y))
        # Traced as gathers (``index`` with index tensors of fixed sizes) under a symbolic batch.
        y = torch.nn.functional.interpolate(y, scale_factor=2.0, mode="bilinear")
        y = torch.nn.functional.interpolate(y, size=(9, 7), mode="nearest")
        return self.head(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


def test_a_conv_net_with_a_dynamic_batch_compiles_once():
    """A batch marked dynamic (a server's batches of any size): the per-sample rows loop over
    it, so one kernel serves every batch, each call as eager computes it."""
    torch.manual_seed(0)
    model = _ConvNet().eval()
    compiled = torch.compile(model, backend="fxmlir")
    start = latest()
    settings = {"fallback": "error", "background": False, "specializations": 0}
    with torch.no_grad(), fxmlir.config.patch(**settings):
        for n in [2, 3, 5, 8, 4]:
            x = torch.randn(n, 3, 20, 20)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_channels_last_images_pooled_to_one_pixel_compile_once():
    """ConvNeXt's head: PyTorch pools a channels-last image to 1 x 1 as a mean, then
    ``as_strided`` restrides the unit dimensions to channels-last; that restride is its
    input, symbolic batch included, so the model stays one kernel for every batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()
    model = model.to(memory_format=torch.channels_last)
    compiled = torch.compile(model, backend="fxmlir")
    start = latest()
    settings = {"fallback": "error", "background": False, "specializations": 0}
    with torch.no_grad(), fxmlir.config.patch(**settings):
        for n in [2, 3, 6]:
            x = torch.randn(n, 3, 10, 12).to(memory_format=torch.channels_last)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_a_gather_across_the_batch_compiles_once_and_checks_its_indices():
    """``x[idx]`` reads other samples, so it is not lowered per sample: ``index`` takes the
    symbolic batch itself, one kernel for every batch, and an index beyond the batch raises
    as eager does."""

    def fn(x, idx):
        return torch.relu(x)[idx] * 2

    compiled = torch.compile(fn, backend="fxmlir")
    idx = torch.tensor([1, 0, 1])
    start = latest()
    with fxmlir.config.patch(background=False, fallback="error", specializations=0):
        for n in [2, 3, 5]:
            x = torch.randn(n, 4, 6)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x, idx), fn(x, idx))
        assert [bool(r.symbols) for r in _kernels(start)] == [True]
        x = torch.randn(2, 4, 6)
        torch._dynamo.mark_dynamic(x, 0)
        with pytest.raises(IndexError, match="index out of range in node `index`"):
            compiled(x, torch.tensor([1, 3, 0]))


@pytest.mark.parametrize("batch", [2, None], ids=["batch_2", "batch_symbolic"])
def test_a_conv_net_with_symbolic_image_sizes_compiles_once(batch):
    """``dynamic=True`` makes the image sizes symbolic too (a pooled size is ``s1//2``, a
    strided one ``(s1 - 1)//2 + 1``): convolutions (an im2col product over a canvas of
    symbolic sizes; grouped and transposed ones too), pooling, constant, reflection and
    replication padding, resizes and adaptive pooling take them, so one kernel serves images
    of any size (and any batch), each call as eager computes it."""
    torch.manual_seed(0)
    model = _ConvNet().eval()
    up = torch.nn.ConvTranspose2d(3, 3, 4, stride=2, padding=1)

    def fn(x):
        reflected = torch.nn.functional.pad(x, (2, 1, 1, 2), mode="reflect")
        replicated = torch.nn.functional.pad(x, (1, 0, 2, 1), mode="replicate")
        return model(x), up(x), reflected, replicated

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    settings = {"fallback": "error", "background": False, "specializations": 0}
    with torch.no_grad(), fxmlir.config.patch(**settings):
        for k, (h, w) in enumerate([(20, 24), (31, 17), (64, 40), (23, 23), (20, 24)]):
            x = torch.randn(batch or 2 + k, 3, h, w)
            torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_convolutions_over_symbolic_image_sizes_pack_their_column_tiles(tmp_path):
    """Under ``dynamic=True`` a convolution's product has symbolic columns (its images'
    pixels) under fixed rows (its output channels): each thread takes a chunk of the columns,
    tiles them outside the rows and packs each full column tile into a panel that the row
    tiles read; the last columns (fewer than a tile) are read where they lie. Image sizes
    whose pixels are and are not whole tiles on each thread, batches of several sizes, one
    kernel, each call as eager computes it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 24, 1),
        torch.nn.Conv2d(24, 16, 3, stride=2, padding=1),
    ).eval()
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    start = latest()
    settings = {"fallback": "error", "background": False, "specializations": 0}
    # AVX2 on two threads, whichever the host: 4 x 16 tiles, a chunk of columns a thread.
    target = "x86-64-v3,threads=2"
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), target=target, **settings):
        for batch, h, w in [(2, 18, 32), (3, 13, 17), (4, 40, 24), (2, 5, 7)]:
            x = torch.randn(batch, 16, h, w)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]
    scripts = "".join(p.read_text() for p in tmp_path.glob("*.02-schedule.transform.mlir"))
    packed = re.findall(
        r"matmul \d+x\d+x\? f32: thread chunks \[0, 2\] \(threads\), tile 4x16, k step \d+, "
        r"k block none, right operand packed, columns peeled",
        scripts,
    )
    assert len(packed) == 3, scripts
    assert scripts.count("by 1 loops") == 3, scripts


def test_padding_by_amounts_computed_from_sizes_compiles_once():
    """A UNet's skip connection pads the upsampled map by the size difference (negative where
    it is the larger: a crop), and a shifted-window model pads to a multiple of its window,
    `(7 - w % 7) % 7`: amounts that are sizes, whose sign only the run decides. One kernel,
    each call as eager computes it."""

    def fn(x1, x2):
        dy, dx = x2.size(2) - x1.size(2), x2.size(3) - x1.size(3)
        skip = torch.nn.functional.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        windows = torch.nn.functional.pad(x2, (0, (7 - x2.size(3) % 7) % 7, 1, 2), value=-1.5)
        return torch.cat([skip, x2], 1), windows

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False, specializations=0):
        for h1, w1, h2, w2 in [(5, 6, 9, 10), (8, 9, 11, 13), (7, 7, 6, 5), (3, 4, 20, 17)]:
            x1, x2 = torch.randn(2, 3, h1, w1), torch.randn(2, 4, h2, w2)
            torch.testing.assert_close(compiled(x1, x2), fn(x1, x2), atol=0, rtol=0)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_max_pooling_indices_and_dilated_windows_over_symbolic_sizes():
    """Max pooling's indices are flat positions in the input, computed with its symbolic
    width; dilated windows near the edge can miss the input, where eager returns the lowest
    value and the window's clipped start. Ceil mode takes the output sizes the graph records."""

    def fn(x):
        values, indices = torch.nn.functional.max_pool2d(
            x, 3, stride=2, padding=1, dilation=2, ceil_mode=True, return_indices=True
        )
        average = torch.nn.functional.avg_pool2d(
            x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False
        )
        return values, indices, average, torch.nn.functional.adaptive_avg_pool2d(x, (3, 2))

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False, specializations=0):
        # Outputs of one row or column would be specialised by Dynamo (a guard), so none is.
        for h, w in [(5, 7), (9, 6), (16, 13), (11, 8)]:
            x = torch.randn(2, 3, h, w)
            for got, expected in zip(compiled(x), fn(x), strict=True):
                torch.testing.assert_close(got, expected)
    assert [bool(r.symbols) for r in _kernels(start)] == [True]


def test_training_step_with_a_dynamic_batch():
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh())
    reference = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh())
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    for n in [4, 7, 12]:
        x = torch.randn(n, 6)
        for net in (compiled, reference):
            net.zero_grad()
            net(x).square().mean().backward()
        for a, b in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)


def test_a_transformer_training_step_over_sequence_lengths_compiles_once():
    """Training with variable sequence lengths: a transformer layer's step (embedding,
    attention, cross-entropy, backward) at four lengths is one forward and one backward
    kernel (attention's backward, the slices' and gathers' gradients take symbolic sizes),
    with the loss and every gradient as eager computes them."""
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 32)
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.head = torch.nn.Linear(32, 50)

        def forward(self, ids):
            return self.head(self.layer(self.embed(ids))[:, 1:])

    model = Model()

    def step(ids):
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), ids[:, :-1].reshape(-1))
        loss.backward()
        return loss

    compiled = torch.compile(step, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False):
        for length in [5, 9, 13, 17]:
            ids = torch.randint(0, 50, (2, length))
            expected = step(ids)
            wanted = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            torch.testing.assert_close(compiled(ids), expected, atol=1e-5, rtol=1e-5)
            for p, g in zip(model.parameters(), wanted, strict=True):
                torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-4)
            model.zero_grad()
    assert [bool(r.symbols) for r in _kernels(start)] == [True, True]


def test_a_conv_net_training_step_with_a_dynamic_batch():
    """A training step of a small conv net with a batch norm over a batch marked dynamic: the
    forward graph is one kernel for every batch (the batch statistics average a count
    computed when the kernel runs), and so is the backward graph (its weight gradients are
    convolutions summing over the batch: the batch is their input channels); the loss, the
    gradients and the running statistics match eager's at every batch."""
    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 4 * 4, 5),
        )

    model, reference = net(), net()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="fxmlir")
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False, specializations=0):
        for n in [4, 7, 12]:
            x, y = torch.randn(n, 3, 8, 8), torch.randint(0, 5, (n,))
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(y, 0)
            losses = []
            for call in (compiled, reference):
                call.zero_grad()
                loss = torch.nn.functional.cross_entropy(call(x), y)
                loss.backward()
                losses.append(loss)
            torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
            for a, b in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
            for a, b in zip(model.buffers(), reference.buffers(), strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # The forward and the backward graph: a kernel each for every batch, none for one size.
    assert [bool(r.symbols) for r in _kernels(start)] == [True, True]


def test_a_conv_net_training_step_over_image_sizes_compiles_once():
    """``dynamic=True`` on a training step: the input gradient of a strided convolution is a
    transposed one whose output padding is a size (what the stride's floor division
    dropped), and the weight gradients are convolutions whose kernels are the symbolic
    gradient's sizes. Forward and backward are a kernel each for every batch and image size;
    the gradients match eager's."""

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 4),
        )

    model, reference = net(), net()
    compiled = torch.compile(model, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False, specializations=0):
        # The weight gradient of the strided convolution is narrowed to its 3 x 3 kernel by a
        # size that depends on the parity of the pooled size, which Dynamo guards: sizes whose
        # halves keep their parity (even rows, odd columns) share the kernels.
        for n, h, w in [(2, 16, 18), (5, 17, 14), (3, 24, 30)]:
            x, y = torch.randn(n, 3, h, w), torch.randint(0, 4, (n,))
            for call in (compiled, reference):
                call.zero_grad()
                torch.nn.functional.cross_entropy(call(x), y).backward()
            for a, b in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
    assert [bool(r.symbols) for r in _kernels(start)] == [True, True]


def test_a_hot_size_gets_a_kernel_of_its_own_within_the_bound():
    start = latest()
    compiled = torch.compile(_elementwise, backend="fxmlir", dynamic=True)
    y = torch.randn(8)
    with fxmlir.config.patch(background=False, specializations=1):
        # Sizes 5 and 7 alternate (no size three times in a row: no kernel of its own); then
        # size 5 is called three times in a row (hot): it gets its own kernel; size 9 as
        # often later, beyond the bound of one, keeps the kernel for every size.
        for n in [5, 7, 5, 7, 5, 5, 5, 9, 9, 9, 9]:
            x = torch.randn(n, 8)
            torch.testing.assert_close(compiled(x, y), _elementwise(x, y))
    records = since(start)
    assert len(records) == 2
    assert "_s" in records[1].name


def test_keys_and_values_of_different_lengths_are_a_runtime_error():
    """Attention whose keys and values were traced with lengths of their own symbols (a KV
    cache per tensor) runs while they are as long, and raises when they are not."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def fn(q, k, v):
        return op(q, k, v)[0]

    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8)
    gm = make_fx(fn, tracing_mode="symbolic")(q, k, v)
    with fxmlir.config.patch(fallback="error"):
        compiled = fxmlir.compile_graph(gm, [q, k, v])
        longer = torch.randn(1, 2, 6, 8)
        torch.testing.assert_close(compiled([q, longer, v])[0], fn(q, longer, v))
        with pytest.raises(RuntimeError, match="sizes that must be equal differ in node"):
            compiled([q, k, v])


@pytest.mark.parametrize("wrapped", [False, True], ids=["forward", "wrapped"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_greedy_generation_decodes_on_kernels_for_every_size(family, wrapped):
    """``generate()`` with a KV cache: the prefill and the decode step each compile once for
    the first call's sizes and once for every later size (Dynamo's automatic dynamic); the
    tokens equal eager's for prompts of several lengths. Wrapped in a function that hides
    ``forward``'s signature, ``generate()`` passes no cache positions and the model counts
    them itself (``arange(n) + past``: symbolic numbers)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=100,
            max_position_embeddings=128,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=128, eos_token_id=None
        )
        model = transformers.GPT2LMHeadModel(config)
    model.eval().generation_config.pad_token_id = 0
    eager_forward = model.forward
    compiled_forward = torch.compile(model.forward, backend="fxmlir")
    if wrapped:
        compiled = compiled_forward

        def compiled_forward(*args, **kwargs):
            return compiled(*args, **kwargs)

    start = latest()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=False):
        for length in [5, 9, 3, 12]:
            ids = torch.randint(1, 100, (1, length))
            tokens = {}
            for name, forward in (("eager", eager_forward), ("fxmlir", compiled_forward)):
                model.forward = forward
                tokens[name] = model.generate(
                    ids, max_new_tokens=10, min_new_tokens=10, do_sample=False
                )
            assert torch.equal(tokens["fxmlir"], tokens["eager"]), length
    records = _kernels(start)
    # Prefill and decode: fixed sizes first, then one kernel for every size each.
    assert len(records) == 4, records
    assert sum(bool(r.symbols) for r in records) == 2, records


def test_a_gather_along_a_symbolic_dimension_checks_its_indices_at_every_size():
    """``torch.gather`` along a dimension whose size is a symbol: one kernel for every size,
    its indices checked against the size of the call (an index past it raises, naming the
    node, as in eager)."""

    def fn(x, index):
        return torch.gather(x, 1, index) * 2

    compiled = torch.compile(fn, backend="fxmlir", dynamic=True)
    start = latest()
    with fxmlir.config.patch(fallback="error", background=False):
        for rows, width in [(3, 5), (4, 9), (6, 17), (2, 33)]:
            x = torch.randn(rows, width)
            index = torch.randint(0, width, (rows, width + 3))
            torch.testing.assert_close(compiled(x, index), fn(x, index))
        assert [bool(r.symbols) for r in _kernels(start)] == [True]
        x = torch.randn(4, 6)
        with pytest.raises(RuntimeError, match="index out of range in node `gather"):
            compiled(x, torch.full((4, 2), 6))
        torch.testing.assert_close(compiled(x, torch.full((4, 2), 5)), fn(x, torch.full((4, 2), 5)))
