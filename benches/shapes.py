"""Workloads whose shapes move: greedy ``generate()`` with a KV cache (the cache grows every
token), a BERT encoder and a ResNet called with batch sizes in random order and a
segmentation model at three image sizes. Each backend compiles the
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
    two rounds in which the backends take turns), whether the tokens equal eager's, and
    fxmlir's kernels (of the first round)."""
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
        forwards = {}
        with torch.no_grad():
            for name in BACKENDS:
                torch._dynamo.reset()
                first = max((r.seq for r in backend.history), default=-1)
                model.forward = forwards[name] = (
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
                per_backend[name] = {"first_round_ms": first_round * 1e3, "same_tokens": same}
                if name == "fxmlir":
                    per_backend[name] |= _kernels(first)
            # Steady: the backends take turns generation by generation (the host's speed
            # drifts over seconds), after one warm generation per prompt each (a backend
            # whose entries the last reset dropped compiles them again; Dynamo keeps each
            # backend's entries apart, so the limit on them is raised).
            steady: dict[str, list[float]] = {name: [] for name in BACKENDS}
            with torch._dynamo.config.patch(recompile_limit=64):
                for turn in range(3):
                    for ids in prompts:
                        for name in BACKENDS:
                            model.forward = forwards[name]
                            out, seconds = run(ids)
                            per_backend[name]["same_tokens"] &= torch.equal(
                                out, expected[ids.shape[1]]
                            )
                            if turn > 0:
                                steady[name].append(seconds / NEW_TOKENS * 1e3)
            for name, times in steady.items():
                per_backend[name]["ms_per_token"] = sorted(times)[len(times) // 2]
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
    order of ``SEQUENCE`` tokens: see :func:`_over_batches`."""
    del budget_s, repeat
    model = _encoder()
    sizes = _batch_sizes(MAX_BATCH)
    torch.manual_seed(1)
    inputs = [torch.randint(0, VOCAB, (n, SEQUENCE)) for n in sizes]
    result = _over_batches(lambda f, x: f(x).last_hidden_state, model, inputs)
    return {"sizes": sizes, "sequence": SEQUENCE} | result


#: The vision server: ResNet-18 (torchvision, random weights) on images of ``VISION_IMAGE``
#: pixels square, batch sizes drawn from ``1..VISION_MAX_BATCH``.
VISION_IMAGE, VISION_MAX_BATCH = 160, 16


def vision_batches(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """ResNet-18 called with ``BATCH_CALLS`` batch sizes from ``1..VISION_MAX_BATCH`` in
    random order: see :func:`_over_batches`."""
    import torchvision

    del budget_s, repeat
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    sizes = _batch_sizes(VISION_MAX_BATCH)
    torch.manual_seed(1)
    inputs = [torch.randn(n, 3, VISION_IMAGE, VISION_IMAGE) for n in sizes]
    result = _over_batches(lambda f, x: f(x), model, inputs)
    return {"sizes": sizes, "image": VISION_IMAGE} | result


def _batch_sizes(largest: int) -> list[int]:
    """``BATCH_CALLS`` batch sizes from ``1..largest``, the same in every run."""
    draw = random.Random(0)
    return [draw.randint(1, largest) for _ in range(BATCH_CALLS)]


def _over_batches(output: Any, model: torch.nn.Module, inputs: list[torch.Tensor]) -> dict:
    """``model`` called on ``inputs`` (``output(call, x)`` is the tensor compared), twice over:
    per backend, each pass's milliseconds (the first compiles, from a reset Dynamo; in the
    second the backends take turns call by call), whether every output matches eager, and
    fxmlir's kernels (of the first pass)."""
    result: dict[str, Any] = {}
    calls = {}
    with torch.no_grad():
        expected = [output(model, x) for x in inputs]

        def one_pass(call: Any) -> tuple[list[float], bool]:
            times, same = [], True
            for x, e in zip(inputs, expected, strict=True):
                start = time.perf_counter()
                out = output(call, x)
                times.append((time.perf_counter() - start) * 1e3)
                same = same and measure.check(out, e)["ok"]
            return times, same

        for name in BACKENDS:
            torch._dynamo.reset()
            first = max((r.seq for r in backend.history), default=-1)
            calls[name] = model if name == "eager" else torch.compile(model, backend=name)
            times, same = one_pass(calls[name])
            result[name] = {"first_pass_ms": sum(times), "ok": same}
            if name == "fxmlir":
                result[name] |= _kernels(first)
        # The second pass: every size has been met. A backend whose entries the last reset
        # dropped compiles them again in an untimed pass; then the backends take turns call
        # by call (the host's speed drifts over seconds).
        for name in BACKENDS[:-1]:
            one_pass(calls[name])
        second = {name: 0.0 for name in BACKENDS}
        for x, e in zip(inputs, expected, strict=True):
            for name in BACKENDS:
                start = time.perf_counter()
                out = output(calls[name], x)
                second[name] += (time.perf_counter() - start) * 1e3
                result[name]["ok"] &= measure.check(out, e)["ok"]
        for name in BACKENDS:
            result[name]["second_pass_ms"] = second[name]
    return result


#: The segmentation probe: image sizes (height, width), each called ``SEGMENT_ROUNDS`` times
#: in the first round's order, then in turns.
SEGMENT_SIZES, SEGMENT_ROUNDS = ((224, 224), (256, 320), (320, 320)), 4


def segmentation(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """A segmentation model (LR-ASPP over MobileNetV3-Large, torchvision, random weights) at
    ``SEGMENT_SIZES``: per backend the first round over the sizes (compiles included, from a
    reset Dynamo), the median milliseconds per size over the later rounds, in which the
    backends take turns call by call (after an untimed round), whether every output matches
    eager, and fxmlir's kernels. Dynamo makes the image sizes symbolic at the second size;
    fxmlir's convolutions, pooling and resizes (gathers) take them, so one kernel serves every
    later size."""
    import torchvision

    del budget_s, repeat
    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=21
    ).eval()
    images = [torch.randn(1, 3, h, w) for h, w in SEGMENT_SIZES]
    result: dict[str, Any] = {"sizes": [list(s) for s in SEGMENT_SIZES]}
    calls = {}
    first = -1
    with torch.no_grad():
        expected = [model(x)["out"] for x in images]
        for name in BACKENDS:
            torch._dynamo.reset()
            if name == "fxmlir":
                first = max((r.seq for r in backend.history), default=-1)
            calls[name] = model if name == "eager" else torch.compile(model, backend=name)
            start = time.perf_counter()
            outs = [calls[name](x)["out"] for x in images]
            result[name] = {
                "first_round_ms": (time.perf_counter() - start) * 1e3,
                "ok": all(measure.check(o, e)["ok"] for o, e in zip(outs, expected, strict=True)),
            }
        # Untimed: a backend whose entries the last reset dropped compiles them again, and
        # fxmlir compiles each later size's kernel at its second call.
        for name in BACKENDS:
            for x in images:
                calls[name](x)
        times: dict[str, list[list[float]]] = {n: [[] for _ in images] for n in BACKENDS}
        for _ in range(SEGMENT_ROUNDS):
            for i, (x, e) in enumerate(zip(images, expected, strict=True)):
                for name in BACKENDS:
                    start = time.perf_counter()
                    out = calls[name](x)["out"]
                    times[name][i].append((time.perf_counter() - start) * 1e3)
                    result[name]["ok"] &= measure.check(out, e)["ok"]
        for name in BACKENDS:
            result[name]["ms"] = [sorted(t)[len(t) // 2] for t in times[name]]
    result["fxmlir"] |= _kernels(first)
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
