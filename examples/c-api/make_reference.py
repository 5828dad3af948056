"""Writes what `run_graph` checks: a real model's graph as fxmlir's interchange document, its
kernel inputs' bytes, and eager PyTorch's outputs.

    python make_reference.py OUT_DIR

The model is torchvision's SqueezeNet 1.1 (fire modules: squeeze, parallel expands, concat),
10 classes, at 64 x 64, in inference: functionalised and traced to ATen with fxmlir's
decomposition table, its weights constants of the document. OUT_DIR gets `graph.fx.json`,
`inputs.bin` (each kernel input's bytes, laid out as the kernel takes it) and
`reference.bin` (each output, float32, row-major)."""

import pathlib
import sys

import fxmlir
import torch
import torchvision
from fxmlir import backend, interchange
from torch.fx.experimental.proxy_tensor import make_fx


def main(out: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = torchvision.models.squeezenet1_1(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        gm = make_fx(
            torch.func.functionalize(model),
            decomposition_table=backend.decompositions(),
            tracing_mode="real",
        )(x)
        expected = model(x)
    plan = interchange.export(gm, "squeezenet")
    out.mkdir(parents=True, exist_ok=True)
    (out / "graph.fx.json").write_text(plan.to_json())
    args = [x]
    with open(out / "inputs.bin", "wb") as f:
        for spec, index in zip(plan.document["inputs"], plan.input_args, strict=True):
            meta = spec["meta"]
            laid_out = torch.empty_strided(meta["shape"], meta["strides"], dtype=torch.float32)
            laid_out.copy_(args[index])
            f.write(bytes(laid_out.untyped_storage()))
    outputs = expected if isinstance(expected, tuple) else (expected,)
    with open(out / "reference.bin", "wb") as f:
        for value in outputs:
            f.write(value.contiguous().numpy().tobytes())
    print(f"{fxmlir.__name__}: wrote {out}/graph.fx.json, inputs.bin, reference.bin")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
