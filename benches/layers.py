"""Per-layer GFLOP/s: every distinct convolution of torchvision's ResNet-50 at 224 x 224, each
compiled on its own by each backend and timed against eager (:func:`compare.compare_backends`),
against the FMA peak measured in the same process. A model's figure says how far it is from the
roofline; this table says which layers keep it there.

A layer is one ``nn.Conv2d`` module as the model holds it (its weights, no bias, the batch norm
after it left out), called on the input it gets in the model's forward pass. Layers with the
same configuration and input shape are measured once and counted."""

from __future__ import annotations

from typing import Any

import compare
import fxmlir
import measure
import torch
import torch.nn as nn


def distinct_convolutions(
    model: nn.Module, args: tuple[torch.Tensor, ...]
) -> list[tuple[nn.Conv2d, torch.Tensor, int]]:
    """The model's convolutions in the order its forward pass first calls them, one per
    configuration and input shape: the module, a copy of its input and how many of the model's
    convolutions share them."""
    found: dict[tuple, list[Any]] = {}

    def record(module: Any, inputs: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        key = (
            tuple(inputs[0].shape),
            module.out_channels,
            module.kernel_size,
            module.stride,
            module.padding,
            module.dilation,
            module.groups,
            module.bias is not None,
        )
        if key in found:
            found[key][2] += 1
        else:
            found[key] = [module, inputs[0].detach().clone(), 1]

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, nn.Conv2d)]
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for hook in hooks:
            hook.remove()
    return [(m, x, n) for m, x, n in found.values()]


def describe(module: nn.Conv2d, x: torch.Tensor) -> str:
    """``64→256 1×1 /2 g32 @ 56×56``: channels, kernel, stride and groups where not 1, input
    size."""
    kh, kw = module.kernel_size
    text = f"{module.in_channels}→{module.out_channels} {kh}×{kw}"
    if module.stride != (1, 1):
        text += f" /{module.stride[0]}"
    if module.dilation != (1, 1):
        text += f" d{module.dilation[0]}"
    if module.groups != 1:
        text += f" g{module.groups}"
    return text + f" @ {x.shape[-2]}×{x.shape[-1]}"


def resnet50_layers(budget_s: float, repeat: int | None) -> dict[str, Any]:
    """The per-layer rows of ResNet-50 (f32, one image) and the FMA peak measured after them."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    image = torch.randn(1, 3, 224, 224)
    rows = []
    with torch.no_grad():
        measure.process_warmup(compare.BACKENDS)
        for module, x, count in distinct_convolutions(model, (image,)):
            row = compare.compare_backends(module, (x,), budget_s, repeat)
            row["layer"] = describe(module, x)
            row["count"] = count
            row["flops"] = compare.counted_flops(module, (x,))
            rows.append(row)
            torch._dynamo.reset()
        peak = fxmlir.fma_peak()
    return {"model": "resnet50", "layers": rows, "peak_gflops": peak}
