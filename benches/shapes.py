"""Workloads whose shapes move: greedy ``generate()`` with a KV cache (the cache grows every
token) and a BERT encoder called with batch sizes in random order. Each backend compiles the
model with ``torch.compile``'s defaults (Dynamo marks a dimension dynamic once it changes),
from a reset Dynamo, in this one process; eager runs the same calls."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import measure
import torch
from fxmlir import backend

BACKENDS = ("eager", "inductor", "fxmlir")

#: ``generate()``: prompts of these lengths, each generating ``NEW_TOKENS`` greedily.
PROMPTS = (5, 12, 20)
NEW_TOKENS = 48
VOCAB = 1000

#: The encoder: batch sizes drawn from ``1..MAX_BATCH`` (``BATCH_CALLS`` of them, seeded) of
#: ``SEQUENCE`` tokens.
MAX_BATCH, BATCH_CALLS, SEQUENCE = 32, 22, 64


def _decoder(family: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=VOCAB,
            max_position_embeddings=512,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(
            n_embd=256, n_layer=4, n_head=4, vocab_size=VOCAB, n_positions=512, eos_token_id=None
        )
        model = transformers.GPT2LMHeadModel(config)
    model.eval().generation_config.pad_token_id = 0
    return model


def _kernels(first: int) -> dict[str, int]:
    """fxmlir's kernels since record ``first``: in all, for every size, and the graphs they
    serve. Dynamo traces a graph again once its sizes change, marking them dynamic: each
    graph ends with one kernel for every size, so those count the graphs; without any, the
    names do (a graph's kernels for one size are named after it, ``graph_2_s0``)."""
    records = [r for r in backend.history if r.seq > first]
    symbolic = sum(bool(r.symbols) for r in records)
    names = {re.sub(r"_s\d+$", "", r.name) for r in records}
    return {
        "kernels": len(records),
        "symbolic": symbolic,
        "graphs": symbolic or len(names),
    }


def generate(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """Per decoder (a small Llama and GPT-2) and backend: the first round of generations over
    the prompts (compiles included), then the steady milliseconds per token (the median over
    a second and third round's generations), whether the tokens equal eager's, and fxmlir's
    kernels."""
    del budget_s, repeat
    result: dict[str, Any] = {"prompts": list(PROMPTS), "new_tokens": NEW_TOKENS}
    for family in ("llama", "gpt2"):
        model = _decoder(family)
        torch.manual_seed(1)
        prompts = [torch.randint(1, VOCAB, (1, n)) for n in PROMPTS]
        eager_forward = model.forward

        def run(ids: torch.Tensor, model: torch.nn.Module = model) -> tuple[torch.Tensor, float]:
            start = time.perf_counter()
            out = model.generate(
                ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
            )
            return out, time.perf_counter() - start

        expected = {}
        per_backend: dict[str, Any] = {}
        with torch.no_grad():
            for name in BACKENDS:
                torch._dynamo.reset()
                first = max((r.seq for r in backend.history), default=-1)
                model.forward = (
                    eager_forward if name == "eager" else torch.compile(eager_forward, backend=name)
                )
                first_round = 0.0
                same = True
                for ids in prompts:
                    out, seconds = run(ids)
                    first_round += seconds
                    if name == "eager":
                        expected[ids.shape[1]] = out
                    same = same and torch.equal(out, expected[ids.shape[1]])
                steady = sorted(run(ids)[1] / NEW_TOKENS * 1e3 for _ in range(2) for ids in prompts)
                per_backend[name] = {
                    "first_round_ms": first_round * 1e3,
                    "ms_per_token": steady[len(steady) // 2],
                    "same_tokens": same,
                }
                if name == "fxmlir":
                    per_backend[name] |= _kernels(first)
        model.forward = eager_forward
        result[family] = per_backend
    return result


def _encoder() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        vocab_size=VOCAB,
    )
    return transformers.BertModel(config).eval()


def batches(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """A BERT encoder called with ``BATCH_CALLS`` batch sizes from ``1..MAX_BATCH`` in random
    order, twice over: per backend, each pass's milliseconds (the first compiles), whether
    every output matches eager, and fxmlir's kernels."""
    del budget_s, repeat
    model = _encoder()
    draw = random.Random(0)
    sizes = [draw.randint(1, MAX_BATCH) for _ in range(BATCH_CALLS)]
    torch.manual_seed(1)
    inputs = [torch.randint(0, VOCAB, (n, SEQUENCE)) for n in sizes]
    result: dict[str, Any] = {"sizes": sizes, "sequence": SEQUENCE}
    with torch.no_grad():
        expected = [model(x).last_hidden_state for x in inputs]
        for name in BACKENDS:
            torch._dynamo.reset()
            first = max((r.seq for r in backend.history), default=-1)
            call = model if name == "eager" else torch.compile(model, backend=name)
            passes = []
            same = True
            for _ in range(2):
                start = time.perf_counter()
                outs = [call(x).last_hidden_state for x in inputs]
                passes.append((time.perf_counter() - start) * 1e3)
                same = same and all(
                    measure.check(o, e)["ok"] for o, e in zip(outs, expected, strict=True)
                )
            result[name] = {"first_pass_ms": passes[0], "second_pass_ms": passes[1], "ok": same}
            if name == "fxmlir":
                result[name] |= _kernels(first)
    return result


#: The memory probe: distinct small graphs compiled in one process, and when RSS is read.
MEMORY_GRAPHS, MEMORY_READS = 1000, (100, 600, 1000)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / (1 << 20)


def memory(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """Resident memory while one process compiles ``MEMORY_GRAPHS`` distinct small graphs
    (an elementwise chain on a vector of a different length each, run once and dropped): the
    kernels kept in memory are bounded (``FXMLIR_MEMORY_CACHE_KERNELS``, least recently used
    dropped first), so once that many have compiled RSS stops growing."""
    import os

    import fxmlir
    from torch.fx.experimental.proxy_tensor import make_fx

    del budget_s, repeat

    def chain(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 2 + 1) - x

    bound = int(os.environ.get("FXMLIR_MEMORY_CACHE_KERNELS", "512"))
    rss = {}
    start = time.perf_counter()
    with fxmlir.config.patch(background=False, fallback="error"):
        for n in range(1, MEMORY_GRAPHS + 1):
            x = torch.randn(n)
            gm = make_fx(chain, tracing_mode="fake")(x)
            compiled = fxmlir.compile_graph(gm, [x])
            torch.testing.assert_close(compiled([x])[0], chain(x))
            del compiled, gm
            if n in MEMORY_READS:
                rss[n] = _rss_mib()
    return {
        "graphs": MEMORY_GRAPHS,
        "kernels_kept": bound,
        # The first reading with more graphs compiled than kernels kept.
        "full_after": next((n for n in MEMORY_READS if n > bound), MEMORY_GRAPHS),
        "rss_mib": {str(n): v for n, v in rss.items()},
        "seconds": time.perf_counter() - start,
    }
