"""The model zoo (benchmarks/models.py) at small sizes: every model imports with torch.export
with no opaque node, runs whole and matches the torch module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from uol_core.graph import run_graph
from uol_core.graph.export_import import export_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.models import MODELS, build


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_imports_whole_and_verifies(name):
    module, x = build(name, "small", batch=2)
    graph = export_module(module, x)
    opaque = [(n.source, n.label) for n in graph.nodes if n.kind == "torch" and n.label != "view"]
    assert opaque == []
    report = run_graph(graph, "reference", repeat=1)
    assert report["verified"], report["max_rel_error"]


@pytest.mark.parametrize("name", ["silu_mlp", "resnet_basic"])
def test_zoo_model_runs_on_c_kernels(name):
    module, x = build(name, "small")
    report = run_graph(export_module(module, x), "c", repeat=1)
    assert report["verified"], report["max_rel_error"]
    assert {r["engine"] for r in report["rows"]} <= {"c", "torch"}
    assert report["torch_eager_ms"] > 0 and report["speedup_vs_eager"] > 0
