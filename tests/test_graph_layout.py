"""The Graph page's layered drawing: no two label boxes overlap for the sample graphs and the
hand-built zoo models, edges run downwards through their bends, the figure draws the labels at
the widths the layout counted, and a node opens the fused group it runs in."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest

from app.services.graphs import load_graph_source, node_operator, sample_names, structure
from profilers.figures.graph_layout import BOX_H, CHAR_PX, FONT_PX, label_width, layered_layout
from profilers.figures.graphs import operator_graph
from uol_core.graph.zoo import MODELS as UOL_ZOO


def _drawn(source: dict) -> tuple[nx.DiGraph, dict]:
    s = structure(load_graph_source(source))
    g = nx.DiGraph()
    g.add_nodes_from(s["nodes"])
    g.add_edges_from(tuple(e) for e in s["edges"])
    return g, s


SOURCES = ([{"kind": "sample", "name": n} for n in sample_names()]
           + [{"kind": "zoo", "name": n, "size": "small", "batch": 1} for n in UOL_ZOO])


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s["name"])
def test_no_two_label_boxes_overlap_and_edges_run_down(source):
    g, _ = _drawn(source)
    layout = layered_layout(g)
    boxes = list(layout.boxes.items())
    assert len(boxes) == g.number_of_nodes()
    clashes = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
               if ba.overlaps(bb)]
    assert clashes == []
    for name, box in boxes:  # every box holds its label and lies inside the drawing
        assert box.width >= len(name) * CHAR_PX
        assert box.x - box.width / 2 >= 0 and box.x + box.width / 2 <= layout.width + 1e-6
        assert box.y - BOX_H / 2 >= 0 and box.y + BOX_H / 2 <= layout.height + 1e-6
    for u, v, points in layout.edges:  # from the producer's bottom, down to the consumer's top
        assert points[0][1] == layout.boxes[u].y + BOX_H / 2
        assert points[-1][1] == layout.boxes[v].y - BOX_H / 2
        assert all(a[1] < b[1] for a, b in itertools.pairwise(points))


def test_a_long_edge_bends_around_the_boxes_of_the_layers_it_passes():
    # a -> b -> c -> d plus a skip a -> d: the skip passes two layers on a bend point each,
    # beside b and c, never through their boxes
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    layout = layered_layout(g)
    skip = next(p for u, v, p in layout.edges if (u, v) == ("a", "d"))
    assert len(skip) == 4
    for (x, y), node in zip(skip[1:3], ("b", "c"), strict=True):
        box = layout.boxes[node]
        assert y == box.y and abs(x - box.x) > box.width / 2


def test_a_cycle_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="cycle"):
        layered_layout(nx.DiGraph([("a", "b"), ("b", "a")]))


def test_the_figure_draws_each_label_at_the_layouts_width_one_pixel_per_unit():
    g, s = _drawn({"kind": "sample", "name": "transformer_block.json"})
    fig = operator_graph(g, {"fc1": 2.0}, s["groups"], s["labels"], title="t")
    layout = layered_layout(g)
    labelled = next(t for t in fig.data if t.text is not None and "fc1" in t.text)
    assert labelled.textfont.size == FONT_PX and "monospace" in labelled.textfont.family
    # the axes span the drawing in pixels: the plot area is as wide and tall as the layout
    xr, yr = fig.layout.xaxis.range, fig.layout.yaxis.range
    m = fig.layout.margin
    assert fig.layout.width - m.l - m.r == pytest.approx(xr[1] - xr[0])
    assert fig.layout.height - m.t - m.b == pytest.approx(yr[0] - yr[1])
    assert label_width("fc1") == layout.boxes["fc1"].width
    assert sorted(labelled.text) == sorted(g.nodes)  # one label a node, none empty
    # a click anywhere across a wide box picks its node: several targets carry its name
    picks = [d[0] for t in fig.data if t.customdata is not None for d in t.customdata]
    assert picks.count("out_proj") >= 3


def test_a_node_opens_the_fused_group_it_runs_in():
    graph = load_graph_source({"kind": "sample", "name": "mlp.json"})
    found = node_operator(graph, "act")  # gelu runs inside fc1's kernel
    assert found["group"] == "fc1" and found["nodes"] == ["fc1", "act"]
    assert "gelu(" in found["odl"] and "sum[k]" in found["odl"]
    alone = node_operator(graph, "fc2")  # a library op alone in its group keeps its text
    assert alone["nodes"] == ["fc2"] and alone["odl"].startswith("# Linear layer")
