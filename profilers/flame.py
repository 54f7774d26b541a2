"""The flame tree every profiler here produces: frame name, file:line, self and total cost, children."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class FlameNode:
    """One frame of a call (or line) tree; `total` includes the children, `self_cost` does not.

    `unit` says what the numbers count: "seconds" (pyinstrument), "Ir" (callgrind
    instructions) or any event name. Children are kept in the order they were added.
    """

    name: str
    file: str = ""
    line: int = 0
    self_cost: float = 0.0
    total: float = 0.0
    children: list[FlameNode] = field(default_factory=list)
    unit: str = "seconds"
    meta: dict = field(default_factory=dict)

    @property
    def location(self) -> str:
        """'file:line' (or just the file, or '')."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file

    def child(self, name: str, file: str = "", line: int = 0) -> FlameNode:
        """The child with this identity, created (with zero cost) if missing."""
        for node in self.children:
            if (node.name, node.file, node.line) == (name, file, line):
                return node
        node = FlameNode(name, file, line, unit=self.unit)
        self.children.append(node)
        return node

    def walk(self, depth: int = 0) -> Iterator[tuple[int, FlameNode]]:
        """Every node with its depth, parents before children."""
        yield depth, self
        for node in self.children:
            yield from node.walk(depth + 1)

    def find(self, name: str) -> list[FlameNode]:
        """Every node whose name is `name`."""
        return [node for _, node in self.walk() if node.name == name]

    def total_of(self, name: str) -> float:
        """Total cost under frames named `name`, counted once per outermost occurrence."""
        def visit(node: FlameNode) -> float:
            if node.name == name:
                return node.total
            return sum(visit(c) for c in node.children)
        return visit(self)

    def share(self, name: str) -> float:
        """Fraction of the root's total spent under frames named `name`."""
        return self.total_of(name) / self.total if self.total else 0.0

    def fix_totals(self) -> FlameNode:
        """Recompute totals bottom-up as self + children (for trees built from self costs)."""
        for node in self.children:
            node.fix_totals()
        self.total = self.self_cost + sum(c.total for c in self.children)
        return self

    def sort(self) -> FlameNode:
        """Heaviest child first, recursively (the 'left heavy' view)."""
        self.children.sort(key=lambda n: -n.total)
        for node in self.children:
            node.sort()
        return self

    def hot_paths(self, limit: int = 10) -> list[tuple[str, float, float]]:
        """(frame path, self, total) of the frames with the largest self cost."""
        rows = []

        def visit(node: FlameNode, path: str) -> None:
            here = f"{path} > {node.name}" if path else node.name
            rows.append((here, node.self_cost, node.total))
            for c in node.children:
                visit(c, here)

        visit(self, "")
        return sorted(rows, key=lambda r: -r[1])[:limit]

    def to_dict(self) -> dict:
        """JSON-ready nested dict (the on-disk flame format of UOL)."""
        data = {"name": self.name, "file": self.file, "line": self.line,
                "self": self.self_cost, "total": self.total, "unit": self.unit,
                "children": [c.to_dict() for c in self.children]}
        if self.meta:
            data["meta"] = self.meta
        return data

    @classmethod
    def from_dict(cls, data: dict) -> FlameNode:
        """Inverse of `to_dict`."""
        unit = data.get("unit", "seconds")
        node = cls(data["name"], data.get("file", ""), int(data.get("line", 0) or 0),
                   float(data.get("self", 0.0)), float(data.get("total", 0.0)), unit=unit,
                   meta=dict(data.get("meta", {})))
        node.children = [cls.from_dict(c) for c in data.get("children", [])]
        return node


def from_stacks(stacks: list[tuple[list[tuple[str, str, int]], float]], name: str = "root",
                unit: str = "seconds") -> FlameNode:
    """Tree from weighted stacks: each stack is [(name, file, line), ...] outermost first."""
    root = FlameNode(name, unit=unit)
    for frames, weight in stacks:
        node = root
        for fname, file, line in frames:
            node = node.child(fname, file, line)
        node.self_cost += weight
    return root.fix_totals()


def render_text(tree: FlameNode, max_depth: int = 8, min_share: float = 0.01) -> str:
    """Indented text view: share of the root, total, self, name and location."""
    lines = []
    for depth, node in tree.walk():
        if depth > max_depth or (tree.total and node.total / tree.total < min_share):
            continue
        share = node.total / tree.total * 100 if tree.total else 0.0
        where = f"  {node.location}" if node.location else ""
        lines.append(f"{share:5.1f}%  {_fmt(node.total, tree.unit):>10}  "
                     f"{_fmt(node.self_cost, tree.unit):>10}  {'  ' * depth}{node.name}{where}")
    return "\n".join(lines)


def _fmt(value: float, unit: str) -> str:
    if unit == "seconds":
        return f"{value * 1e3:.2f} ms"
    return f"{value:,.0f}"
