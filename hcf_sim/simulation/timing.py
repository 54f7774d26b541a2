"""Wall time per phase of one command (`uol hcf simulate --profile`): off unless a caller records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_log: list[tuple[str, float]] | None = None


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block under `name` while a `record()` is open; free otherwise."""
    if _log is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _log.append((name, time.perf_counter() - t0))


@contextmanager
def record() -> Iterator[list[tuple[str, float]]]:
    """Collect (phase, seconds) of everything timed inside the block, in order."""
    global _log
    saved, _log = _log, []
    try:
        yield _log
    finally:
        _log = saved
