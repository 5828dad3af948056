"""Real models with random weights (nothing downloaded) against eager: torchvision's vision
models and transformers' language, vision and speech models from small configs, each built the
way a user would build it. Each must match eager with no op falling back to eager and no
optimisation stage skipped (a product left untiled would still match, only slower). Each model
is here for something the others lack: grouped-query attention (Llama, Mistral, Qwen2, Gemma
with one key head), attention and MLP summed in one op (Phi), experts' grouped products
(Mixtral: transformers' fallback op in f32, ``_grouped_mm`` in bf16), relative position
buckets (T5), a scan under vmap (Mamba), channels-last weights, bf16 weights, grid sampling
(RAFT's correlation lookups)."""

import warnings

import fxmlir
import fxmlir.demo
import pytest
import torch

torchvision = pytest.importorskip("torchvision", reason="make setup installs torchvision")
transformers = pytest.importorskip("transformers", reason="make setup installs transformers")

#: float32 models: sums over at most a few hundred terms, in another order than eager's.
TOL = 1e-3
#: bf16 models: a few bf16 ulps (2^-8 relative) of the largest logits.
BF16_TOL = 5e-2


def ids() -> torch.Tensor:
    return torch.randint(0, 1000, (2, 16))


def vision(name: str, channels_last: bool = False):
    def build():
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, 64, 64)
        if channels_last:
            model, x = (t.to(memory_format=torch.channels_last) for t in (model, x))
        return model, x

    return build


def language(config_class: str, model_class: str, field: str, dtype=torch.float32, **config):
    """A transformers model returning ``field`` of its output, from ``config``."""

    def build():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = getattr(transformers, config_class)(**config)
        model = getattr(transformers, model_class)(cfg).eval().to(dtype)
        return (lambda ids: getattr(model(ids), field)), ids()

    return build


def t5():
    cfg = transformers.T5Config(
        d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32, vocab_size=1000
    )
    model = transformers.T5Model(cfg).eval()
    return (lambda ids: model(input_ids=ids, decoder_input_ids=ids[:, :8]).last_hidden_state), ids()


def whisper_encoder():
    cfg = transformers.WhisperConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_mel_bins=80,
        max_source_positions=50,
        vocab_size=1000,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    encoder = transformers.WhisperModel(cfg).eval().encoder
    return (lambda mel: encoder(mel).last_hidden_state), torch.randn(1, 80, 100)


def vit():
    cfg = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    model = transformers.ViTModel(cfg).eval()
    return (lambda x: model(x).last_hidden_state), torch.randn(2, 3, 32, 32)


class OpticalFlow(torch.nn.Module):
    """RAFT's final flow between the two images stacked in ``x``: its correlation lookups are
    ``F.grid_sample``s."""

    def __init__(self, raft: torch.nn.Module):
        super().__init__()
        self.raft = raft

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.raft(x[:1], x[1:], num_flow_updates=4)[-1]


def raft():
    model = OpticalFlow(torchvision.models.optical_flow.raft_small(weights=None)).eval()
    return model, torch.rand(2, 3, 128, 128)


SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=1000)
DECODER = dict(SMALL, num_attention_heads=4, num_key_value_heads=2)
MOE = dict(DECODER, num_local_experts=4, num_experts_per_tok=2)

MODELS = {
    "resnet18": (vision("resnet18"), TOL),
    "resnet18_channels_last": (vision("resnet18", channels_last=True), TOL),
    "mobilenet_v3_small": (vision("mobilenet_v3_small"), TOL),
    "efficientnet_b0": (vision("efficientnet_b0"), TOL),
    "convnext_tiny": (vision("convnext_tiny"), TOL),
    "regnet_y_400mf": (vision("regnet_y_400mf"), TOL),
    "shufflenet_v2_x0_5": (vision("shufflenet_v2_x0_5"), TOL),
    "swin_t": (vision("swin_t"), TOL),
    "raft_small": (raft, TOL),
    "bert": (
        language("BertConfig", "BertModel", "last_hidden_state", **SMALL, num_attention_heads=2),
        TOL,
    ),
    "distilbert": (
        language(
            "DistilBertConfig",
            "DistilBertModel",
            "last_hidden_state",
            dim=64,
            hidden_dim=128,
            n_layers=2,
            n_heads=2,
            vocab_size=1000,
        ),
        TOL,
    ),
    "gpt2": (
        language(
            "GPT2Config",
            "GPT2LMHeadModel",
            "logits",
            n_embd=64,
            n_layer=2,
            n_head=2,
            vocab_size=1000,
            n_positions=64,
        ),
        TOL,
    ),
    "llama": (lambda: (fxmlir.demo.llama_model().eval(), ids()), TOL),
    "llama_bf16": (
        language("LlamaConfig", "LlamaForCausalLM", "logits", torch.bfloat16, **DECODER),
        BF16_TOL,
    ),
    "mistral": (
        language("MistralConfig", "MistralForCausalLM", "logits", **DECODER, sliding_window=8),
        TOL,
    ),
    "qwen2": (language("Qwen2Config", "Qwen2ForCausalLM", "logits", **DECODER), TOL),
    "mixtral": (language("MixtralConfig", "MixtralForCausalLM", "logits", **MOE), TOL),
    "mixtral_bf16": (
        language("MixtralConfig", "MixtralForCausalLM", "logits", torch.bfloat16, **MOE),
        BF16_TOL,
    ),
    "gemma": (
        language(
            "GemmaConfig",
            "GemmaForCausalLM",
            "logits",
            **SMALL,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
        ),
        TOL,
    ),
    "phi": (
        language("PhiConfig", "PhiForCausalLM", "logits", **SMALL, num_attention_heads=2),
        TOL,
    ),
    "bart": (
        language(
            "BartConfig",
            "BartModel",
            "last_hidden_state",
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            vocab_size=1000,
        ),
        TOL,
    ),
    "t5": (t5, TOL),
    # Its scan runs under vmap, which fxmlir's own trace cannot functionalise: the graph goes
    # through aot_autograd instead, with functorch's state restored after the failed trace.
    "mamba": (
        language(
            "MambaConfig",
            "MambaForCausalLM",
            "logits",
            hidden_size=64,
            num_hidden_layers=2,
            vocab_size=1000,
            state_size=8,
        ),
        TOL,
    ),
    "clip_text": (
        language(
            "CLIPTextConfig", "CLIPTextModel", "last_hidden_state", **SMALL, num_attention_heads=2
        ),
        TOL,
    ),
    "vit": (vit, TOL),
    "whisper_encoder": (whisper_encoder, TOL),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager_without_fallback(name):
    build, tol = MODELS[name]
    torch.manual_seed(0)
    model, x = build()
    with torch.no_grad():
        expected = model(x)
        report = fxmlir.explain(model, x)
    torch.testing.assert_close(report.output, expected, atol=tol, rtol=tol)
    assert report.graphs
    assert report.fallback_counts == {}, str(report)
    assert [w for g in report.graphs for w in g.warnings] == [], str(report)
