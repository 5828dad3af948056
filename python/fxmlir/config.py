"""Run-time settings of fxmlir. Each field has an environment variable; code may also set the
fields directly or temporarily with ``config.patch(...)``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator


def _env_str(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


@dataclasses.dataclass
class Config:
    #: Write ``<graph>.fx.json``, ``<graph>.NN-<stage>.mlir`` and ``<graph>.ll`` here
    #: (``FXMLIR_DUMP_DIR``).
    dump_dir: str | None = dataclasses.field(default_factory=lambda: _env_str("FXMLIR_DUMP_DIR"))
    #: Named MLIR pipeline used to compile graphs (``FXMLIR_PIPELINE``).
    pipeline: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_PIPELINE", "default")
    )

    #: What happens to ops fxmlir cannot compile: ``"eager"`` runs them in PyTorch between
    #: compiled partitions, ``"error"`` raises ``UnsupportedOpError`` naming them
    #: (``FXMLIR_FALLBACK``).
    fallback: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FXMLIR_FALLBACK", "eager")
    )

    def check_fallback(self) -> str:
        if self.fallback not in ("eager", "error"):
            raise ValueError(
                f"fxmlir.config.fallback must be 'eager' or 'error', got {self.fallback!r}"
            )
        return self.fallback

    @contextlib.contextmanager
    def patch(self, **changes: object) -> Iterator[Config]:
        """Temporarily change settings: ``with fxmlir.config.patch(dump_dir="d"): ...``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise AttributeError(f"unknown fxmlir config fields: {sorted(unknown)}")
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


config = Config()
