"""``fxmlir.explain(fn, *args)``: compile and run ``fn`` once under fxmlir and report what was
compiled (graphs, op counts, compile times) and what ran eagerly (ops, counts, source lines,
reasons)."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import torch

from . import backend, partition


@dataclasses.dataclass
class ExplainReport:
    graphs: list[backend.CompileRecord]
    fallbacks: list[partition.Fallback]
    output: Any = None

    @property
    def fallback_counts(self) -> dict[str, int]:
        """Eager op → number of nodes."""
        return dict(collections.Counter(f.op for f in self.fallbacks).most_common())

    def __str__(self) -> str:
        lines = [f"fxmlir compiled {len(self.graphs)} graph(s):"]
        targets = sorted({g.target for g in self.graphs if g.target})
        lines += [f"  for target {t}" for t in targets]
        for g in self.graphs:
            how = {
                "memory": "reused an identical kernel",
                "disk": f"loaded from the compile cache in {g.total_ms:.1f} ms",
            }.get(g.source, f"compiled in {g.total_ms:.1f} ms")
            lines.append(f"  {g.name}: {g.nodes} ATen ops, {how}")
            lines += [f"    warning: {w.splitlines()[0]}" for w in g.warnings]
        if not self.fallbacks:
            lines.append("no op fell back to eager PyTorch")
            return "\n".join(lines)
        lines.append(f"{len(self.fallbacks)} node(s) ran in eager PyTorch:")
        by_op = itertools.groupby(sorted(self.fallbacks, key=lambda f: f.op), key=lambda f: f.op)
        for op, group in by_op:
            items = list(group)
            lines.append(f"  {op} x{len(items)}: {items[0].reason}")
            for f in items:
                lines.append(f"    node `{f.node}`" + (f" at {f.source}" if f.source else ""))
        return "\n".join(lines)


def explain(fn: Callable, *args: Any, **kwargs: Any) -> ExplainReport:
    """Compiles ``fn`` with a fresh Dynamo cache, runs it on ``args``, prints and returns the
    report."""
    torch._dynamo.reset()
    graphs_before = max((r.seq for r in backend.history), default=-1)
    fallbacks_before = max((f.seq for f in partition.fallbacks), default=-1)
    output = torch.compile(fn, backend="fxmlir")(*args, **kwargs)
    report = ExplainReport(
        graphs=[r for r in backend.history if r.seq > graphs_before],
        fallbacks=[f for f in partition.fallbacks if f.seq > fallbacks_before],
        output=output,
    )
    print(report)
    return report
