"""Fixtures of the reliability suite: the IDE on a free 127.0.0.1 port, the fuzz summary."""

from __future__ import annotations

import os
import threading

import pytest
from rel_helpers import FUZZ_COUNTS, TOKENS


def pytest_terminal_summary(terminalreporter):
    """Say how many fuzz inputs ran (the figure docs/reliability.md quotes)."""
    if FUZZ_COUNTS:
        terminalreporter.write_line("fuzz inputs run: " + ", ".join(
            f"{k}={v}" for k, v in sorted(FUZZ_COUNTS.items())) +
            f" (total {sum(FUZZ_COUNTS.values())})")


@pytest.fixture(scope="session")
def ide(tmp_path_factory):
    """The IDE app (one per process) served from a thread on a free 127.0.0.1 port."""
    from werkzeug.serving import make_server

    runs = tmp_path_factory.mktemp("ide")
    os.environ["UOL_IDE_RUNS_DB"] = str(runs / "ide_runs.sqlite")
    from app.main import create_app
    from app.security import app_token

    app = create_app(cache_dir=str(runs / "jobs"))
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    TOKENS[base] = app_token(app)  # rel_helpers.post sends it
    yield base
    server.shutdown()
    thread.join(timeout=5)


