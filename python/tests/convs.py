"""What the convolution tests share: seeded inputs and the lowered module of a dumped compile."""

import pathlib

import torch


def conv_inputs(x_shape, w_shape, dtype):
    """A seeded input, weight (scaled by its fan-in) and bias of ``dtype``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=gen, dtype=dtype)
    w = torch.randn(w_shape, generator=gen, dtype=dtype) / torch.Size(w_shape[1:]).numel() ** 0.5
    b = torch.randn(w_shape[0], generator=gen, dtype=dtype)
    return x, w, b


def lowered_module(dump_dir) -> str:
    """The lowered module (``*.00-input.mlir``) of the one graph compiled into ``dump_dir``."""
    (text,) = [p.read_text() for p in pathlib.Path(dump_dir).glob("*.00-input.mlir")]
    return text
