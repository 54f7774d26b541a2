"""Fusion planning: sample graphs fuse, fused ops are printable ODL, refusals say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from uol_core.graph import load_graph, plan_fusion
from uol_core.odl import parse
from uol_core.odl.patterns import classify
from uol_core.odl.printer import format_op

SAMPLES = sorted((Path(__file__).parent.parent / "sample_graphs").glob("*.json"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_loads_and_fuses(path):
    graph = load_graph(path)
    plan = plan_fusion(graph, "reference")
    assert any(d.fused for d in plan.decisions)
    assert len(plan.groups) < len(graph.nodes)
    for group in plan.groups:
        if len(group.nodes) > 1:
            assert parse(format_op(group.op)) == group.op  # printable and re-parses to itself


def test_c_plan_fuses_epilogues_and_explains_refusals():
    graph = load_graph(SAMPLES[0].parent / "transformer_block.json")
    plan = plan_fusion(graph, "c")
    fused = {(d.producer, d.consumer) for d in plan.decisions if d.fused}
    assert {("out_proj", "res1"), ("fc1", "act"), ("fc2", "res2")} <= fused
    by_pair = {(d.producer, d.consumer): d for d in plan.decisions}
    assert "back-to-back contractions" in by_pair[("fc1", "fc2")].reason
    assert "would lose its c kernel" in by_pair[("ln2", "fc1")].reason
    assert by_pair[("fc1", "act")].bytes_saved == 2 * 128 * 1024 * 4  # h written once, read once
    group = next(g for g in plan.groups if g.name == "fc1")
    assert classify(group.op).kind == "contraction" and len(group.op.stmts) == 2
    # the map's indices were aligned with the contraction's so the C epilogue can take it
    assert group.op.stmts[1].indices == group.op.stmts[0].indices


def test_no_fuse_keeps_one_group_per_node():
    graph = load_graph(SAMPLES[0].parent / "mlp.json")
    assert len(plan_fusion(graph, "c", fuse=False).groups) == 3
