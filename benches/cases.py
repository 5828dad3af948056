"""The workloads of the suite: each case builds a function and its inputs in the process that
measures it, and says what its group is and how much work one call does.

Groups: ``model`` cases enter the runtime and compile-time summaries (``extra`` ones are shown
but left out of them); ``real`` cases are models at the sizes they are used at (224 x 224
images, BERT-base, attention over thousands of tokens), whose GFLOP/s (counted by
``torch.utils.flop_counter`` on one eager call) are reported against the FMA peak measured in
the same process (``fxmlir.fma_peak``); ``gemm`` cases report GFLOP/s; ``bandwidth`` cases
report GB/s.

GEMM convention: ``a @ b`` with ``a`` of shape M×K and ``b`` of shape K×N (both row-major f32),
giving M×N; one call does 2·M·N·K floating-point operations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from fxmlir.demo import (
    MLP,
    LastHiddenState,
    TransformerBlock,
    bert_model,
    llama_bf16,
    real_models,
)

#: Elements of the bandwidth-bound cases: 128 MiB of f32 per tensor, so that the input and the
#: output together (256 MiB) are well beyond the last-level cache.
BANDWIDTH_ELEMENTS = 32 << 20
FLOAT_BYTES = 4


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    group: str  # "model", "gemm" or "bandwidth"
    build: Callable[[], tuple[Callable[..., Any], tuple[torch.Tensor, ...]]]
    description: str
    #: Floating-point operations of one call (GEMM cases).
    flops: int = 0
    #: Minimum bytes one call reads and writes (bandwidth cases).
    bytes: int = 0
    #: Shown, but left out of the summary lines.
    extra: bool = False

    def header(self) -> dict[str, Any]:
        """What a result row says about its case."""
        return {
            "case": self.name,
            "group": self.group,
            "description": self.description,
            "flops": self.flops,
            "bytes": self.bytes,
            "extra": self.extra,
        }


def elementwise_chain(x: torch.Tensor) -> torch.Tensor:
    y = torch.sigmoid(x) * x + 1.0
    y = torch.tanh(y) - x * 0.5
    return torch.relu(y) * torch.exp(-x * x)


def elementwise_affine(x: torch.Tensor) -> torch.Tensor:
    # Not `x * 1.0`: Inductor folds that into a no-op returning its input.
    return x * 2.0 + 1.0


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)
    return torch.softmax(scores, dim=-1) @ v


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


class SmallConvNet(nn.Module):
    """Three conv3x3+BatchNorm+ReLU layers (the last two with stride 2), global average
    pooling and a linear classifier."""

    def __init__(self, channels: tuple[int, ...] = (3, 16, 32, 64), classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
            stride = 1 if i == 0 else 2
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
            ]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.features(x)).flatten(1))


def _module(factory: Callable[[], nn.Module], *shapes: tuple[int, ...]):
    def build():
        torch.manual_seed(0)
        model = factory().eval()
        return model, tuple(torch.randn(s) for s in shapes)

    return build


def _function(fn: Callable[..., Any], *shapes: tuple[int, ...]):
    def build():
        torch.manual_seed(0)
        return fn, tuple(torch.randn(s) for s in shapes)

    return build


def _real_model(key: str):
    """One of ``fxmlir.demo.real_models()``, chosen by a word of its name."""

    def build():
        for name, model, x in real_models():
            if key in name:
                return model.eval(), (x,)
        raise KeyError(f"fxmlir.demo.real_models() has no model named like {key!r}")

    return build


def _bert_base():
    """transformers BERT at BERT-base width (d=768, 12 heads, FFN 3072), two layers, random
    weights, on 1 x 128 ids: the bench's models are small, real ones are this wide."""
    torch.manual_seed(0)
    model = bert_model(hidden=768, heads=12, intermediate=3072, positions=128).eval()
    return model, (torch.randint(0, 1000, (1, 128)),)


def _llama_bf16():
    """``fxmlir.demo.llama_bf16()``: a bf16 Llama at d=512 on 1 x 128 ids."""
    model, ids = llama_bf16()
    return model, (ids,)


def _mixtral_bf16():
    """transformers Mixtral in bf16 (2 layers, d=256, 8 experts, 2 per token), random weights,
    on 1 x 64 ids: its experts are grouped products (``aten._grouped_mm``)."""
    import warnings

    import transformers

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.MixtralConfig(
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=4,
            num_local_experts=8,
            num_experts_per_tok=2,
            vocab_size=1000,
        )
    model = LastHiddenState(transformers.MixtralForCausalLM(config), "logits")
    return model.to(torch.bfloat16).eval(), (torch.randint(0, 1000, (1, 64)),)


def _resnet50(dtype: torch.dtype):
    """torchvision resnet50 in ``dtype`` on one 224 x 224 image, the size it was trained at
    (the other convolution cases are small images)."""

    def build():
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.resnet50().eval().to(dtype)
        return model, (torch.randn(1, 3, 224, 224, dtype=dtype),)

    return build


def _vision(factory: str, *, segmentation: bool = False, **kwargs: Any):
    """A torchvision model (``factory`` in ``torchvision.models``, or in its ``segmentation``
    package, whose output dict's ``out`` is returned) with random weights, on one 224 x 224
    image."""

    def build():
        import torchvision

        torch.manual_seed(0)
        if segmentation:
            model = SegmentationOut(getattr(torchvision.models.segmentation, factory)(**kwargs))
        else:
            model = _live_head(getattr(torchvision.models, factory)(**kwargs))
        return model.eval(), (torch.randn(1, 3, 224, 224),)

    return build


class SegmentationOut(nn.Module):
    """A torchvision segmentation model returning its ``out`` map alone."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def _live_head(model: nn.Module) -> nn.Module:
    """``model`` with a seeded random classifier where torchvision starts it at zeros (its
    VisionTransformer's ``heads.head``): with zero weights every backend's logits equal
    eager's whatever the layers before computed, and the check of the output checks nothing."""
    head = getattr(getattr(model, "heads", None), "head", None)
    if isinstance(head, nn.Linear) and not head.weight.any():
        with torch.no_grad():
            nn.init.normal_(head.weight, std=0.02)
    return model


def _vit_tiny():
    """torchvision's VisionTransformer at ViT-Tiny's size (12 layers, d=192, 3 heads, MLP 768,
    16 x 16 patches) on one 224 x 224 image."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=224, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768
    )
    return _live_head(model).eval(), (torch.randn(1, 3, 224, 224),)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _bert_base_full(tokens: int):
    """transformers BERT-base (12 layers, d=768, 12 heads, FFN 3072), random weights, on
    1 x ``tokens`` ids."""

    def build():
        torch.manual_seed(0)
        model = bert_model(hidden=768, heads=12, intermediate=3072, positions=512, layers=12)
        return model.eval(), (torch.randint(0, 1000, (1, tokens)),)

    return build


def _gemm(name: str, m: int, k: int, n: int) -> Case:
    return Case(
        name,
        "gemm",
        _function(gemm, (m, k), (k, n)),
        f"f32 M={m} K={k} N={n}",
        flops=2 * m * n * k,
    )


def all_cases() -> dict[str, Case]:
    chain_elements = 1 << 22
    cases = [
        Case("mlp", "model", _module(MLP, (64, 256)), "MLP 256-512-512-128, batch 64"),
        Case(
            "transformer_block",
            "model",
            _module(TransformerBlock, (4, 64, 128)),
            "pre-norm block d=128, 4 heads, batch 4 x 64 tokens",
        ),
        Case(
            "elementwise_chain",
            "model",
            _function(elementwise_chain, (chain_elements,)),
            "sigmoid/tanh/relu/exp chain on 4M f32",
            bytes=2 * FLOAT_BYTES * chain_elements,
        ),
        Case(
            "softmax_attention",
            "model",
            _function(softmax_attention, (4, 128, 64), (4, 128, 64), (4, 128, 64)),
            "softmax(q k^T / sqrt(d)) v, 4 x 128 x 64",
        ),
        Case(
            "small_convnet",
            "model",
            _module(SmallConvNet, (8, 3, 32, 32)),
            "3 x conv3x3+BN+ReLU, avgpool, linear; 8 x 3 x 32 x 32",
        ),
        Case("resnet18", "model", _real_model("resnet18"), "torchvision resnet18, 1x3x64x64"),
        Case("bert", "model", _real_model("BERT"), "transformers BERT 2 layers d=128, 2x32 ids"),
        Case("gpt2", "model", _real_model("GPT-2"), "transformers GPT-2 2 layers d=128, 2x32 ids"),
        Case(
            "mobilenet_v3_small",
            "model",
            _real_model("mobilenet"),
            "torchvision mobilenet_v3_small, 1 x 3 x 64 x 64",
            extra=True,
        ),
        Case(
            "llama",
            "model",
            _real_model("Llama"),
            "transformers Llama 2 layers d=128, grouped-query attention, 2x32 ids",
            extra=True,
        ),
        Case(
            "llama_bf16",
            "model",
            _llama_bf16,
            "transformers Llama in bfloat16, 2 layers d=512, 1 x 128 ids",
            extra=True,
        ),
        Case(
            "mixtral_bf16",
            "model",
            _mixtral_bf16,
            "transformers Mixtral in bfloat16, 2 layers d=256, 8 experts (2 per token), 1 x 64 ids",
            extra=True,
        ),
        Case(
            "bert_base",
            "model",
            _bert_base,
            "transformers BERT, 2 layers at BERT-base width (d=768), 1 x 128 ids",
            extra=True,
        ),
        Case(
            "resnet50", "real", _resnet50(torch.float32), "torchvision resnet50, 1 x 3 x 224 x 224"
        ),
        Case(
            "densenet121",
            "real",
            _vision("densenet121"),
            "torchvision densenet121 (dense connectivity: concatenations), 224 x 224",
        ),
        Case(
            "squeezenet",
            "real",
            _vision("squeezenet1_1"),
            "torchvision squeezenet1_1 (fire modules), 224 x 224",
        ),
        Case(
            "resnext50",
            "real",
            _vision("resnext50_32x4d"),
            "torchvision resnext50_32x4d (grouped convolutions), 224 x 224",
        ),
        Case(
            "deeplabv3",
            "real",
            _vision(
                "deeplabv3_mobilenet_v3_large",
                segmentation=True,
                weights=None,
                weights_backbone=None,
            ),
            "torchvision deeplabv3_mobilenet_v3_large (dilated convolutions, bilinear "
            "upsampling), 224 x 224",
        ),
        Case(
            "vit_tiny", "real", _vit_tiny, "ViT-Tiny/16 (torchvision VisionTransformer), 224 x 224"
        ),
        Case("vit_base", "real", _vision("vit_b_16"), "torchvision vit_b_16, 224 x 224"),
        Case(
            "attention_512",
            "real",
            _function(attention, (1, 8, 512, 64), (1, 8, 512, 64), (1, 8, 512, 64)),
            "scaled_dot_product_attention, 8 heads x 512 tokens x 64",
        ),
        Case(
            "attention_2048",
            "real",
            _function(attention, (1, 8, 2048, 64), (1, 8, 2048, 64), (1, 8, 2048, 64)),
            "scaled_dot_product_attention, 8 heads x 2048 tokens x 64",
        ),
        Case("bert_base_128", "real", _bert_base_full(128), "BERT-base (12 layers), 1 x 128 ids"),
        Case("bert_base_512", "real", _bert_base_full(512), "BERT-base (12 layers), 1 x 512 ids"),
        Case(
            "resnet50_bf16",
            "model",
            _resnet50(torch.bfloat16),
            "torchvision resnet50 in bfloat16, 1 x 3 x 224 x 224",
            extra=True,
        ),
        _gemm("gemm_256", 256, 256, 256),
        _gemm("gemm_512", 512, 512, 512),
        _gemm("gemm_1024", 1024, 1024, 1024),
        _gemm("gemm_skinny", 64, 4096, 1024),
        Case(
            "elementwise_affine",
            "bandwidth",
            _function(elementwise_affine, (BANDWIDTH_ELEMENTS,)),
            "x * 2.0 + 1.0 on 128 MiB f32",
            bytes=2 * FLOAT_BYTES * BANDWIDTH_ELEMENTS,
        ),
    ]
    return {c.name: c for c in cases}
