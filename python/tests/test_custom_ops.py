"""fxmlir's own ops (``fxmlir.custom_ops``) are defined when the package is imported, and
defining them again changes nothing."""

import importlib

import torch
from fxmlir import custom_ops

OPS = ("mm_pairs", "conv_pairs")


def _schemas() -> list[str]:
    return [str(getattr(torch.ops.fxmlir, name).default._schema) for name in OPS]


def test_registering_again_changes_nothing():
    # Importing the package has defined them.
    schemas = _schemas()
    custom_ops.register()
    importlib.reload(custom_ops).register()
    assert _schemas() == schemas
    a = torch.randn(3, 4, dtype=torch.bfloat16)
    b = torch.randn(4, 16, dtype=torch.bfloat16)
    packed = b.view(2, 2, 16).permute(0, 2, 1).contiguous()
    expected = a.float() @ b.float()
    torch.testing.assert_close(torch.ops.fxmlir.mm_pairs(a, packed), expected)
