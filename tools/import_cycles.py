"""Fail on any import circle between files of different families.

A family is the deepest package a module sits in (`uol_core.backends.c.gemm` for
`uol_core.backends.c.gemm.direct`; a package's own `__init__` belongs to that package). Files
of one family may import each other in a circle: they are one room, read together. A circle
that runs through two families means neither can be read, tested or moved without the other,
so it is reported with the imports that close it.

The graph is grimp's (the one import-linter checks its contracts on). Every import counts but
a deferred one: an import inside a function (or any indented block) with a comment saying why,
on its line or just above its block of imports. Such an import runs when the function is called,
not when the module loads, and the comment records the choice (a registry row loaded when first
asked for, a heavy dependency kept off the import path). Run as `python tools/import_cycles.py`
from the repository root; `make lint` runs it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import grimp

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tools beside this one
from import_reasons import comment_above  # found through the line above

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("uol_core", "hcf_sim", "profilers", "app", "uol_cli")


def family(module: str, packages: set[str]) -> str:
    """The deepest package holding `module` (a package is its own family)."""
    return module if module in packages else module.rpartition(".")[0]


def strongly_connected(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm,
    iterative: an import chain can be deeper than Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@cache
def source_lines(module: str) -> list[str]:
    """The lines of a module's file (a package's `__init__.py`)."""
    base = ROOT.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return path.read_text().splitlines()


def is_deferred(module: str, line_number: int) -> bool:
    """Whether the import at `line_number` of `module` is indented (inside a function or block)
    and says why: a comment on its line, or the comment line right above the run of import
    lines (blank lines between them too) it belongs to."""
    lines = source_lines(module)
    line = lines[line_number - 1]
    if not line[:1].isspace():
        return False
    return "#" in line or comment_above(lines, line_number) is not None


def import_graph(packages: Iterable[str] = PACKAGES) -> tuple[dict[str, set[str]], set[str]]:
    """Each module's imports inside `packages` that run when it loads or carry no reason (see
    `is_deferred`), and which modules are packages."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    modules = set(graph.modules)
    edges: dict[str, set[str]] = {}
    for module in modules:
        edges[module] = set()
        for target in graph.find_modules_directly_imported_by(module) & modules:
            details = graph.get_import_details(importer=module, imported=target)
            if not details or not all(is_deferred(module, d["line_number"]) for d in details):
                edges[module].add(target)
    package_names = {m for m in modules if graph.find_children(m)}
    return edges, package_names


def cross_family_circles(edges: Mapping[str, set[str]], packages: set[str]) -> list[list[str]]:
    """The circles (strongly connected components) whose modules span several families."""
    return [c for c in strongly_connected(edges)
            if len({family(m, packages) for m in c}) > 1]


def describe(component: list[str], edges: Mapping[str, set[str]], packages: set[str]) -> str:
    """A circle's families and the imports between its modules that cross a family."""
    members = set(component)
    families = sorted({family(m, packages) for m in component})
    lines = [f"circle of {len(component)} modules over {len(families)} families: "
             + ", ".join(families)]
    for module in component:
        for target in sorted(edges[module] & members):
            if family(module, packages) != family(target, packages):
                lines.append(f"  {module} -> {target}")
    return "\n".join(lines)


def main() -> int:
    edges, packages = import_graph()
    circles = cross_family_circles(edges, packages)
    for component in circles:
        print(describe(component, edges, packages))
    if circles:
        print(f"{len(circles)} import circle(s) span more than one family: move the shared piece "
              "down a layer, pass a function in, or import it where it is used, with a comment "
              "saying why.")
        return 1
    print(f"no import circle spans two families ({len(edges)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
