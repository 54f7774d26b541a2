"""Shared pytest options and the one golden-file check every golden test goes through."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_ROOT = Path(__file__).parent / "golden"
_SESSION_CACHE: list[str] = []


def pytest_configure(config):
    """The suite's tunes, kernels, probes and runs go to a cache of its own (0700, removed at
    the end), never the user's (~/.cache/uol): a test's measurements must not become the
    records a user's tuner or Reports page reads. A UOL_CACHE_DIR already set is kept."""
    if "UOL_CACHE_DIR" not in os.environ:
        _SESSION_CACHE.append(tempfile.mkdtemp(prefix="uol-tests-"))
        os.environ["UOL_CACHE_DIR"] = _SESSION_CACHE[0]


def pytest_unconfigure(config):
    for folder in _SESSION_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files (tests/golden/) from the current output")


@pytest.fixture
def golden(request) -> Callable[[str, str], None]:
    """`golden("c/isa/gemm_avx2.c", text)`: text must equal the checked-in file.

    A missing or different file fails; `--update-golden` rewrites it instead (then review the
    diff). A missing file never passes silently.
    """
    update = request.config.getoption("--update-golden")

    def check(relative: str, text: str) -> None:
        path = GOLDEN_ROOT / relative
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"no golden file tests/golden/{relative}: run pytest --update-golden"
        assert text == path.read_text(), (f"tests/golden/{relative} differs from the emitted "
                                          "text: rerun with --update-golden and review the diff")

    return check


@pytest.fixture(scope="session")
def live_ide(tmp_path_factory) -> dict:
    """The IDE served by Werkzeug's threaded server (as `uol serve` runs it) on a free
    127.0.0.1 port, from a thread of this process: {"base", "port", "token"}. One per test
    process, shared by every test that needs it: Dash registers page callbacks globally, so a
    second `create_app` in the same process would serve none of them."""
    from werkzeug.serving import make_server

    runs = tmp_path_factory.mktemp("ide")
    os.environ["UOL_IDE_RUNS_DB"] = str(runs / "ide_runs.sqlite")
    from app.main import create_app
    from app.security import app_token

    app = create_app(cache_dir=str(runs / "jobs"))
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_port
    yield {"base": f"http://127.0.0.1:{port}", "port": port, "token": app_token(app)}
    server.shutdown()
    thread.join(timeout=5)
