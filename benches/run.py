"""Eager vs Inductor vs fxmlir on the same cases in one run.

For each case: check fxmlir and Inductor against eager, time the first call (compile) of each
backend from a cold Dynamo (Inductor's caches disabled), then the median of repeated calls.
Writes bench-results/results.json and bench-results/results.md and prints the table.

    .venv/bin/python benches/run.py [--cases mlp,gemm256] [--repeat 50]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import fxmlir  # noqa: E402
import torch  # noqa: E402
from fxmlir.demo import MLP, TransformerBlock, median_ms  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "bench-results"


def elementwise_chain(x):
    y = torch.sigmoid(x) * x + 1.0
    y = torch.tanh(y) - x * 0.5
    return torch.relu(y) * torch.exp(-x * x)


def softmax_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)
    return torch.softmax(scores, dim=-1) @ v


def gemm(a, b):
    return a @ b


def copy(x):
    return x * 1.0


def cases():
    torch.manual_seed(0)
    return {
        "mlp": (MLP().eval(), (torch.randn(64, 256),), 0),
        "transformer_block": (TransformerBlock().eval(), (torch.randn(4, 64, 128),), 0),
        "elementwise_chain": (elementwise_chain, (torch.randn(1 << 20),), 0),
        "softmax_attention": (
            softmax_attention,
            tuple(torch.randn(4, 128, 64) for _ in range(3)),
            0,
        ),
        "gemm256": (gemm, (torch.randn(256, 256), torch.randn(256, 256)), 2 * 256**3),
        "gemm512": (gemm, (torch.randn(512, 512), torch.randn(512, 512)), 2 * 512**3),
        "bandwidth_copy": (copy, (torch.randn(1 << 24),), 0),
    }


def first_call_ms(backend, fn, args):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    start = time.perf_counter()
    out = compiled(*args)
    return compiled, out, (time.perf_counter() - start) * 1e3


def run_case(name, fn, args, flops, repeat):
    row = {"case": name}
    with torch.no_grad():
        expected = fn(*args)
        row["eager_ms"] = median_ms(fn, args, repeat)
        for backend in ("inductor", "fxmlir"):
            try:
                compiled, out, compile_ms = first_call_ms(backend, fn, args)
                ok = torch.allclose(out, expected, atol=1e-3, rtol=1e-3)
                row[f"{backend}_compile_ms"] = compile_ms
                row[f"{backend}_ms"] = median_ms(compiled, args, repeat)
                row[f"{backend}_ok"] = bool(ok)
            except Exception as e:  # a failing backend is reported, not fatal
                row[f"{backend}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if flops and "fxmlir_ms" in row:
        row["fxmlir_gflops"] = flops / row["fxmlir_ms"] / 1e6
        row["eager_gflops"] = flops / row["eager_ms"] / 1e6
    if "fxmlir_ms" in row:
        row["fxmlir_vs_eager"] = row["eager_ms"] / row["fxmlir_ms"]
        if "inductor_ms" in row:
            row["fxmlir_vs_inductor"] = row["inductor_ms"] / row["fxmlir_ms"]
            row["compile_ratio"] = row["inductor_compile_ms"] / row["fxmlir_compile_ms"]
    return row


def fmt(v, spec=".3f"):
    return "—" if v is None else format(v, spec)


def markdown(rows, meta):
    lines = [
        f"torch {meta['torch']}, fxmlir {meta['fxmlir']}, {meta['threads']} threads, {meta['cpu']}",
        "",
        "| case | eager ms | inductor ms | fxmlir ms | fxmlir speed vs eager | vs inductor "
        "| inductor compile ms | fxmlir compile ms | correct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = "yes" if r.get("fxmlir_ok") else r.get("fxmlir_error", "NO")
        lines.append(
            f"| {r['case']} | {fmt(r.get('eager_ms'))} | {fmt(r.get('inductor_ms'))} "
            f"| {fmt(r.get('fxmlir_ms'))} | {fmt(r.get('fxmlir_vs_eager'), '.2f')}x "
            f"| {fmt(r.get('fxmlir_vs_inductor'), '.2f')}x "
            f"| {fmt(r.get('inductor_compile_ms'), '.0f')} "
            f"| {fmt(r.get('fxmlir_compile_ms'), '.0f')} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--repeat", type=int, default=30)
    opts = parser.parse_args()
    selected = cases()
    if opts.cases:
        unknown = set(opts.cases.split(",")) - set(selected)
        if unknown:
            sys.exit(f"unknown cases {sorted(unknown)}; known: {sorted(selected)}")
        selected = {k: v for k, v in selected.items() if k in opts.cases.split(",")}
    rows = []
    for name, (fn, args, flops) in selected.items():
        print(f"running {name} ...", flush=True)
        rows.append(run_case(name, fn, args, flops, opts.repeat))
    meta = {
        "torch": torch.__version__,
        "fxmlir": fxmlir.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    table = markdown(rows, meta)
    (RESULTS / "results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
