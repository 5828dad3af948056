"""What the weight rewrites' tests share (``test_bf16_pairs.py``, ``test_panels.py``): a
two-layer MLP, compiling a model against eager PyTorch, and reading back the kernel it
became from its dumps."""

import json
import pathlib

import fxmlir
import torch


class Mlp(torch.nn.Module):
    def __init__(self, d: int, hidden: int, out: int, bias: bool = True):
        super().__init__()
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def kernel(dump_dir: pathlib.Path, dump: str) -> tuple[list[str], list[list[int]], str]:
    """The compiled kernel's node targets, its input shapes and the text of its dump whose
    name ends in ``dump`` (``.ll``: the optimised LLVM IR)."""
    (document,) = [json.loads(p.read_text()) for p in dump_dir.glob("*.fx.json")]
    (text,) = [p.read_text() for p in dump_dir.glob(f"*{dump}") if "unoptimized" not in p.name]
    shapes = [i["meta"]["shape"] for i in document["inputs"]]
    return [n["target"] for n in document["nodes"]], shapes, text


def compiled_like_eager(
    model: torch.nn.Module,
    x: torch.Tensor,
    dump_dir: pathlib.Path,
    tolerance: tuple[float, float],
    dump: str,
    **config,
) -> tuple[list[str], list[list[int]], str]:
    """Compiles ``model`` (under ``no_grad``, with ``config``), checks its result on ``x``
    against eager's within ``tolerance`` (absolute, relative) and returns :func:`kernel`."""
    atol, rtol = tolerance
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(dump_dir), **config):
        actual = torch.compile(model, backend="fxmlir")(x)
        expected = model(x)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    return kernel(dump_dir, dump)
