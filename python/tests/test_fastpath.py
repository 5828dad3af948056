"""PyTorch's fused inference fast paths are written out: an ``nn.TransformerEncoder`` in eval
mode without gradients (one ``aten._transformer_encoder_layer_fwd`` per layer) compiles whole
and matches eager; a masked layer keeps the fused op, which runs in eager PyTorch."""

import fxmlir
import pytest
import torch

# Sums over at most 128 terms, in another order than eager's.
ATOL = RTOL = 1e-5


def encoder(norm_first: bool, activation: str) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, batch_first=True, norm_first=norm_first, activation=activation
    )
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layers_compile_whole(norm_first, activation):
    model, x = encoder(norm_first, activation), torch.randn(2, 10, 64)
    with torch.no_grad():
        expected = model(x)
        report = fxmlir.explain(model, x)
    torch.testing.assert_close(report.output, expected, atol=ATOL, rtol=RTOL)
    assert report.fallback_counts == {}, str(report)
    assert len(report.graphs) == 1, str(report)


def test_a_masked_encoder_layer_keeps_the_fused_op():
    model, x = encoder(False, "relu"), torch.randn(2, 10, 64)
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, 7:] = True
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=padding)
        report = fxmlir.explain(lambda x: model(x, src_key_padding_mask=padding), x)
    torch.testing.assert_close(report.output, expected, atol=ATOL, rtol=RTOL)
    assert report.fallback_counts == {"aten._transformer_encoder_layer_fwd.default": 2}
