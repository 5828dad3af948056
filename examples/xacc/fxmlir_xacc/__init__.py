"""XACC, a pretend accelerator's fxmlir plugin: its own dialect (``xacc.irdl.mlir``), the ops it
takes (``aten.tanh`` on f32, and its own ``xacc::scaled_tanh``) lowered into that dialect, and a
stage that lowers the dialect to upstream ops (``xacc_to_upstream.pdl.mlir``, PDL patterns), and
its own toolchain to build and run the result (:mod:`fxmlir_xacc.toolchain`: the module after
fxmlir's pipeline, through mlir-translate and clang). Everything else in a graph goes through
fxmlir's own lowerings.

    torch.compile(model, backend="xacc")          # its own backend name
    fxmlir.config.plugins = ["xacc"]               # or active on the fxmlir backend
"""

from __future__ import annotations

import pathlib

import fxmlir
import torch
from fxmlir.lowerings import Call, Lowering

from . import toolchain

HERE = pathlib.Path(__file__).parent

#: XACC's own op, for models that call it: ``tanh(x) * scale``.
_library = torch.library.Library("xacc", "DEF")
_library.define("scaled_tanh(Tensor x, float scale) -> Tensor")


@torch.library.impl(_library, "scaled_tanh", "CompositeExplicitAutograd")
def _scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@torch.library.register_fake("xacc::scaled_tanh")
def _scaled_tanh_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _tanh(call: Call) -> str:
    (x,), (out,) = call.inputs, call.outputs
    return f"""
    func.func @xacc_tanh(%x: {x}) -> {out} {{
      %y = "xacc.tanh"(%x) : ({x}) -> {out}
      return %y : {out}
    }}"""


def _scaled_tanh_mlir(call: Call) -> str:
    (x,), (out,) = call.inputs, call.outputs
    scale = float(call.node.args[1])
    return f"""
    func.func @xacc_scaled_tanh(%x: {x}) -> {out} {{
      %t = "xacc.tanh"(%x) : ({x}) -> {out}
      %s = arith.constant dense<{scale:e}> : {out}
      %y = arith.mulf %t, %s : {out}
      return %y : {out}
    }}"""


def _f32(node: torch.fx.Node) -> bool:
    """XACC computes in f32 only; other dtypes keep fxmlir's lowering."""
    return node.meta["val"].dtype == torch.float32


class XaccPlugin(fxmlir.plugins.Plugin):
    """``toolchain``: run graphs with XACC's own toolchain (:mod:`fxmlir_xacc.toolchain`), else
    with fxmlir's JIT; ``lanes`` stands for a setting of the accelerator that changes the code."""

    name = "xacc"

    def __init__(self, toolchain: bool = True, lanes: int = 16):
        self.toolchain = toolchain
        self.lanes = lanes

    def options(self) -> dict:
        return {"toolchain": self.toolchain, "lanes": self.lanes}

    def executor(self) -> fxmlir.plugins.Executor | None:
        return toolchain.EXECUTOR if self.toolchain else None

    def dialects(self) -> list[str]:
        return [str(HERE / "xacc.irdl.mlir")]

    def stages(self) -> list[fxmlir.StageEdit]:
        lower = fxmlir.Stage(
            "xacc-to-upstream",
            pdl=(HERE / "xacc_to_upstream.pdl.mlir").read_text(),
            passes="builtin.module(func.func(convert-elementwise-to-linalg))",
        )
        return [lower.before("fusion")]

    def lowerings(self) -> list[Lowering]:
        return [
            Lowering("aten.tanh.default", _tanh, _f32, "xacc"),
            Lowering("xacc.scaled_tanh.default", _scaled_tanh_mlir, _f32, "xacc"),
        ]


#: ``torch.compile(model, backend="xacc")``: fxmlir's backend with XACC active.
backend = fxmlir.plugins.backend(XaccPlugin())
