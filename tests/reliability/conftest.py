"""Fixtures of the reliability suite: the IDE on a free 127.0.0.1 port, the fuzz summary."""

from __future__ import annotations

import pytest
from rel_helpers import FUZZ_COUNTS, TOKENS


def pytest_terminal_summary(terminalreporter):
    """Say how many fuzz inputs ran (the figure docs/reliability.md quotes)."""
    if FUZZ_COUNTS:
        terminalreporter.write_line("fuzz inputs run: " + ", ".join(
            f"{k}={v}" for k, v in sorted(FUZZ_COUNTS.items())) +
            f" (total {sum(FUZZ_COUNTS.values())})")


@pytest.fixture(scope="session")
def ide(live_ide):
    """The IDE app (one per process, tests/conftest.py) on a free 127.0.0.1 port: its base URL."""
    TOKENS[live_ide["base"]] = live_ide["token"]  # rel_helpers.post sends it
    return live_ide["base"]


