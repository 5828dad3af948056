"""Stages of one's own in fxmlir's pipeline, and dialects defined in IRDL.

A :class:`Stage` runs a textual pass pipeline, a transform script or a set of PDL patterns;
placed before, after or instead of one of fxmlir's stages (``fxmlir-opt --list-pipelines``
names them), it runs on every compile while it is in ``fxmlir.config.stages``::

    cse = fxmlir.Stage("my-cse", passes="builtin.module(cse)")
    fxmlir.config.stages = [cse.after("fusion")]

Its dump is ``<graph>.NN-my-cse.mlir``; a mistake in it (an anchor no stage has, a script
that does not parse) raises ``CompileError`` naming the stage before anything compiles, and a
stage that fails while compiling fails the compile like any of fxmlir's own.
``fxmlir.config.dialects`` lists dialects defined in IRDL (files, or the text itself), loaded
into every compile, so that a stage's or a lowering's ops in them verify and print.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Stage:
    """A stage: ``passes`` (a textual pass pipeline), after a ``transform`` script (a module
    whose ``transform.named_sequence @__transform_main`` runs, then is erased), ``pdl``
    patterns (a module of ``pdl.pattern``\\ s applied greedily to the whole module) or the
    ``work`` of one of fxmlir's stages (its Rust work around its passes: ``"schedule"``
    appends fxmlir's transform schedule, ``"parallel"`` its thread split; ``fxmlir-opt
    --list-pipelines`` names them). Without ``passes``, a transform stage runs
    ``transform-interpreter``, a pattern stage nothing more, and a stage with fxmlir's work
    that stage's passes. ``name`` names its dumps: letters, digits, ``-`` and ``_``."""

    name: str
    passes: str | None = None
    transform: str | None = None
    pdl: str | None = None
    work: str | None = None

    def before(self, anchor: str) -> StageEdit:
        """This stage, placed before the stage named ``anchor``."""
        return StageEdit("before", anchor, self)

    def after(self, anchor: str) -> StageEdit:
        """This stage, placed after the stage named ``anchor``."""
        return StageEdit("after", anchor, self)

    def replacing(self, anchor: str) -> StageEdit:
        """This stage, in place of the stage named ``anchor``."""
        return StageEdit("replace", anchor, self)


def removing(anchor: str) -> StageEdit:
    """The edit that takes fxmlir's stage ``anchor`` out of the pipeline (its dumps and
    work with it): ``fxmlir.config.stages = [fxmlir.remove_stage("parallel")]``."""
    return StageEdit("remove", anchor, Stage(anchor, passes="builtin.module()"))


@dataclasses.dataclass(frozen=True)
class StageEdit:
    """A change to the pipeline: ``stage`` ``placement`` (``"before"``, ``"after"`` or
    ``"replace"``) the stage named ``anchor``, or (``"remove"``) that stage out. Edits apply
    in order."""

    placement: str
    anchor: str
    stage: Stage


def _dialect(entry: str | tuple[str, str]) -> dict[str, str]:
    """A dialect: a file holding IRDL, or the IRDL text itself, optionally with who gave it
    (``(origin, entry)``, e.g. a plugin); errors name the file or that origin."""
    origin, entry = entry if isinstance(entry, tuple) else ("fxmlir.config.dialects", entry)
    if os.path.isfile(entry):
        with open(entry) as f:
            return {
                "source": entry if origin.startswith("fxmlir.") else f"{origin}: {entry}",
                "irdl": f.read(),
            }
    return {"source": origin, "irdl": entry}


def extensions(
    stages: Sequence[StageEdit],
    dialects: Sequence[str | tuple[str, str]],
    key: str = "",
    pass_plugins: Sequence[str] = (),
    dialect_plugins: Sequence[str] = (),
) -> str | None:
    """What ``_fxmlir.compile`` takes as ``extensions``: the edits, the dialects, the native
    plugins' paths and what else changes the code (``key``: the active plugins and their
    options) as JSON; ``None`` when there are none."""
    if not (stages or dialects or key or pass_plugins or dialect_plugins):
        return None
    for edit in stages:
        if not isinstance(edit, StageEdit):
            raise TypeError(
                "fxmlir.config.stages holds StageEdits (Stage(...).before/after/replacing), "
                f"got {edit!r}"
            )
    document = {
        "stages": [
            {
                "placement": e.placement,
                "anchor": e.anchor,
                "name": e.stage.name,
                "passes": e.stage.passes,
                "transform": e.stage.transform,
                "pdl": e.stage.pdl,
                "work": e.stage.work,
            }
            for e in stages
        ],
        "dialects": [_dialect(d) for d in dialects],
        "pass_plugins": [os.fspath(p) for p in pass_plugins],
        "dialect_plugins": [os.fspath(p) for p in dialect_plugins],
        "key": key,
    }
    return json.dumps(document)
