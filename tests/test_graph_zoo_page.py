"""The Graph page's zoo models through its service (app/services/graph_zoo.py): names from the
closed set of both zoos, the import in the graph worker with its opaque nodes listed, a run
beside the deployment runtimes, and errors in one line."""

from __future__ import annotations

import os

import pytest

from app.services import graph_zoo
from app.services.graph_zoo import open_zoo, run_zoo, zoo_options, zoo_source
from uol_core.graph import GraphError
from uol_core.graph.hf_zoo import available
from uol_core.graph.named import import_zoo_model, zoo_models

needs_transformers = pytest.mark.skipif(available() is not None, reason=str(available()))
PEER_NAMES = {"uol", "eager", "compile", "onnxruntime", "openvino"}


def test_the_dropdown_offers_both_zoos_by_name_and_family():
    options = {o["value"]: o for o in zoo_options()}
    assert set(options) == set(zoo_models())
    assert options["convnext_block"]["label"] == "convnext_block (UOL zoo)"
    assert options["resnet50"]["label"].startswith("ResNet-50 (transformers)")
    # without transformers the library models are offered disabled, with the reason
    assert options["resnet50"]["disabled"] == (available() is not None)


@pytest.mark.parametrize(("name", "size", "batch"), [
    ("/etc/passwd", "small", 1), ("../../secret.json", "small", 1), ("gpt2", "/tmp/x", 1),
    ("gpt2", "small", 3), ("gpt2", "small", "8"), (None, "small", 1), ({"name": "gpt2"}, "small", 1)])
def test_names_sizes_and_batches_come_from_closed_sets(name, size, batch):
    with pytest.raises(GraphError) as err:
        zoo_source(name, size, batch)
    assert "\n" not in str(err.value)


def test_a_worker_failure_is_one_line(monkeypatch):
    # an exporter's message runs to pages: the status shows its first line only
    monkeypatch.setattr(graph_zoo, "_worker", lambda *a, **k: {
        "ok": False, "error": "GraphError: gpt2 does not import: dynamic shape\nTraceback (most "
                              "recent call last):\n  File ..."})
    with pytest.raises(GraphError) as err:
        open_zoo(zoo_source("gpt2", "small", 1))
    assert str(err.value) == "GraphError: gpt2 does not import: dynamic shape"
    res = run_zoo(zoo_source("gpt2", "small", 1), peers=True)
    assert res["ok"] is False and "\n" not in res["error"]


def test_a_model_that_cannot_export_is_one_graph_error(monkeypatch):
    import torch

    from uol_core.graph import zoo

    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.nonzero().float().sum() * x  # a shape that depends on the values

    monkeypatch.setitem(zoo.MODELS, "data_dependent", (lambda s: DataDependent(),
                                                       lambda b, s: (b, 4)))
    try:
        graph, _, _ = import_zoo_model("data_dependent", "small", 1)
    except GraphError as exc:  # refused: one line naming the model
        assert "data_dependent" in str(exc) and "\n" not in str(exc)
    else:  # or imported with the value-dependent node left in torch, with its reason
        assert graph.nodes


def test_a_hand_built_block_opens_in_the_worker_with_its_opaque_nodes():
    s = open_zoo(zoo_source("resnet_basic", "small", 1))
    assert s["name"] == "resnet_basic_b1_small" and s["nodes"]
    assert isinstance(s["opaque"], list)
    for row in s["opaque"]:
        assert set(row) == {"node", "source", "reason"} and row["reason"]
    # a clicked node's operator is looked up in the worker too (the Studio opens it)
    kernel = next(n for n in s["nodes"] if not s["labels"][n].startswith("torch"))
    found = graph_zoo.zoo_node(zoo_source("resnet_basic", "small", 1), kernel)
    assert found["odl"].startswith("op ") and found["graph"] == "resnet_basic_b1_small"


@needs_transformers
def test_a_library_model_opens_and_runs_beside_the_peers():
    source = zoo_source("resnet50", "small", 1)
    s = open_zoo(source)
    assert s["name"] == "resnet50_b1_small" and "torch.export" in s["description"]
    assert all(row["reason"] for row in s["opaque"])
    res = run_zoo(source, peers=True)
    assert res["ok"], res.get("error")
    report = res["report"]
    assert report["verified"]
    peers = report["peers"]
    rows = {r["contender"]: r for r in peers["rows"]}
    assert set(rows) == PEER_NAMES and peers["rows"][0]["contender"] == "uol"
    assert rows["uol"]["verified"] and rows["uol"]["ms"] > 0
    assert rows["eager"]["verified"] and peers["baseline"] == "eager"
    # torch and the peers run on every core in the worker, as on the command line, not on the
    # sandbox's one thread per library while our kernels take every core
    cores = len(os.sched_getaffinity(0))
    assert peers["threads"] == cores
    if rows["onnxruntime"]["ms"]:
        assert f"{cores} intra-op threads" in rows["onnxruntime"]["note"]
    for name in ("onnxruntime", "openvino", "compile"):
        # a runtime that is not installed or cannot take the model keeps its row with why
        assert rows[name]["ms"] or rows[name]["note"], rows[name]
        assert bool(rows[name]["ms"]) == rows[name]["verified"]
    assert peers["speedup_vs_baseline"] == pytest.approx(rows["eager"]["ms"] / rows["uol"]["ms"])
