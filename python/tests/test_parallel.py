"""Multi-threaded kernels: ops big enough to be split across torch's intra-op threads (one
OpenMP chunk per thread) give eager's results, and follow torch.get_num_threads()."""

import pathlib
import re

import fxmlir
import pytest
import torch
import torch.nn.functional as F
from op_harness import compiled_and_eager

# f32 sums over a few hundred terms, accumulated in another order than eager's.
ATOL = RTOL = 1e-4


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def _conv_pool(x, w):
    return F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)


# Each case has at least one op of 65536 loop iterations or more (the split threshold; 32768
# for a body calling a math function).
CASES = {
    "broadcast_add_exp": (lambda x, b: torch.exp(x + b), [(512, 1024), (1024,)]),
    "column_sum": (lambda x: x.sum(dim=0), [(256, 4096)]),
    "row_mean": (lambda x: x.mean(dim=-1), [(4096, 256)]),
    "softmax": (lambda x: torch.softmax(x, dim=-1), [(256, 1024)]),
    "layer_norm": (_layer_norm, [(64, 128, 256), (256,), (256,)]),
    "linear_gelu": (_linear_gelu, [(128, 512), (1024, 512), (1024,)]),
    "batched_matmul": (lambda a, b: a @ b, [(8, 128, 64), (8, 64, 256)]),
    "conv_pool": (_conv_pool, [(2, 8, 64, 64), (16, 8, 3, 3)]),
    "transpose_copy": (lambda x: x.t().contiguous() * 2.0, [(512, 768)]),
    "batched_transpose": (lambda x: x.transpose(1, 2).contiguous(), [(8, 256, 64)]),
    "transpose_add": (lambda x, y: x.t() + y, [(256, 512), (512, 256)]),
}

#: Cases whose transposing map is cut into 16x16 register tiles (transposed by shuffles).
TRANSPOSED_IN_REGISTERS = {"transpose_copy", "batched_transpose", "transpose_add"}


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_ops_match_eager(name, two_threads, tmp_path):
    fn, shapes = CASES[name]
    actual, expected = compiled_and_eager(fn, shapes, torch.float32, tmp_path)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    llvm_ir = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.ll"))
    assert "__kmpc_fork_call" in llvm_ir, "no op was split across threads"
    if name in TRANSPOSED_IN_REGISTERS:
        loops = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.07-loops.mlir"))
        assert loops.count("vector.shuffle") >= 64, "the transpose was not done in registers"


def _rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _masked_attention(q, k, v, bias):
    """Attention written out (scaled_dot_product_attention is one fused kernel, no row group)."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias
    return torch.softmax(scores, dim=-1) @ v


# Row groups (src/pipeline/rows.rs) form where a thread's share of the result outgrows the
# target's L2; with a 64 KiB L2 these run row by row (blocks of rows, the reductions and
# exponentials fused into the row loop).
ROW_GROUPS = {
    "softmax": (lambda x: torch.softmax(x, dim=-1), [(256, 1024)]),
    "softmax_4d": (lambda x: torch.softmax(x * 0.5, dim=-1), [(2, 4, 96, 160)]),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), [(128, 1000)]),
    "layer_norm": (_layer_norm, [(64, 128, 256), (256,), (256,)]),
    "rms_norm": (_rms_norm, [(512, 384), (384,)]),
    "masked_attention": (_masked_attention, [(1, 4, 256, 64)] * 3 + [(256, 256)]),
}


@pytest.mark.parametrize("name", sorted(ROW_GROUPS))
def test_row_groups_match_eager(name, two_threads, tmp_path):
    fn, shapes = ROW_GROUPS[name]
    actual, expected = compiled_and_eager(
        fn, shapes, torch.float32, tmp_path, target="x86-64-v3,l2=64K"
    )
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    split = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.04-parallel.mlir"))
    assert "fxmlir.row_member" in split, "no row group was formed"


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_row_groups_keep_nan_and_infinite_rows(fn, two_threads, tmp_path):
    """Grouped, a row holding a NaN still gives NaNs throughout (the maximum skips NaNs, the
    sum of exponentials does not), a row of -inf gives NaNs, one holding +inf what eager
    gives."""
    torch.manual_seed(0)
    x = torch.randn(64, 2048)
    x[1, 7] = float("nan")
    x[2, :] = float("-inf")
    x[3, 5] = float("inf")
    torch._dynamo.reset()
    with fxmlir.config.patch(dump_dir=str(tmp_path), target="x86-64-v3,l2=64K", fallback="error"):
        actual = torch.compile(lambda t: fn(t, -1), backend="fxmlir")(x)
    expected = fn(x, -1)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL, equal_nan=True)
    split = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.04-parallel.mlir"))
    assert "fxmlir.row_member" in split, "no row group was formed"


def test_row_groups_with_symbolic_sizes(two_threads, tmp_path):
    """With symbolic sizes, a group whose rows have a static length forms (a layer norm over
    768, a softmax over a batch marked dynamic), one whose row length is symbolic does not;
    either way every size matches eager and no stage is skipped (the autouse fixture)."""
    w = torch.randn(768)

    def fn(x, y):
        return torch.softmax(x, -1), F.layer_norm(y, (768,), w, w)

    def scores(s):
        return torch.softmax(s * 0.125, -1)

    torch._dynamo.reset()
    config = {"dump_dir": str(tmp_path), "target": "x86-64-v3,l2=64K", "fallback": "error"}
    with torch.no_grad(), fxmlir.config.patch(**config):
        everything = torch.compile(fn, backend="fxmlir", dynamic=True)
        batch_only = torch.compile(scores, backend="fxmlir")
        for n in (2, 3, 5):
            x, y = torch.randn(n, 64, 512), torch.randn(n, 96, 768)
            for actual, expected in zip(everything(x, y), fn(x, y)):
                torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
            s = torch.randn(n, 4, 128, 128)
            torch._dynamo.mark_dynamic(s, 0)
            torch.testing.assert_close(batch_only(s), scores(s), atol=ATOL, rtol=RTOL)
    dumps = sorted(pathlib.Path(tmp_path).glob("*.04-parallel.mlir"))
    symbolic = [d.read_text() for d in dumps if "tensor<?x" in d.read_text()]
    assert symbolic and all("fxmlir.row_member" in text for text in symbolic)


def test_small_rows_stay_ungrouped(two_threads, tmp_path):
    """A softmax whose tensor stays within L2 keeps its passes one by one."""
    fn, shapes = ROW_GROUPS["softmax"]
    actual, expected = compiled_and_eager(
        fn, shapes, torch.float32, tmp_path, target="x86-64-v3,l2=2M"
    )
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    split = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.04-parallel.mlir"))
    assert split and "fxmlir.row_member" not in split


#: AVX2's vectors everywhere, AVX-512's where the host runs them.
VECTOR_TARGETS = ["x86-64-v3"] + (
    ["x86-64-v4"] if fxmlir.target_info("host")["vector_bytes"] == 64 else []
)


@pytest.mark.parametrize("target", VECTOR_TARGETS)
@pytest.mark.parametrize("heads", [3, 5])
def test_the_main_column_part_of_odd_scores_is_split(heads, target, two_threads, tmp_path):
    """The scores of an odd number of heads of ViT's 197 tokens: no even cut of `q @ kᵀ`
    fits (odd batch, 197 rows and columns), so the 192 columns of whole register tiles are cut
    across the threads and the last 5 run after them; the results match eager's."""
    shapes = [(heads, 197, 64)] * 2
    actual, expected = compiled_and_eager(
        lambda q, k: q @ k.transpose(1, 2), shapes, torch.float32, tmp_path, target=target
    )
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    scripts = "".join(
        p.read_text() for p in pathlib.Path(tmp_path).glob("*.02-schedule.transform.mlir")
    )
    assert re.search(
        rf"batch_matmul {heads}x197x64x197 f32: thread chunks \[0, 0, 96\] \(main columns\),"
        r"[^\"]*columns split at 192 \(rest 5\)",
        scripts,
    ), scripts


def test_one_thread_compiles_serial_code(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch._dynamo.reset()
        x = torch.randn(512, 1024)
        with fxmlir.config.patch(dump_dir=str(tmp_path)):
            actual = torch.compile(lambda t: torch.tanh(t) * 3.0, backend="fxmlir")(x)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(actual, torch.tanh(x) * 3.0, atol=ATOL, rtol=RTOL)
    llvm_ir = "".join(p.read_text() for p in pathlib.Path(tmp_path).glob("*.ll"))
    assert llvm_ir and "__kmpc_fork_call" not in llvm_ir


def test_kernels_run_on_torchs_openmp_team(two_threads):
    """Parallel kernels use the OpenMP runtime PyTorch loaded (libgomp), never a second one:
    interleaved with torch's own parallel ops, on that one team, every result stays right."""
    torch._dynamo.reset()
    fn, shapes = CASES["linear_gelu"]
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    with torch.no_grad():
        expected = fn(*args)
        compiled = torch.compile(fn, backend="fxmlir")
        for _ in range(20):
            torch.testing.assert_close(compiled(*args), expected, atol=ATOL, rtol=RTOL)
            torch.testing.assert_close(torch.mm(a, b), a @ b)
    maps = pathlib.Path("/proc/self/maps").read_text()
    assert "libgomp" in maps
    assert "libomp.so" not in maps, "a second OpenMP runtime was loaded"
