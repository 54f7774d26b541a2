"""tools/import_cycles.py: the import-circle check `make lint` runs over the repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
import_cycles = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(import_cycles)


def test_a_circle_inside_one_family_is_allowed_and_one_across_families_is_not():
    packages = {"pkg", "pkg.a", "pkg.b"}
    inside = {"pkg.a.x": {"pkg.a.y"}, "pkg.a.y": {"pkg.a.x"}, "pkg.b.z": set()}
    assert import_cycles.strongly_connected(inside) == [["pkg.a.x", "pkg.a.y"]]
    assert import_cycles.cross_family_circles(inside, packages) == []
    across = {"pkg.a.x": {"pkg.b.z"}, "pkg.b.z": {"pkg.a.y"}, "pkg.a.y": {"pkg.a.x"}}
    (circle,) = import_cycles.cross_family_circles(across, packages)
    assert circle == ["pkg.a.x", "pkg.a.y", "pkg.b.z"]
    report = import_cycles.describe(circle, across, packages)
    assert "pkg.a.x -> pkg.b.z" in report and "pkg.b.z -> pkg.a.y" in report
    assert "pkg.a.y -> pkg.a.x" not in report  # inside one family: not what closes the circle


def test_a_package_is_its_own_family():
    packages = {"pkg", "pkg.a"}
    assert import_cycles.family("pkg.a", packages) == "pkg.a"
    assert import_cycles.family("pkg.a.x", packages) == "pkg.a"
    assert import_cycles.family("pkg.top", packages) == "pkg"


def test_a_long_chain_does_not_hit_the_recursion_limit():
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(5000)}
    chain["m5000"] = {"m0"}
    (component,) = import_cycles.strongly_connected(chain)
    assert len(component) == 5001


def test_only_an_indented_import_with_its_reason_is_deferred(monkeypatch):
    lines = ["from a import b",
             "def f():",
             "    from c import d",
             "    # loaded when asked for: importing this module stays cheap",
             "    from e import f",
             "    from g import h",
             "    from i import j  # a heavy dependency, kept off the import path",
             "",
             "    from k import l",
             "    x = 1",
             "    from m import n"]
    monkeypatch.setattr(import_cycles, "source_lines", lambda module: lines)
    imports = (1, 3, 5, 6, 7, 9, 11)  # the line numbers of the import statements
    assert [import_cycles.is_deferred("m", n) for n in imports] == [
        False, False, True, True, True, True, False]


def test_the_repository_has_no_circle_across_families():
    edges, packages = import_cycles.import_graph()
    assert "uol_core.backends.c.gemm.emitter" in edges  # the graph holds the packages it checks
    circles = import_cycles.cross_family_circles(edges, packages)
    assert not circles, "\n".join(import_cycles.describe(c, edges, packages) for c in circles)
