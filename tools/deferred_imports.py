"""Fail on any import inside a function body that does not say why it is there.

An import inside a function runs when the function is first called, not when its module loads.
That is a choice worth making (a heavy dependency kept off `uol --help` and the server's start, a
circle between layers broken on purpose, a registry row loaded when first asked for), but a reader
cannot tell a choice from a habit unless it is written down. So every function-level import must
have one of:

- a module of one of the `HEAVY_PACKAGES` below (each with the cost that makes deferring it
  worth while; the list lives here and nowhere else);
- a why-comment on its line, or on the comment line just above its run of imports (the rule
  `tools/import_cycles.py` reads for a deferred import that breaks a circle);
- a line in its module's docstring starting `Deferred imports:` that says why for the whole
  module (a CLI command module whose commands import their engines when they run).

A bare `# noqa` or `# type: ignore` is a directive, not a reason. Run as
`python tools/deferred_imports.py [paths...]` from the repository root (`make lint` runs it);
`--summary` prints the count per package instead of each import.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tools beside this one
from import_reasons import comment_above  # found through the line above

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("uol_core", "hcf_sim", "profilers", "app", "uol_cli", "uol_remote")

# Third-party packages whose import costs enough that a function may defer it without a comment.
# Costs are `python -X importtime -c "import <name>"` on the 2-core CPU build host (torch 2.13
# CPU build, a cold start after a warm disk cache), rounded.
HEAVY_PACKAGES: dict[str, str] = {
    "torch": "about 1 s and several hundred MB: most commands and pages never touch a tensor",
    "torchvision": "loads torch and its operator library",
    "triton": "about 0.5 s, and it probes for a GPU toolchain when loaded",
    "transformers": "several seconds: it scans every model family and pulls in torch",
    "onnxruntime": "about 0.3 s and a native runtime loaded into the process",
    "onnx": "its protobuf schema and C++ checker, about 0.3 s",
    "openvino": "about 0.5 s and its native plugins",
    "plotly": "about 0.5 s for the graph objects; only pages and reports that draw need it",
    "pandas": "about 0.4 s; only tables that export to frames need it",
    "scipy": "about 0.3 s per sub-package; only fits and statistics need it",
    "playwright": "a browser driver, only for screenshots and browser checks",
    "sklearn": "about 0.5 s of estimators and their compiled extensions, only for model fits",
    "ray": "a distributed runtime with its own start-up, only for remote workers",
}

MODULE_REASON = re.compile(r"^\s*Deferred imports:\s*\S", re.MULTILINE)
DIRECTIVE = re.compile(r"(noqa(:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^]]*\])?"
                       r"|pragma:[^#]*|pylint:[^#]*)", re.IGNORECASE)


@dataclass(frozen=True)
class DeferredImport:
    """One import statement inside a function body that gives no reason."""

    path: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def is_heavy(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether every module the statement imports belongs to one of `HEAVY_PACKAGES`."""
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""] if node.level == 0 else [""]
    else:
        names = [alias.name for alias in node.names]
    return all(name.partition(".")[0] in HEAVY_PACKAGES for name in names)


def comment_reason(line: str) -> bool:
    """Whether a source line carries a comment with words in it, not only a lint directive."""
    if "#" not in line:
        return False
    comment = line.split("#", 1)[1]
    return bool(DIRECTIVE.sub("", comment).strip(" #"))


def has_comment_reason(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """A why-comment on the statement's lines, or on the comment line right above the run of
    import lines (blank lines and parenthesised continuations between them too) it belongs to."""
    first, last = node.lineno, node.end_lineno or node.lineno
    if any(comment_reason(line) for line in lines[first - 1:last]):
        return True
    above = comment_above(lines, first)
    return above is not None and comment_reason(above)


def function_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement inside a function or method body, at any depth."""
    def walk(node: ast.AST, in_function: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                yield child
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            yield from walk(child, inside)
    yield from walk(tree, False)


def module_gives_reason(tree: ast.Module) -> bool:
    """Whether the module's docstring has a `Deferred imports:` line with a reason after it."""
    docstring = ast.get_docstring(tree, clean=True)
    return bool(docstring and MODULE_REASON.search(docstring))


def unexplained(path: Path) -> list[DeferredImport]:
    """The function-level imports of one file that give no reason (see the module docstring)."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    if module_gives_reason(tree):
        return []
    lines = source.splitlines()
    return [DeferredImport(path, node.lineno, lines[node.lineno - 1].strip())
            for node in function_imports(tree)
            if not is_heavy(node) and not has_comment_reason(lines, node)]


def python_files(paths: list[Path]) -> Iterator[Path]:
    """The `.py` files under each path (a file is itself)."""
    for path in paths:
        if path.is_file():
            yield path
        else:
            yield from sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def main(argv: list[str]) -> int:
    summary = "--summary" in argv
    arguments = [a for a in argv if a != "--summary"]
    paths = [Path(a).resolve() for a in arguments] or [ROOT / p for p in PACKAGES]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print("no such file or folder: " + ", ".join(map(str, missing)))
        return 2
    found = [item for path in python_files(paths) for item in unexplained(path)]
    shown = [item.path.relative_to(ROOT) if item.path.is_relative_to(ROOT) else item.path
             for item in found]
    if summary:
        for package, count in sorted(Counter(p.parts[0] for p in shown).items()):
            print(f"{package}: {count}")
    else:
        for item, path in zip(found, shown):
            print(f"{path}:{item.line}: {item.text}")
    if found:
        print(f"{len(found)} import(s) inside a function give no reason: hoist it to the top, "
              "or add a comment saying why (a circle it breaks, a cost it keeps off the import "
              "path), or a `Deferred imports:` line in the module docstring.")
        return 1
    print("every import inside a function gives its reason")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
