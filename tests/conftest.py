"""Shared pytest options and the one golden-file check every golden test goes through."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_ROOT = Path(__file__).parent / "golden"


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
