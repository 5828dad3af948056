"""Real models with random weights (nothing downloaded) against eager: torchvision's resnet18
and mobilenet_v3_small, and transformers' BERT, GPT-2, Llama (grouped-query attention) and Phi
from small configs. Each must match eager (atol = rtol = 1e-3) with no op falling back to eager."""

import warnings

import fxmlir
import fxmlir.demo
import pytest
import torch

torchvision = pytest.importorskip("torchvision", reason="make setup installs torchvision")
transformers = pytest.importorskip("transformers", reason="make setup installs transformers")

TOL = 1e-3


def vision(name):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).eval(), torch.randn(1, 3, 64, 64)


def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=64,
    )
    model = transformers.BertModel(config).eval()
    return (lambda ids: model(ids).last_hidden_state), torch.randint(0, 1000, (2, 16))


def gpt2():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=2, vocab_size=1000, n_positions=64
        )
    model = transformers.GPT2LMHeadModel(config).eval()
    return (lambda ids: model(ids).logits), torch.randint(0, 1000, (2, 16))


def llama():
    torch.manual_seed(0)
    model = fxmlir.demo.llama_model().eval()
    return model, torch.randint(0, 1000, (2, 16))


def phi():
    """Attention and MLP side by side on one input, summed with the residual in one op."""
    torch.manual_seed(0)
    config = transformers.PhiConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        vocab_size=1000,
    )
    model = transformers.PhiForCausalLM(config).eval()
    return (lambda ids: model(ids).logits), torch.randint(0, 1000, (2, 16))


MODELS = {
    "resnet18": lambda: vision("resnet18"),
    "mobilenet_v3_small": lambda: vision("mobilenet_v3_small"),
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "phi": phi,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager_without_fallback(name):
    model, x = MODELS[name]()
    with torch.no_grad():
        expected = model(x)
        report = fxmlir.explain(model, x)
    torch.testing.assert_close(report.output, expected, atol=TOL, rtol=TOL)
    assert report.graphs
    assert report.fallback_counts == {}, str(report)
    # No stage skipped: a product left untiled would still match, only slower.
    assert [w for g in report.graphs for w in g.warnings] == [], str(report)
