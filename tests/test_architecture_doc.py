"""docs/architecture.md names files and tables of the code; this keeps the page true."""

from __future__ import annotations

import re
from pathlib import Path

from uol_core.backends import _FACTORIES
from uol_core.backends.c.platforms import PLATFORMS
from uol_core.backends.c.route import routes

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _table_rows(heading: str) -> list[list[str]]:
    """The body rows of the first table after `heading`, as lists of stripped cells."""
    part = DOC.split(heading, 1)[1]
    block = []
    for line in part.splitlines()[1:]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            break
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in block[2:]]


PACKAGES = r"(?:uol_core|tests|app|docs|hcf_sim|profilers|uol_remote|uol_cli|benchmarks|ui_tests)"


def test_every_path_the_page_names_exists():
    paths = set(re.findall(rf"`({PACKAGES}/[\w/.<>-]+\.(?:py|toml|md|json))`", DOC))
    paths |= set(re.findall(rf"({PACKAGES}/[\w/.-]+\.py)\b", DOC))  # in the request walks too
    paths = {p for p in paths if "<" not in p}  # placeholders such as app/pages/<page>.py
    assert len(paths) > 40
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_platform_table_matches_the_platform_registry():
    rows = _table_rows("The platforms today:")
    assert {r[0] for r in rows} == set(PLATFORMS)
    for isa, path, math, stream in rows:
        assert path == f"uol_core/backends/c/platforms/{isa}.py"
        assert PLATFORMS[isa].has_vector_math == math.startswith("yes"), isa
        assert bool(PLATFORMS[isa].stream) == stream.startswith("yes"), isa
    files = {p.stem for p in (ROOT / "uol_core/backends/c/platforms").glob("*.py")}
    assert set(PLATFORMS) <= files


def test_router_table_matches_the_router_rows_in_order():
    rows = _table_rows("The rows today, in the order they are tried")
    assert [r[0] for r in rows] == [route.name for route in routes()]


def test_the_registry_rows_are_the_backends_the_page_describes():
    assert "reference_backend.py" in DOC and set(_FACTORIES) == {"c", "triton", "reference"}


def test_the_whole_house_table_names_every_package():
    """A package added to the repository without a row on the page fails here."""
    rows = {r[0] for r in _table_rows("## The whole house")}
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    packages |= {f"uol_core/{p.name}" for p in (ROOT / "uol_core").iterdir()
                 if (p / "__init__.py").exists()}
    packages -= {"uol_core"}
    missing = sorted(p for p in packages if p not in rows)
    assert not missing, f"docs/architecture.md's house table lacks {missing}"


def test_the_readme_links_the_architecture_page():
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
