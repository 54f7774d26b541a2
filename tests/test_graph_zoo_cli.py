"""`uol graph run zoo:<name>`: both zoos by name with --size and --batch, the peers in --json,
and a name, size or batch off the list refused in one line (exit status 2)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uol_cli.graph_cmd import app
from uol_core.graph.hf_zoo import available


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_hand_built_block_runs_by_name_at_batch_8():
    result = _run("run", "zoo:resnet_basic", "--size", "small", "--batch", "8", "--repeat", "1",
                  "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    assert report["graph"] == "resnet_basic_b8_small" and report["verified"]
    assert "peers" not in report


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_a_library_model_runs_with_the_peers_in_json():
    result = _run("run", "zoo:bert_base", "--size", "small", "--repeat", "2", "--peers", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    rows = {r["contender"]: r for r in report["peers"]["rows"]}
    assert set(rows) == {"uol", "eager", "compile", "onnxruntime", "openvino"}
    assert rows["uol"]["verified"] and rows["eager"]["verified"]
    assert all(r["ms"] or r["note"] for r in rows.values())


@pytest.mark.parametrize("args", [("zoo:/etc/passwd",), ("zoo:gpt2", "--size", "huge"),
                                  ("zoo:gpt2", "--batch", "3")])
def test_a_name_size_or_batch_off_the_list_is_one_line(args):
    result = _run("run", *args)
    assert result.exit_code == 2
    assert result.output.count("\n") <= 1 and "error:" in result.output


def test_peers_need_a_zoo_model():
    result = _run("run", "sample_graphs/mlp.json", "--peers")
    assert result.exit_code == 2 and "zoo:<name>" in result.output
