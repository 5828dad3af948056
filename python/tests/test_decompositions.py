"""fxmlir's own decompositions. PyTorch's fused inference fast paths are written out: an
``nn.TransformerEncoder`` in eval mode without gradients (one
``aten._transformer_encoder_layer_fwd`` per layer) compiles whole and matches eager; a masked
layer keeps the fused op, which runs in eager PyTorch. The backward ops core ATen leaves whole
are written out too (convolutions', max and average pooling's): a CNN's training step compiles in
two graphs with nothing left to eager."""

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


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=2, dilation=2, bias=False),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).train()


def gradients(model: torch.nn.Module, fn, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    fn(x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def compiled_step(model: torch.nn.Module, x: torch.Tensor) -> list[str]:
    """One training step compiled with fxmlir, its gradients checked against eager's; the ops
    that ran in eager PyTorch."""
    expected = gradients(model, model, x)
    before = max((f.seq for f in fxmlir.partition.fallbacks), default=-1)
    actual = gradients(model, torch.compile(model, backend="fxmlir"), x)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
    return [f.op for f in fxmlir.partition.fallbacks if f.seq > before]


def test_a_cnn_training_step_compiles_with_nothing_left_to_eager():
    # Strided, padded, dilated and bias-free convolutions, batch norm in training mode, max
    # pooling: the backward's convolution_backward and max_pool2d_with_indices_backward are
    # written out as convolutions and a scatter-add.
    assert compiled_step(cnn(), torch.randn(2, 3, 17, 15)) == []


@pytest.mark.parametrize(
    "pool",
    [
        lambda: torch.nn.AvgPool2d(3, stride=2, padding=1),
        lambda: torch.nn.AvgPool2d((3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
        lambda: torch.nn.AvgPool2d(2, padding=1, count_include_pad=False, ceil_mode=True),
        lambda: torch.nn.AvgPool2d(3, stride=1, divisor_override=4),
        lambda: torch.nn.AdaptiveAvgPool2d((3, 2)),
        lambda: torch.nn.AdaptiveAvgPool2d((5, 7)),
    ],
    ids=["padded", "ceil", "without_padding", "divisor", "adaptive", "adaptive_up"],
)
def test_average_pooling_backward_compiles_whole(pool):
    # avg_pool2d_backward and _adaptive_avg_pool2d_backward, which core ATen leaves whole, are
    # written out as products with the windows' 0/1 membership matrices.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), pool(), torch.nn.Tanh()).train()
    assert compiled_step(model, torch.randn(2, 3, 9, 8)) == []


@pytest.mark.parametrize(
    "conv, shape",
    [
        (lambda: torch.nn.Conv2d(4, 8, 3, groups=2), (2, 4, 6, 6)),
        # Several input channels per group: the weight gradient is per-group products of the
        # gradient by the input's patches, here strided, padded and dilated, in 1-D and 3-D.
        (lambda: torch.nn.Conv2d(8, 12, 3, groups=4, stride=2, padding=1), (2, 8, 9, 8)),
        (lambda: torch.nn.Conv1d(6, 4, 3, groups=2, padding=2, dilation=2), (3, 6, 11)),
        (lambda: torch.nn.Conv3d(4, 4, 2, groups=2, stride=(2, 1, 1)), (1, 4, 5, 4, 3)),
        (lambda: torch.nn.Conv2d(6, 6, 3, groups=6, stride=2, padding=1), (3, 6, 9, 8)),
        (lambda: torch.nn.Conv1d(4, 6, 5, stride=3, padding=2, dilation=2), (2, 4, 23)),
        (lambda: torch.nn.Conv3d(2, 3, 3, stride=(1, 2, 1), padding=1), (1, 2, 5, 6, 7)),
        # A 1x1 kernel's weight gradient is one matrix product over batch and positions.
        (lambda: torch.nn.Conv2d(8, 16, 1, stride=2), (2, 8, 9, 7)),
    ],
    ids=[
        "grouped",
        "grouped_strided",
        "grouped_conv1d",
        "grouped_conv3d",
        "depthwise",
        "conv1d",
        "conv3d",
        "pointwise",
    ],
)
def test_convolution_backward_compiles_whole(conv, shape):
    torch.manual_seed(0)
    assert compiled_step(conv().train(), torch.randn(shape)) == []


def test_a_transposed_convolution_keeps_its_backward_whole():
    # The backward of a transposed convolution is not written out: the op runs eagerly.
    torch.manual_seed(0)
    model = torch.nn.ConvTranspose2d(4, 3, 3, stride=2).train()
    fallbacks = compiled_step(model, torch.randn(2, 4, 5, 5))
    assert fallbacks == ["aten.convolution_backward.default"]


def dropout_step(p: float, x: torch.Tensor):
    """A compiled training-mode dropout (then a sine) and its gradient: the output, the
    input's gradient and the ops that ran in eager PyTorch."""
    before = max((f.seq for f in fxmlir.partition.fallbacks), default=-1)
    # By sequence number: the history keeps only the latest records, so after many tests in
    # one process its length no longer grows.
    compiled = max((r.seq for r in fxmlir.backend.history), default=-1)
    x = x.detach().requires_grad_()
    fn = torch.compile(lambda x: torch.nn.functional.dropout(x, p, True).sin(), backend="fxmlir")
    torch.manual_seed(5)
    y = fn(x)
    y.sum().backward()
    eager = [f.op for f in fxmlir.partition.fallbacks if f.seq > before]
    return y, x.grad, eager, sum(r.seq > compiled for r in fxmlir.backend.history)


def test_dropout_in_training_draws_from_torch_rand_and_keeps_the_graph_whole():
    # The draws are torch.rand under the caller's seed (not eager's bernoulli stream): the same
    # seed gives the same mask as an eager rand; the mask, the scaling and the sine compile in
    # one forward and one backward graph, only the draw runs eagerly.
    p, x = 0.3, torch.randn(64, 3000)
    y, grad, eager, graphs = dropout_step(p, x)
    torch.manual_seed(5)
    keep = torch.rand(x.shape) > p
    torch.testing.assert_close(y, (keep * x / (1 - p)).sin(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, keep * (x / (1 - p)).cos() / (1 - p), atol=1e-6, rtol=1e-6)
    assert eager == ["aten.rand.default"]
    assert graphs == 2


def test_dropout_keeps_the_expected_fraction_and_differs_from_call_to_call():
    p, x = 0.3, torch.ones(200_000)
    fn = torch.compile(lambda x: torch.nn.functional.dropout(x, p, True), backend="fxmlir")
    first, second = fn(x), fn(x)
    # 1 - p kept, within 6 standard deviations (sqrt(p (1 - p) / n) = 0.001).
    assert abs((first != 0).float().mean().item() - (1 - p)) < 0.006
    torch.testing.assert_close(first.unique(), torch.tensor([0.0, 1 / (1 - p)]))
    assert not torch.equal(first, second)
