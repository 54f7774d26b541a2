"""Malformed graphs are refused with messages that name the node, the tensor and what was expected."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.graph import GraphError, graph_from_dict, load_graph, validate

ADD = "op add(A: f32[M, N], B: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = A[m, n] + B[m, n]\n"


def mlp(**changes) -> dict:
    data = {"name": "t", "inputs": {"x": {"shape": [4, 8]}},
            "params": {"W": {"shape": [8, 16]}, "b": {"shape": [16]}},
            "nodes": [{"name": "fc", "op": "linear_bias", "inputs": {"X": "x", "W": "W", "b": "b"},
                       "outputs": {"Y": "h"}},
                      {"name": "act", "odl": "op g(X: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = gelu(X[m, n])\n",
                       "inputs": {"X": "h"}, "outputs": {"Y": "y"}}],
            "outputs": ["y"]}
    data.update(changes)
    return data


def check(data: dict) -> str:
    with pytest.raises(GraphError) as err:
        validate(graph_from_dict(data))
    return str(err.value)


def test_valid_graph_infers_every_shape():
    graph = validate(graph_from_dict(mlp()))
    assert graph.shapes["h"].shape == (4, 16) and graph.shapes["y"].shape == (4, 16)


def test_unknown_operator_suggests_the_close_name():
    data = mlp()
    data["nodes"][0]["op"] = "linera_bias"
    assert "unknown operator 'linera_bias'" in check(data) and "linear_bias" in check(data)


def test_shape_mismatch_names_the_edge():
    data = mlp(params={"W": {"shape": [9, 16]}, "b": {"shape": [16]}})
    message = check(data)
    assert "shape mismatch at node fc" in message and "x" in message


def test_declared_shape_mismatch_along_an_edge():
    data = mlp()
    data["nodes"][1]["shapes"] = {"X": [4, 15]}
    assert "edge 'h' (fc -> act.X)" in check(data)


def test_cycle_is_reported_with_its_path():
    nodes = [{"name": "a", "odl": ADD, "inputs": {"A": "x", "B": "v"}, "outputs": {"Y": "u"}},
             {"name": "b", "odl": ADD, "inputs": {"A": "x", "B": "u"}, "outputs": {"Y": "v"}}]
    message = check({"inputs": {"x": {"shape": [2, 2]}}, "nodes": nodes, "outputs": ["v"]})
    assert "cycle" in message and "a -> b -> a" in message.replace("b -> a -> b", "a -> b -> a")


def test_unknown_tensor_and_bad_ports_and_double_writer():
    data = mlp()
    data["nodes"][1]["inputs"] = {"X": "hh"}
    assert "reads 'hh'" in check(data)
    data = mlp()
    data["nodes"][0]["inputs"] = {"X": "x", "W": "W"}
    assert "takes inputs" in check(data)
    data = mlp()
    data["nodes"][1]["outputs"] = {"Y": "h"}
    assert "written by both" in check(data)


def test_structure_errors():
    assert "non-empty list" in check({"nodes": [], "outputs": ["y"]})
    assert "positive integers" in check(mlp(inputs={"x": {"shape": [4, -1]}}))
    assert "unknown dtype" in check(mlp(inputs={"x": {"shape": [4, 8], "dtype": "f33"}}))
    assert "not written" in check(mlp(outputs=["nope"]))
    data = mlp()
    data["nodes"][1]["odl"] = "op g(X: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = gelu(X[m, q])\n"
    assert "inline ODL" in check(data)


def test_tensor_names_must_be_strings():
    # found by the graph fuzzer: lists and nulls as tensor names crashed later stages
    data = mlp()
    data["nodes"][0]["inputs"]["X"] = ["x"]
    assert "non-empty strings" in check(data)
    data = mlp()
    data["nodes"][1]["outputs"]["Y"] = None
    assert "non-empty strings" in check(data)
    node = {"name": "r", "torch": "torch.relu", "args": [{"tensor": None}], "outputs": {"out": "y"}}
    assert "string name" in check(mlp(nodes=[node]))
    node = {"name": "r", "torch": "torch.relu", "args": {"tensor": "x"}, "outputs": {"out": "y"}}
    assert "must be a list" in check(mlp(nodes=[node]))


def test_json_torch_targets_are_restricted():
    node = {"name": "s", "torch": "torch.save", "args": [], "outputs": {"out": "z"}}
    assert "disallowed" in check(mlp(nodes=[node]))
    node = {"name": "s", "torch": "method:copy_", "args": [], "outputs": {"out": "z"}}
    assert "not an allowed tensor method" in check(mlp(nodes=[node]))


def test_cli_reports_bad_files_with_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    result = CliRunner().invoke(app, ["graph", "show", str(bad)])
    assert result.exit_code == 2 and "invalid JSON" in result.output
    data = mlp()
    data["nodes"][0]["op"] = "linera_bias"
    bad.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["graph", "run", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    with pytest.raises(GraphError, match="no graph file"):
        load_graph(tmp_path / "missing.json")
