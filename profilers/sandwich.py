"""The sandwich view of a flame tree (speedscope's third view): every function with its self and
total cost summed over all the places it is called from, and for one function the stacks that
call it (callers, inverted) above the calls it makes (callees, merged).

A function is a frame's (name, file, line). Its total counts only outermost occurrences: under
recursion the inner calls are already inside the outer call's total, as speedscope counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from profilers.flame import FlameNode

FrameKey = tuple[str, str, int]


def key_of(node: FlameNode) -> FrameKey:
    return (node.name, node.file, node.line)


@dataclass(frozen=True)
class FunctionCost:
    """One function of the profile: its cost everywhere it appears."""

    name: str
    file: str
    line: int
    self_cost: float
    total: float
    occurrences: int

    @property
    def key(self) -> FrameKey:
        return (self.name, self.file, self.line)

    @property
    def label(self) -> str:
        where = f"{self.file}:{self.line}" if self.file and self.line else self.file
        return f"{self.name}  ({where})" if where else self.name


def function_table(tree: FlameNode) -> list[FunctionCost]:
    """Every function below the root, heaviest self cost first."""
    selfs: dict[FrameKey, float] = {}
    totals: dict[FrameKey, float] = {}
    counts: dict[FrameKey, int] = {}
    for node, path in _occurrences(tree):
        key = key_of(node)
        selfs[key] = selfs.get(key, 0.0) + node.self_cost
        counts[key] = counts.get(key, 0) + 1
        if key not in {key_of(p) for p in path}:  # outermost: an enclosing call counts it
            totals[key] = totals.get(key, 0.0) + node.total
    rows = [FunctionCost(k[0], k[1], k[2], selfs[k], totals.get(k, 0.0), counts[k])
            for k in selfs]
    return sorted(rows, key=lambda r: (-r.self_cost, -r.total, r.name))


def callers(tree: FlameNode, key: FrameKey) -> FlameNode:
    """The function at the root and, above it, who calls it: each outermost occurrence's stack
    read from the function outwards, weighted by that occurrence's total."""
    root = FlameNode(key[0], key[1], key[2], unit=tree.unit)
    for node, path in _outermost(tree, key):
        root.total += node.total
        at = root
        for caller in reversed(path[1:]):  # the tree's own root is the profile, not a caller
            at = at.child(caller.name, caller.file, caller.line)
            at.total += node.total
    _set_self(root)
    return root


def callees(tree: FlameNode, key: FrameKey) -> FlameNode:
    """The function at the root and everything it calls, merged over its outermost
    occurrences (self costs add up frame by frame)."""
    root = FlameNode(key[0], key[1], key[2], unit=tree.unit)
    for node, _ in _outermost(tree, key):
        _merge(root, node)
    return root.fix_totals()


def _occurrences(tree: FlameNode):
    """(node, ancestors from the tree's root) of every node below the root."""
    stack: list[tuple[FlameNode, list[FlameNode]]] = [(c, [tree]) for c in reversed(tree.children)]
    while stack:
        node, path = stack.pop()
        yield node, path
        inner = [*path, node]
        stack.extend((c, inner) for c in reversed(node.children))


def _outermost(tree: FlameNode, key: FrameKey):
    for node, path in _occurrences(tree):
        if key_of(node) == key and key not in {key_of(p) for p in path}:
            yield node, path


def _merge(into: FlameNode, node: FlameNode) -> None:
    into.self_cost += node.self_cost
    for child in node.children:
        _merge(into.child(child.name, child.file, child.line), child)


def _set_self(node: FlameNode) -> None:
    """Self = total less the children's totals (the part no caller above explains)."""
    node.self_cost = max(node.total - sum(c.total for c in node.children), 0.0)
    for child in node.children:
        _set_self(child)
