"""Weight-only work leaves the per-call kernel: what a graph computes from parameters alone (a
linear layer's transposed weight) is computed once by a prologue and reused while the weights
stay the same tensors, and recomputed as soon as they change in any way."""

import json
import pathlib

import fxmlir
import pytest
import torch
import torch.fx
from fxmlir.passes import hoist

# Products over a few hundred terms, summed in another order than eager's.
ATOL = RTOL = 1e-4


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)
    ).eval()


def _inputs(dump_dir: pathlib.Path) -> list[str]:
    (document,) = [json.loads(p.read_text()) for p in dump_dir.glob("*.fx.json")]
    targets = [n["target"] for n in document["nodes"]]
    assert "aten.t.default" not in targets, targets
    return [i["name"] for i in document["inputs"]]


def test_transposed_weights_are_inputs_of_the_kernel(tmp_path):
    model, x = _mlp(), torch.randn(8, 64)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        actual = torch.compile(model, backend="fxmlir")(x)
        expected = model(x)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    hoisted = [name for name in _inputs(tmp_path) if name.startswith("hoisted_")]
    assert len(hoisted) == 2, hoisted


def test_off_keeps_the_transposes_in_the_kernel(tmp_path):
    model, x = _mlp(), torch.randn(8, 64)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), hoist=False):
        torch.compile(model, backend="fxmlir")(x)
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    assert [n["target"] for n in document["nodes"]].count("aten.t.default") == 2


def _changes():
    """Ways a weight changes under a compiled model, each of which must be seen."""

    def in_place(model):
        model[0].weight.mul_(-2.0)

    def load_state_dict(model):
        state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
        model.load_state_dict(state)

    def new_data(model):
        model[2].weight.data = torch.randn_like(model[2].weight)

    def new_parameter(model):
        model[0].weight = torch.nn.Parameter(torch.randn_like(model[0].weight))

    return {f.__name__: f for f in (in_place, load_state_dict, new_data, new_parameter)}


@pytest.mark.parametrize("change", sorted(_changes()))
def test_changed_weights_are_seen(change):
    model, x = _mlp(), torch.randn(8, 64)
    compiled = torch.compile(model, backend="fxmlir")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
        _changes()[change](model)
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)


def test_unchanged_weights_reuse_the_values():
    model, x = _mlp(), torch.randn(8, 64)
    runs = []
    compiled = torch.compile(model, backend="fxmlir")
    original = hoist.Hoisted.__call__

    def counting(self, args):
        before = self.state
        result = original(self, args)
        runs.append(self.state is not before)
        return result

    with torch.no_grad():
        hoist.Hoisted.__call__ = counting
        try:
            for _ in range(3):
                compiled(x)
            model[0].weight.add_(1.0)
            compiled(x)
        finally:
            hoist.Hoisted.__call__ = original
    assert runs == [True, False, False, True]


def _split(fn, *shapes, static=(0,)):
    gm = torch.fx.experimental.proxy_tensor.make_fx(fn, tracing_mode="fake")(
        *[torch.randn(s) for s in shapes]
    )
    return hoist.Split(gm, frozenset(static))


def test_what_is_hoisted():
    # A transpose and arithmetic on a weight are; an expand (larger than the weight) and a
    # view that leaves it contiguous are not; nothing reading the activation is.
    split = _split(lambda w, x: x @ (w.t() * 2.0), (16, 32), (4, 32))
    assert [n.target for n in split.hoisted] == [torch.ops.aten.mul.Tensor]
    assert split.watched == [0]
    assert not _split(lambda w, x: x + w.expand(4, 32), (1, 32), (4, 32)).hoisted
    assert not _split(lambda w, x: x + w.view(4, 8), (32,), (4, 8)).hoisted
    assert not _split(lambda w, x: (x * w).t(), (4, 32), (4, 32)).hoisted


def test_a_channels_last_weight_is_hoisted_contiguous(tmp_path):
    """A convolution's channels-last weight would be copied into the layout the kernel reads
    on every call; its contiguous copy is a hoisted input instead, and the channels-last
    weight no longer enters the kernel."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        actual = torch.compile(model, backend="fxmlir")(x)
        expected = model(x)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    (document,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.fx.json")]
    used = {a["ref"]["node"] for n in document["nodes"] for a in n["args"] if "ref" in a}
    weights = [i for i in document["inputs"] if i["meta"]["shape"] == [8, 3, 3, 3]]
    assert [w["meta"]["strides"] for w in weights if w["name"] in used] == [[27, 9, 3, 1]]
    assert [w["name"] for w in weights if w["name"] in used][0].startswith("hoisted_")


def test_what_is_hoisted_from_a_strided_weight():
    # The weight itself, when it is not contiguous and the activation reads it.
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda w, x: x * w, tracing_mode="fake")(
        torch.randn(8, 4).t(), torch.randn(4, 8)
    )
    split = hoist.Split(gm, frozenset({0}))
    assert [n.op for n in split.hoisted] == ["placeholder"]
    assert split.watched == [0]


def _kernel_inputs(dump_dir: pathlib.Path) -> tuple[list[list[int]], list[str]]:
    (document,) = [json.loads(p.read_text()) for p in dump_dir.glob("*.fx.json")]
    return [i["meta"]["shape"] for i in document["inputs"]], [
        n["target"] for n in document["nodes"]
    ]


@pytest.mark.parametrize("width, skewed", [(1024, True), (1000, False)])
def test_weights_of_whole_kibibyte_rows_are_read_through_longer_rows(tmp_path, width, skewed):
    """1024 f32 outputs: the hoisted ``t(weight)`` has rows of 4 KiB, which share cache sets;
    the kernel reads it as a view of a copy 32 columns wider (fxmlir.passes.skew). 1000 do not."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.GELU()).eval()
    x = torch.randn(8, 64)
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path)):
        compiled = torch.compile(model, backend="fxmlir")
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
        # A changed weight is padded again.
        model[0].weight.mul_(-1.5)
        torch.testing.assert_close(compiled(x), model(x), atol=ATOL, rtol=RTOL)
    shapes, targets = _kernel_inputs(tmp_path)
    assert ([64, 1056] in shapes) == skewed, shapes
    assert ("aten.slice.Tensor" in targets) == skewed, targets
