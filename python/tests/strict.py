"""A test's compile in which nothing may fall back to eager, its stages dumped."""

import fxmlir
import torch


def compile_strict(fn, args, dump_dir, target):
    """``fn(*args)`` compiled by fxmlir for ``target`` with no gradients, every stage dumped
    to ``dump_dir``, with ``fallback="error"``: a node fxmlir cannot compile fails the test
    rather than running eagerly."""
    torch._dynamo.reset()
    with (
        torch.no_grad(),
        fxmlir.config.patch(fallback="error", dump_dir=str(dump_dir), target=target),
    ):
        return torch.compile(fn, backend="fxmlir")(*args)
