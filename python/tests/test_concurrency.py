"""Several Python threads compiling and calling at once, as a thread-pool server does: the
first calls of one function, different graphs, calls while a background compile runs, and
failing checks beside passing calls. Kernels run with the GIL released; every result must be
eager's and every wait must end (a deadlock fails the test at its timeout). And resident
memory stays flat over many calls."""

from concurrent.futures import ThreadPoolExecutor

import fxmlir
import pytest
import torch

TIMEOUT = 300
THREADS = 4


def _mlp(width: int) -> torch.nn.Module:
    torch.manual_seed(width)
    return torch.nn.Sequential(
        torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width)
    ).eval()


def _in_threads(fn, items):
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(fn, item) for item in items]
        return [f.result(timeout=TIMEOUT) for f in futures]


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_concurrent_first_calls_of_one_function(background):
    model = _mlp(32)
    inputs = [torch.randn(8, 32) for _ in range(2 * THREADS)]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fxmlir")
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=background):
        results = _in_threads(compiled, inputs)
        for x, got in zip(inputs, results, strict=True):
            torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


def test_concurrent_different_graphs():
    functions = [
        lambda x: torch.tanh(x @ x.T) * 2,
        lambda x: torch.softmax(x, dim=-1).sum(0),
        lambda x: torch.relu(x).cumsum(1),
        lambda x: (x * x).mean(dim=1, keepdim=True) - x,
    ]
    torch._dynamo.reset()
    compiled = [torch.compile(f, backend="fxmlir") for f in functions]
    x = torch.randn(16, 24)

    def run(k):
        return [compiled[k % len(compiled)](x) for _ in range(3)]

    with fxmlir.config.patch(fallback="error"):
        results = _in_threads(run, range(2 * len(functions)))
    for k, runs in enumerate(results):
        for got in runs:
            torch.testing.assert_close(got, functions[k % len(functions)](x), rtol=1e-5, atol=1e-5)


def test_a_failing_check_in_one_thread_leaves_the_others_correct():
    table = torch.randn(10, 8)

    def fn(ids):
        return torch.nn.functional.embedding(ids, table) * 2

    good, bad = torch.tensor([1, 9, 0]), torch.tensor([1, 10, 0])
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxmlir")

    def call(ids):
        try:
            return compiled(ids)
        except IndexError as e:
            return e

    with fxmlir.config.patch(fallback="error", background=False):
        compiled(good)
        results = _in_threads(call, [good, bad] * 8)
    for ids, got in zip([good, bad] * 8, results, strict=True):
        if ids is bad:
            assert isinstance(got, IndexError), got
        else:
            torch.testing.assert_close(got, fn(good))


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / (1 << 20)


def test_resident_memory_stays_flat_over_ten_thousand_calls():
    """Outputs are fresh tensors each call, handed back to fxmlir's allocator when freed: the
    calls keep no memory. (Rust's tests/memory_rss.rs bounds many distinct compiles.)"""
    model = _mlp(64)
    x = torch.randn(16, 64)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fxmlir")
    with torch.no_grad(), fxmlir.config.patch(fallback="error", background=False):
        for _ in range(500):
            compiled(x)
        before = _rss_mib()
        for _ in range(10_000):
            compiled(x)
        after = _rss_mib()
    assert after - before < 16, f"10,000 calls grew RSS from {before:.1f} to {after:.1f} MiB"
