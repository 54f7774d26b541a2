"""A layered (Sugiyama-style) drawing of an operator graph, in screen pixels, so that the
labels drawn inside the node boxes never overlap: layers from the longest path, dummy nodes
on the edges that skip layers (they bend around the boxes instead of crossing them), crossing
reduction by barycentres, and x positions packed left to right with a gap per layer.

Pure: networkx in, boxes and edge polylines out (no plotly), so a test can check the drawing
without a browser and the figure builder only paints what this computes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

FONT_PX = 11  # the labels' font size (monospace: every character has the same advance)
CHAR_PX = 7.0  # a monospace glyph's advance at 11 px is 0.6 em = 6.6 px; rounded up
PAD_PX = 10.0  # label to box edge, each side
BOX_H = 22.0
LAYER_GAP = 30.0  # vertical room between layers for the edges
NODE_GAP = 14.0  # horizontal room between two boxes of a layer
DUMMY_W = 6.0  # an edge's bend point takes this much room in its layer
SWEEPS = 6  # crossing-reduction passes (down and up count one each)


@dataclass(frozen=True)
class Box:
    """A node's box, by its centre, in pixels (y grows downwards, as on screen)."""

    x: float
    y: float
    width: float
    height: float = BOX_H

    def overlaps(self, other: Box) -> bool:
        return (abs(self.x - other.x) * 2 < self.width + other.width
                and abs(self.y - other.y) * 2 < self.height + other.height)


@dataclass
class Layout:
    """Node boxes, each edge as a polyline from its producer's bottom to its consumer's top,
    and the drawing's size."""

    boxes: dict[str, Box]
    edges: list[tuple[str, str, list[tuple[float, float]]]] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0


def label_width(text: str) -> float:
    """Width of a node's box for its label at FONT_PX monospace, with padding."""
    return len(text) * CHAR_PX + 2 * PAD_PX


def _layers(g: nx.DiGraph) -> dict[str, int]:
    """Longest path from the sources; a source sits just above its first consumer, so an
    input read deep in the graph does not draw an edge through every layer."""
    layer: dict[str, int] = {}
    for n in nx.topological_sort(g):
        layer[n] = max((layer[p] + 1 for p in g.predecessors(n)), default=0)
    for n in g.nodes:
        if g.in_degree(n) == 0 and g.out_degree(n):
            layer[n] = min(layer[s] for s in g.successors(n)) - 1
    low = min(layer.values(), default=0)
    return {n: v - low for n, v in layer.items()}


def _with_dummies(g: nx.DiGraph, layer: dict[str, int]
                  ) -> tuple[nx.DiGraph, dict[str, list[str]]]:
    """The graph with a chain of dummy nodes on every edge longer than one layer, and each
    original edge's chain (dummies only) to route it through."""
    h = nx.DiGraph()
    h.add_nodes_from(g.nodes)
    chains: dict[str, list[str]] = {}
    for u, v in g.edges:
        chain = [f"\0{u}\0{v}\0{k}" for k in range(layer[u] + 1, layer[v])]
        for k, d in zip(range(layer[u] + 1, layer[v]), chain, strict=True):
            layer[d] = k
        path = [u, *chain, v]
        h.add_edges_from(itertools.pairwise(path))
        chains[f"{u}\0{v}"] = chain
    return h, chains


def _barycentre(nodes: list[str], neighbours, index: dict[str, int]) -> list[str]:
    """A layer reordered by the mean position of each node's neighbours in the fixed layer;
    a node without neighbours keeps its place (stable sort on its own index)."""
    def key(n: str) -> float:
        ns = [index[m] for m in neighbours(n) if m in index]
        return sum(ns) / len(ns) if ns else float(index.get(n, 0))
    return sorted(nodes, key=key)


def _order(h: nx.DiGraph, layer: dict[str, int]) -> list[list[str]]:
    """Nodes of each layer left to right, crossings reduced by alternating barycentre sweeps."""
    rows: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in nx.lexicographical_topological_sort(h, key=str):
        rows[layer[n]].append(n)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        span = range(1, len(rows)) if down else range(len(rows) - 2, -1, -1)
        for i in span:
            fixed = rows[i - 1] if down else rows[i + 1]
            index = {n: k for k, n in enumerate(fixed)}
            rows[i] = _barycentre(rows[i], h.predecessors if down else h.successors, index)
    return rows


def _place_row(row: list[str], width: dict[str, float], wanted: dict[str, float]
               ) -> dict[str, float]:
    """Centres for one layer in its order: each as near its wanted x as the boxes to its left
    allow (never closer than NODE_GAP), then the row shifted as a whole so that it sits as
    near its wanted positions on average as it can (a shift keeps every gap)."""
    xs: dict[str, float] = {}
    right = float("-inf")
    for n in row:
        x = max(wanted[n], right + NODE_GAP + width[n] / 2)
        xs[n] = x
        right = x + width[n] / 2
    if xs:
        shift = sum(wanted[n] - xs[n] for n in row) / len(row)
        xs = {n: x + shift for n, x in xs.items()}
    return xs


def _coordinates(h: nx.DiGraph, rows: list[list[str]], width: dict[str, float]
                 ) -> dict[str, float]:
    """x centres: packed rows first, then passes down and up that pull each node towards the
    mean of its neighbours in the row above (below), each row kept free of overlaps."""
    x: dict[str, float] = {}
    for row in rows:
        x.update(_place_row(row, width, {n: 0.0 for n in row}))
    for sweep in range(4):
        down = sweep % 2 == 0
        for row in (rows if down else rows[::-1]):
            near = h.predecessors if down else h.successors
            wanted = {}
            for n in row:
                ns = [x[m] for m in near(n)]
                wanted[n] = sum(ns) / len(ns) if ns else x[n]
            x.update(_place_row(row, width, wanted))
    return x


def layered_layout(g: nx.DiGraph, labels: Mapping[str, str] | None = None) -> Layout:
    """Boxes top to bottom by layer for a DAG, each as wide as its label (default: the node's
    name); ValueError for a graph with a cycle (an operator graph has none)."""
    if not nx.is_directed_acyclic_graph(g):
        raise ValueError("the graph has a cycle: a layered drawing needs a DAG")
    text = {n: str((labels or {}).get(n, n)) for n in g.nodes}
    layer = _layers(g)
    h, chains = _with_dummies(g, layer)
    width = {n: label_width(text[n]) if n in text else DUMMY_W for n in h.nodes}
    rows = _order(h, layer)
    x = _coordinates(h, rows, width)
    left = min((x[n] - width[n] / 2 for n in h.nodes), default=0.0)
    x = {n: v - left for n, v in x.items()}
    y = {n: layer[n] * (BOX_H + LAYER_GAP) + BOX_H / 2 for n in h.nodes}
    boxes = {n: Box(x[n], y[n], width[n]) for n in g.nodes}
    edges = []
    for u, v in g.edges:
        bends = [(x[d], y[d]) for d in chains[f"{u}\0{v}"]]
        edges.append((u, v, [(x[u], y[u] + BOX_H / 2), *bends, (x[v], y[v] - BOX_H / 2)]))
    right = max((x[n] + width[n] / 2 for n in h.nodes), default=0.0)
    return Layout(boxes, edges, right, len(rows) * (BOX_H + LAYER_GAP) - LAYER_GAP)
