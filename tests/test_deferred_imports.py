"""tools/deferred_imports.py: every import inside a function says why it is there."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("deferred_imports",
                                               ROOT / "tools" / "deferred_imports.py")
deferred_imports = importlib.util.module_from_spec(_SPEC)
sys.modules["deferred_imports"] = deferred_imports  # dataclasses look their module up there
_SPEC.loader.exec_module(deferred_imports)


def unexplained_lines(tmp_path: Path, source: str) -> list[int]:
    path = tmp_path / "module.py"
    path.write_text(textwrap.dedent(source))
    return [item.line for item in deferred_imports.unexplained(path)]


def test_a_function_level_import_needs_a_reason(tmp_path):
    source = '''
        """A module."""
        import os


        def run():
            from pkg import engine
            import json  # noqa: F401
            from . import sibling
            settings = {}
            # a circle: pkg.cycle imports this module back
            from pkg import cycle
            from pkg import other  # kept off the import path: it reads the registry
            import torch
            from torch.nn import functional
            return engine, cycle, json, other, torch, functional, sibling, settings


        class Page:
            def draw(self):
                if self:
                    import plotly.graph_objects as go
                    from pkg import helper
                    return go, helper
    '''
    # 7: no reason; 8: a directive is no reason; 9: a relative import is the project's own;
    # 23: the comment-free heavy import above it gives no reason for the next one
    assert unexplained_lines(tmp_path, source) == [7, 8, 9, 23]


def test_module_level_imports_are_not_checked(tmp_path):
    source = '''
        import os
        try:
            from pkg import optional
        except ImportError:
            optional = None
    '''
    assert unexplained_lines(tmp_path, source) == []


def test_a_module_docstring_line_gives_the_reason_for_the_whole_module(tmp_path):
    source = '''
        """The CLI's commands.

        Deferred imports: each command imports its engine when it runs, so `uol --help` stays fast.
        """


        def run():
            from pkg import engine
            return engine
    '''
    assert unexplained_lines(tmp_path, source) == []
    empty = source.replace(" each command imports its engine when it runs, so `uol --help` stays"
                           " fast.", "")
    assert unexplained_lines(tmp_path, empty) == [9]


def test_a_mixed_import_is_heavy_only_if_every_name_is():
    heavy = deferred_imports.is_heavy
    (both,) = compile_statements("import torch, json")
    (one,) = compile_statements("import torch.nn")
    assert not heavy(both) and heavy(one)


def compile_statements(source: str) -> list[ast.stmt]:
    return ast.parse(source).body


def test_every_heavy_package_says_why():
    assert all(len(why.split()) >= 3 for why in deferred_imports.HEAVY_PACKAGES.values())


def test_the_repository_gives_a_reason_for_every_deferred_import(capsys):
    status = deferred_imports.main([])
    assert status == 0, capsys.readouterr().out
