"""fxmlir's own ops (``fxmlir.custom_ops``) are defined when the package is imported, and
defining them again changes nothing."""

import importlib

import pytest
import torch
from fxmlir import custom_ops

OPS = ("mm_pairs", "conv_pairs", "mm_panels")


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


def test_panels_product_is_the_product_of_the_right_operand_it_holds():
    a = torch.randn(3, 8)
    b = torch.randn(8, 48)
    panels = b.view(8, 3, 16).permute(1, 0, 2).contiguous()
    torch.testing.assert_close(torch.ops.fxmlir.mm_panels(a, panels), a @ b)


def test_panels_product_rejects_other_operands():
    a = torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="mm_panels takes float32 operands"):
        torch.ops.fxmlir.mm_panels(a.double(), torch.randn(3, 8, 16).double())
    with pytest.raises(RuntimeError, match=r"mm_panels: shapes \[3, 8\] and \[3, 4, 16\]"):
        torch.ops.fxmlir.mm_panels(a, torch.randn(3, 4, 16))
