"""Whole-graph runs: samples verify against the unfused reference; traced torch modules against torch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.graph import examples, graph_to_dict, load_graph, run_graph
from uol_core.graph.fx_import import import_module

SAMPLES = Path(__file__).parent.parent / "sample_graphs"


@pytest.mark.parametrize("name", ["mlp", "attention_block", "transformer_block",
                                  "resnet_basic_block", "small_cnn"])
def test_samples_run_and_verify(name):
    report = run_graph(load_graph(SAMPLES / f"{name}.json"), "reference", repeat=1)
    assert report["verified"], report["max_rel_error"]
    assert {r["group"] for r in report["rows"]} and report["total_ms"] > 0


def test_mlp_sample_runs_on_the_c_backend():
    report = run_graph(load_graph(SAMPLES / "mlp.json"), "c", repeat=1)
    assert report["verified"]
    assert [r["engine"] for r in report["rows"]] == ["c", "c"]


def test_traced_mlp_runs_with_c_kernels_against_torch():
    graph = import_module(examples.MLP(32, 64, 16), torch.randn(8, 32))
    report = run_graph(graph, "c", repeat=1)
    assert report["verified"] and report["against"] == "torch module"
    assert "c" in {r["engine"] for r in report["rows"]}


def test_traced_transformer_block_runs_end_to_end():
    torch.manual_seed(0)
    graph = import_module(examples.TransformerBlock(64, 2, 128), torch.randn(1, 16, 64))
    sources = {n.source for n in graph.nodes if n.kind == "odl"}
    assert {"layernorm", "linear_bias", "inline"} <= sources
    report = run_graph(graph, "c", repeat=1)
    assert report["verified"], report["max_rel_error"]


def test_unknown_ops_stay_opaque_torch_nodes():
    graph = import_module(examples.SmallCNN(), torch.randn(1, 3, 16, 16))
    opaque = [n for n in graph.nodes if n.kind == "torch" and n.label != "view"]
    assert [n.source for n in opaque] == ["module:Dropout"]
    assert run_graph(graph, "reference", repeat=1)["verified"]
    assert graph_to_dict(graph)["nodes"]  # exportable as JSON


def test_cli_run_json_has_per_group_rows():
    result = CliRunner().invoke(app, ["graph", "run", str(SAMPLES / "mlp.json"), "--backend",
                                      "reference", "--repeat", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert '"verified": true' in result.output and '"rows"' in result.output


def test_kernels_are_timed_in_the_models_order_and_repeated_alone():
    # chain_seconds runs whole replays and times each kernel where it runs, so its inputs come
    # from the kernels before it; kernel_seconds repeats each on its own (caches warm). Both
    # name every C group, and the replay is exact after either. A group run alone also
    # allocates its outputs and crosses Python: at 1x16x16x16 that was 0.03-0.05 ms beside
    # 0.008 ms for the conv kernel itself, and the drawing showed the former.
    from app.callbacks.graph_views import chain_cost, per_group_line
    from profilers.figures.graphs import node_time_bars
    from uol_core.graph.export_import import export_module
    from uol_core.graph.run import compile_graph, make_inputs

    torch.manual_seed(0)
    graph = export_module(examples.ResNetBasicBlock(8).eval(), torch.randn(2, 8, 12, 12))
    compiled = compile_graph(graph, "c")
    env = make_inputs(graph, 0)
    expected = {k: v.clone() for k, v in compiled(env).items()}
    runner = compiled.runner(env)
    chain, warm = runner.chain_seconds(env, 3), runner.kernel_seconds(env, 3)
    kernels = {g.name for g in compiled.plan.groups if g.kind == "odl"}
    assert set(chain) == set(warm) == kernels
    assert all(s > 0 for s in (*chain.values(), *warm.values()))
    again = compiled(env)
    assert all(torch.equal(again[k], expected[k]) for k in expected)
    report = run_graph(graph, "c", repeat=3)
    rows = [r for r in report["rows"] if r["engine"] == "c"]
    assert rows and all(r["warm_ms"] and r["ms"] and r["in_replay"] for r in rows)
    assert "In the model's order the kernels take" in per_group_line(report)
    assert chain_cost([{"ms": 1.0, "in_replay": False, "warm_ms": None}]) == ""
    names = [t.name for t in node_time_bars(report["rows"]).data]
    assert names == ["UOL kernel, in the model", "same kernel repeated, caches warm",
                     "reference evaluator (baseline)"]


def test_per_group_bars_go_logarithmic_when_the_reference_dwarfs_the_kernels():
    from profilers.figures.graphs import node_time_bars

    assert node_time_bars([{"group": "a", "ms": 0.008, "reference_ms": 2.0}]).layout.yaxis.type == "log"
    assert node_time_bars([{"group": "a", "ms": 1.0, "reference_ms": 2.0}]).layout.yaxis.type != "log"
