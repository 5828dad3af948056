"""``make demo``: compile a small MLP and a transformer block with fxmlir, check them against
eager PyTorch, and report compile time, speed against eager and where the IR dumps are."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import fxmlir
from fxmlir import backend


class MLP(nn.Module):
    def __init__(self, d_in: int = 256, d_hidden: int = 512, d_out: int = 128):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class TransformerBlock(nn.Module):
    """Pre-norm block: LayerNorm → multi-head self-attention → LayerNorm → GELU MLP."""

    def __init__(self, d_model: int = 128, heads: int = 4, d_ff: int = 512):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class LastHiddenState(nn.Module):
    """A transformers model returning one tensor (its logits or last hidden state)."""

    def __init__(self, model: nn.Module, field: str):
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(ids), self.field)


def bert_model(
    hidden: int, heads: int, intermediate: int, positions: int, layers: int = 2
) -> nn.Module:
    """transformers' BERT (two layers unless told) with random weights and a vocabulary of
    1000, returning its last hidden state."""
    import transformers

    config = transformers.BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        vocab_size=1000,
        max_position_embeddings=positions,
    )
    return LastHiddenState(transformers.BertModel(config), "last_hidden_state")


def llama_model(
    hidden: int = 128, intermediate: int = 256, heads: int = 4, kv_heads: int = 2, vocab: int = 1000
) -> nn.Module:
    """transformers' Llama, two layers with grouped-query attention (``heads`` query heads
    share ``kv_heads`` key and value heads), rotary embeddings and RMSNorm, random weights,
    returning logits."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        max_position_embeddings=128,
    )
    return LastHiddenState(transformers.LlamaForCausalLM(config), "logits")


def llama_bf16() -> tuple[nn.Module, torch.Tensor]:
    """:func:`llama_model` in bfloat16 at d=512 (FFN 1408, 8 query heads sharing 2 key and value
    heads, a vocabulary of 4000), on 1 x 128 ids: on a CPU with AVX512-BF16 its linear layers
    are dot products of bf16 pairs (``fxmlir.passes.bf16_pairs``)."""
    torch.manual_seed(0)
    model = llama_model(hidden=512, intermediate=1408, heads=8, vocab=4000)
    return model.to(torch.bfloat16).eval(), torch.randint(0, 4000, (1, 128))


def real_models() -> list[tuple[str, nn.Module, torch.Tensor]]:
    """torchvision's resnet18 and mobilenet_v3_small, transformers' BERT, GPT-2 and Llama
    (small configs, and Llama in bfloat16 at d=512), and resnet18 in bfloat16 on a 224 x 224
    image, all with random weights."""
    import warnings

    import torchvision
    import transformers

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.GPT2Config(
            n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=64
        )
    gpt2 = LastHiddenState(transformers.GPT2LMHeadModel(config), "logits")
    bert = bert_model(hidden=128, heads=4, intermediate=512, positions=64)
    image = torch.randn(1, 3, 64, 64)
    ids = torch.randint(0, 1000, (2, 32))
    return [
        ("torchvision resnet18", torchvision.models.resnet18(weights=None), image),
        ("torchvision mobilenet_v3_small", torchvision.models.mobilenet_v3_small(), image),
        ("transformers BERT (2 layers, d=128)", bert, ids),
        ("transformers GPT-2 (2 layers, d=128)", gpt2, ids),
        ("transformers Llama (2 layers, d=128, grouped-query attention)", llama_model(), ids),
        ("transformers Llama in bfloat16 (2 layers, d=512)", *llama_bf16()),
        (
            "torchvision resnet18 in bfloat16 (224 x 224)",
            torchvision.models.resnet18(weights=None).to(torch.bfloat16),
            torch.randn(1, 3, 224, 224, dtype=torch.bfloat16),
        ),
    ]


def median_ms(fn, args, repeat: int = 30) -> float:
    """Median wall time of ``fn(*args)`` in ms, after three warm-up calls."""
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_case(name: str, model: nn.Module, x: torch.Tensor) -> bool:
    model.eval()
    # Each case compiles as in a fresh process: models sharing code (two Llamas) would
    # otherwise recompile the second one with dynamic sizes.
    torch._dynamo.reset()
    first = len(backend.history)
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="fxmlir")
        start = time.perf_counter()
        actual = compiled(x)
        first_call = (time.perf_counter() - start) * 1e3
        error = (actual - expected).abs().max().item()
        # Half types: a compiled graph keeps f32 intermediates where eager rounds each op.
        tol = 5e-2 if expected.dtype in (torch.bfloat16, torch.float16) else 1e-4
        scale = max(1.0, expected.abs().max().item())
        ok = torch.allclose(actual, expected, atol=tol * scale, rtol=tol)
        eager_ms = median_ms(model, (x,))
        fxmlir_ms = median_ms(compiled, (x,))
    records = list(backend.history)[first:]
    print(f"\n== {name}: input {tuple(x.shape)}")
    print(f"  matches eager: {'yes' if ok else 'NO'} (max abs error {error:.2e})")
    print(f"  first call (Dynamo, the ATen trace, fxmlir's compile, one run): {first_call:.0f} ms")
    for r in records:
        stages = ", ".join(f"{s} {t:.1f}" for s, t in r.timings if s != "total")
        print(f"  graph {r.name}: {r.nodes} ATen ops, compiled in {r.total_ms:.1f} ms ({stages})")
    print(
        f"  run time: eager {eager_ms:.3f} ms, fxmlir {fxmlir_ms:.3f} ms "
        f"-> {eager_ms / fxmlir_ms:.2f}x eager"
    )
    return ok


def main() -> int:
    torch.manual_seed(0)
    dump_dir = fxmlir.config.dump_dir or os.path.abspath("dumps")
    fxmlir.config.dump_dir = dump_dir
    print(
        f"fxmlir {fxmlir.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    results = [
        run_case("MLP 256-512-512-128, ReLU", MLP(), torch.randn(64, 256)),
        run_case("Transformer block d=128, 4 heads", TransformerBlock(), torch.randn(4, 64, 128)),
    ]
    results += [run_case(name, model, x) for name, model, x in real_models()]
    print(f"\nIR dumps (interchange JSON, MLIR after each stage, LLVM IR): {dump_dir}")
    for r in list(backend.history)[:1]:
        for path in r.dumped:
            print(f"  {path}")
    print(
        "Each .mlir dump parses with stock mlir-opt; "
        "replay a graph with `fxmlir run <graph>.fx.json`."
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
