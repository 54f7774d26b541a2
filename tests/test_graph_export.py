"""torch.export import: stock modules with control flow import whole; every node is an ODL op,
a view, or opaque with a reason that the CLI and the JSON show."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.graph import GraphError, graph_to_dict, run_graph
from uol_core.graph.export_import import export_module, import_model


def _opaque(graph) -> dict[str, str]:
    return {n.source: n.label for n in graph.nodes if n.kind == "torch" and n.label != "view"}


def test_stock_transformer_encoder_layer_imports_whole_and_verifies():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)
    graph = export_module(layer, torch.randn(2, 8, 32))
    assert _opaque(graph) == {}
    sources = {n.source for n in graph.nodes if n.kind == "odl"}
    assert {"linear_bias", "layernorm"} <= sources
    report = run_graph(graph, "reference", repeat=1)
    assert report["verified"] and report["against"] == "torch module", report["max_rel_error"]


def test_multihead_attention_imports_and_verifies():
    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    graph = import_model(SelfAttention(), torch.randn(1, 6, 16))
    assert "torch.export" in graph.description and _opaque(graph) == {}
    assert run_graph(graph, "reference", repeat=1)["verified"]


class Unmappable(nn.Module):
    """A tanh GELU and an add (mapped) beside an int64 argmax, its cast, and a Bessel function
    (no ODL form): each of those stays in torch with its reason."""

    def forward(self, x):
        y = F.gelu(x, approximate="tanh") + x.argmax(-1, keepdim=True).float()
        return torch.special.bessel_j0(y)


def test_unmapped_nodes_carry_their_reason():
    graph = export_module(Unmappable(), torch.randn(4, 8))
    reasons = _opaque(graph)
    assert "unsupported op: aten.special_bessel_j0" in reasons["aten.special_bessel_j0"]
    assert reasons["aten.argmax"].startswith("opaque: dtype: int64")
    assert any(n.kind == "odl" for n in graph.nodes)  # the tanh GELU and the add are mapped
    assert run_graph(graph, "reference", repeat=1)["verified"]


def test_export_failure_falls_back_to_fx_and_says_so():
    class DataDependent(nn.Module):
        def forward(self, x):
            return torch.relu(x) if x.sum() > 0 else -x  # export refuses data-dependent branches

    with pytest.raises(GraphError, match=r"torch\.export cannot trace"):
        export_module(DataDependent(), torch.randn(4, 4))
    with pytest.raises(GraphError, match=r"fallback: torch\.fx cannot trace"):
        import_model(DataDependent(), torch.randn(4, 4))


def test_fx_fallback_is_used_when_asked_and_keeps_reasons():
    from uol_core.graph.examples import SmallCNN

    graph = import_model(SmallCNN(), torch.randn(1, 3, 16, 16), method="fx")
    assert "torch.fx" in graph.description
    assert "module Dropout has no ODL mapping" in _opaque(graph)["module:Dropout"]


def test_causal_sdpa_gqa_and_strided_conv_map_to_odl():
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 8, 4, stride=4)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)

        def forward(self, img):
            x = self.dw(self.patch(img)).flatten(2).transpose(1, 2)  # [1, 16, 8]
            q = x.view(1, 16, 2, 4).transpose(1, 2)
            kv = x[..., :4].view(1, 16, 1, 4).transpose(1, 2).repeat_interleave(2, dim=1)
            return F.scaled_dot_product_attention(q, kv, kv, is_causal=True)

    torch.manual_seed(0)
    graph = export_module(Mixed(), torch.randn(1, 3, 16, 16))
    assert _opaque(graph) == {}
    names = {n.op.name for n in graph.nodes if n.kind == "odl"}
    # the stride-4 4x4 patch conv is a GEMM over the patches (aten_rules.patchify)
    assert {"sdpa_causal", "repeat_heads", "linear_bias", "conv2d_k3x3_s1_p1_dw"} <= names
    assert run_graph(graph, "reference", repeat=1)["verified"]


def test_cli_import_lists_opaque_reasons_and_run_json_times_the_module(tmp_path):
    runner = CliRunner()
    spec = "tests.test_graph_export:Unmappable"
    result = runner.invoke(app, ["graph", "import", spec, "--input-shape", "4,8"])
    assert result.exit_code == 0, result.output
    assert "runs in torch: unsupported op: aten.special_bessel_j0" in result.output
    out = tmp_path / "g.json"
    result = runner.invoke(app, ["graph", "import", spec, "--input-shape", "4,8", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    # the functionalised program casts with _to_copy (the functional form of aten.to)
    assert {o["source"] for o in data["opaque"]} == {"aten.argmax", "aten._to_copy", "aten.special_bessel_j0"}
    result = runner.invoke(app, ["graph", "run", "uol_core.graph.examples:MLP", "--input-shape",
                                 "4,256", "--backend", "reference", "--repeat", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["against"] == "torch module" and report["torch_eager_ms"] > 0
    assert report["speedup_vs_eager"] == pytest.approx(report["torch_eager_ms"] / report["total_ms"])
    assert report["torch_compile_ms"] is None  # only with --compile


def test_graph_file_reports_no_whole_graph_speedup(tmp_path):
    from pathlib import Path

    from uol_core.graph import load_graph

    graph = load_graph(Path(__file__).parent.parent / "sample_graphs" / "mlp.json")
    report = run_graph(graph, "reference", repeat=1)
    assert report["speedup_vs_eager"] is None and report["torch_eager_ms"] is None
    assert "no torch module" in report["speed_baseline"]
    assert graph_to_dict(graph)["nodes"]


class ConvNorms(nn.Module):
    """A conv whose batch norm folds into it, beside one whose output is also read elsewhere
    (its norm stays a scale and shift) and a depthwise conv with a bias."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 6, 3, padding=1, bias=False), nn.Conv2d(6, 6, 1)
        self.dw = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.bn_a, self.bn_b, self.bn_dw = nn.BatchNorm2d(6), nn.BatchNorm2d(6), nn.BatchNorm2d(6)

    def forward(self, x):
        y = torch.relu(self.bn_a(self.a(x)))
        z = self.b(y)
        return self.bn_dw(self.dw(self.bn_b(z) + z))


def test_an_inference_batch_norm_read_only_by_a_conv_folds_into_its_weight_and_bias():
    torch.manual_seed(0)
    module = ConvNorms().eval()
    with torch.no_grad():
        for bn in (module.bn_a, module.bn_b, module.bn_dw):
            bn.running_mean.normal_(0, 0.5)
            bn.running_var.uniform_(0.3, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0, 0.5)
    graph = export_module(module, torch.randn(2, 4, 8, 8))
    norms = [n.op.name for n in graph.nodes if n.kind == "odl" and n.op.name.startswith("bn_")]
    assert norms == ["bn_batch_norm_1"], norms  # z is read twice: its norm stays
    assert "batch_norm folded into conv2d" in graph.description
    assert "batch_norm_2 folded into conv2d_2" in graph.description
    convs = [n for n in graph.nodes if n.kind == "odl" and n.op.name.startswith("conv2d")]
    assert len(convs) == 3 and all("b" in n.inputs for n in convs)  # the bias-free conv gained one
    for backend in ("reference", "c"):
        report = run_graph(graph, backend, repeat=1)
        assert report["verified"], (backend, report["max_rel_error"])


def test_imports_on_several_threads_at_once_each_get_torch_export():
    # the IDE serves callbacks on several threads: two exports at once used to break each other
    # (one fell back to fx, which failed too: "CURRENT_PATCHER is None in finally block")
    import threading

    from uol_core.graph.export_import import import_model
    from uol_core.graph.zoo import build

    results: dict[int, str] = {}

    def load(key: int) -> None:
        module, x = build("convnext_block", "small")
        try:
            results[key] = import_model(module, x).description
        except Exception as exc:  # the failure is what the test reports
            results[key] = f"failed: {exc}"

    threads = [threading.Thread(target=load, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(d.startswith("imported from") and "torch.export" in d and "failed" not in d
               for d in results.values()), results
