"""Weights as graph inputs (what aot_autograd hands fxmlir), the same with the weight-only
work hoisted out of the kernel (what fxmlir compiles by default, :mod:`fxmlir.passes.hoist`), and
weights baked into the graph as interchange ``constants`` (docs/interchange.md): the compile
time and run time of the same model graph all three ways.

The graph is captured with fxmlir's own decompositions and exporter; the copy with constants
moves every input that is one of the model's parameters or buffers into ``constants`` with its
data. Both documents are compiled as fxmlir's runtime compiles them (no Dynamo, no disk cache;
after a warm-up compile of an unrelated graph) and run through fxmlir's runtime on the same
arguments."""

from __future__ import annotations

import base64
import copy
import time
from typing import Any

import measure
import torch
from fxmlir import backend as fxmlir_backend
from fxmlir import interchange, runtime
from fxmlir.demo import MLP, TransformerBlock
from fxmlir.passes import hoist
from torch._dynamo.backends.common import aot_autograd

MODELS = {
    "mlp": (MLP, (64, 256)),
    "transformer_block": (TransformerBlock, (4, 64, 128)),
}


def capture(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """The exported plan of the model's one forward graph, the arguments aot_autograd passed
    it and what it returned."""
    captured: list[dict[str, Any]] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any):
        entry: dict[str, Any] = {
            "gm": gm,
            "plan": interchange.export(gm, f"captured_{len(captured)}"),
        }
        captured.append(entry)

        def forward(*args: Any) -> Any:
            out = gm(*args)
            entry.setdefault("args", list(args))
            entry.setdefault("expected", out)
            return out

        return forward

    backend = aot_autograd(fw_compiler=compiler, decompositions=fxmlir_backend.decompositions())
    torch._dynamo.reset()
    torch.compile(model, backend=backend)(x)
    if len(captured) != 1:
        raise RuntimeError(f"expected one graph, Dynamo produced {len(captured)}")
    return captured[0]


def with_constants(plan: interchange.Plan, args: list[Any], weights: set[int]) -> interchange.Plan:
    """A copy of ``plan`` whose inputs that are weights (by data pointer) are constants."""
    doc = copy.deepcopy(plan.document)
    inputs, input_args = [], []
    for entry, arg in zip(doc["inputs"], plan.input_args):
        tensor = args[arg]
        if tensor.data_ptr() in weights:
            data = tensor.detach().contiguous().view(torch.uint8).numpy().tobytes()
            encoded = base64.b64encode(data).decode()
            doc["constants"].append({"name": entry["name"], "meta": entry["meta"], "data": encoded})
        else:
            inputs.append(entry)
            input_args.append(arg)
    doc["inputs"] = inputs
    doc["name"] = f"{doc['name']}_constants"
    return interchange.Plan(document=doc, input_args=input_args, outputs=plan.outputs)


def hoisted(captured: dict[str, Any], weights: set[int]) -> tuple[interchange.Plan, dict]:
    """The plan of the graph with its weight-only work hoisted, and the captured call with the
    prologue's values appended to the arguments."""
    gm, args = captured["gm"], captured["args"]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = frozenset(
        i
        for i, (node, arg) in enumerate(zip(placeholders, args))
        if isinstance(arg, torch.Tensor) and arg.data_ptr() in weights
    )
    split = hoist.Split(gm, static)
    name = f"{captured['plan'].document['name']}_hoisted"
    plan = interchange.export(hoist.main_graph(gm, split), name)
    values = [v.contiguous() for v in hoist.prologue(gm, split)(*args)]
    return plan, {**captured, "args": [*args, *values]}


def compile_and_run(plan: interchange.Plan, captured: dict[str, Any], budget_s: float, repeat):
    """Compile time (wall, and fxmlir's stage timings) and the median run time of one plan,
    checked against the captured graph's result. Compiled once: a second compile of the same
    document would reuse the kernel from memory."""
    text = plan.to_json()
    start = time.perf_counter()
    kernel = measure.compile_document(text)
    compile_ms = (time.perf_counter() - start) * 1e3
    graph = runtime.CompiledGraph(plan, kernel)
    args = captured["args"]
    return {
        "inputs": len(plan.document["inputs"]),
        "constants": len(plan.document["constants"]),
        "json_bytes": len(text),
        "compile_ms": compile_ms,
        "source": getattr(kernel, "source", "compiled"),
        "timings": dict(kernel.timings),
        "check": measure.check(graph(args), captured["expected"]),
        **measure.median_ms(graph, (args,), budget_s, repeat),
    }


def run(budget_s: float, repeat: int | None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    measure.process_warmup(("fxmlir",))
    for name, (factory, shape) in MODELS.items():
        torch.manual_seed(0)
        model = factory().eval()
        try:
            with torch.no_grad():
                captured = capture(model, torch.randn(shape))
                weights = {t.data_ptr() for t in (*model.parameters(), *model.buffers())}
                plan = captured["plan"]
                results[name] = {
                    "inputs": compile_and_run(plan, captured, budget_s, repeat),
                    "hoisted": compile_and_run(*hoisted(captured, weights), budget_s, repeat),
                    "constants": compile_and_run(
                        with_constants(plan, captured["args"], weights), captured, budget_s, repeat
                    ),
                }
        except Exception as e:  # reported in the table, not fatal
            results[name] = {"error": measure.error_text(e)}
    return results
