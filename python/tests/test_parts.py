"""Batch norms of a concatenation computed part by part (``fxmlir.passes.parts``): a dense
block's ``relu(batch_norm(cat(xs)))`` becomes the concatenation of each part's normalisation
(its parameters sliced to its channels), which then writes its own channels of the
concatenation. Against eager, with parts of several widths, with and without the ReLU and the
affine parameters; and the cases it leaves alone."""

import json

import fxmlir
import pytest
import torch
import torch.nn as nn

TOL = (1e-5, 1e-5)


class Dense(nn.Module):
    def __init__(self, widths, affine=True, relu=True, reuse=False):
        super().__init__()
        self.norm = nn.BatchNorm2d(sum(widths), affine=affine)
        self.conv = nn.Conv2d(sum(widths), 24, 1, bias=False)
        self.relu, self.reuse = relu, reuse
        gen = torch.Generator().manual_seed(1)
        self.norm.running_mean.normal_(generator=gen)
        self.norm.running_var.uniform_(0.5, 2.0, generator=gen)
        if affine:
            self.norm.weight.data.normal_(generator=gen)
            self.norm.bias.data.normal_(generator=gen)

    def forward(self, *xs):
        joined = torch.cat(xs, 1)
        y = self.norm(joined)
        y = torch.relu(y) if self.relu else y
        y = self.conv(y)
        # Reading the concatenation itself too keeps it whole.
        return (y, joined.sum()) if self.reuse else y


def _targets(tmp_path):
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    return [n["target"] for n in document["nodes"]]


def _run(model, xs, tmp_path):
    model.eval()
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        actual = torch.compile(model, backend="fxmlir")(*xs)
        expected = model(*xs)
    torch.testing.assert_close(actual, expected, atol=TOL[0], rtol=TOL[1])
    return _targets(tmp_path)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("relu", [True, False], ids=["relu", "norm_only"])
def test_normalisation_moves_into_the_parts(affine, relu, tmp_path):
    gen = torch.Generator().manual_seed(0)
    widths = [32, 48, 16]
    xs = [torch.randn(1, w, 9, 11, generator=gen) for w in widths]
    targets = _run(Dense(widths, affine, relu), xs, tmp_path)
    norm = "aten._native_batch_norm_legit_no_training.default"
    assert targets.count(norm) == 3, targets
    assert targets.count("aten.relu.default") == (3 if relu else 0), targets
    # One concatenation, of the normalised parts, read by the convolution.
    assert targets.count("aten.cat.default") == 1, targets
    assert targets.index("aten.cat.default") > max(i for i, t in enumerate(targets) if t == norm)


def test_a_concatenation_read_elsewhere_stays_whole(tmp_path):
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, w, 5, 6, generator=gen) for w in (8, 24)]
    targets = _run(Dense([8, 24], reuse=True), xs, tmp_path)
    assert targets.count("aten._native_batch_norm_legit_no_training.default") == 1, targets
