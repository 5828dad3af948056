"""The compile records of ``fxmlir.backend.history`` made since a point, by sequence number:
the history keeps the last 1,000 records, so its length says nothing once it is full."""

from fxmlir import backend


def latest() -> int:
    """The sequence number of the latest record (-1 before any)."""
    return max((r.seq for r in backend.history), default=-1)


def since(start: int) -> list[backend.CompileRecord]:
    """The records made after the one numbered ``start``."""
    return [r for r in backend.history if r.seq > start]
