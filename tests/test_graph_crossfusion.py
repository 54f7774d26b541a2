"""Fusion across node boundaries: views folded into the ODL ops that read them (no copy, the
producer becomes adjacent), and sibling GEMMs (q/k/v) merged into one; each decision explained."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from uol_core.graph.export_import import export_module
from uol_core.graph.run import compile_graph, make_inputs, max_error
from uol_core.graph.view_fold import fold_views, index_map, view_chain

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from uol_core.graph.zoo import build


class TransposedGelu(nn.Module):
    """A linear, a head split and transpose (views), then an elementwise op on the view."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        h = self.proj(x).view(1, 6, 4, 8).transpose(1, 2)
        return torch.nn.functional.gelu(h) * 2.0


def _run(module, x, backend="c"):
    graph = export_module(module, x)
    compiled = compile_graph(graph, backend)
    env = make_inputs(graph, 0)
    env[next(iter(graph.inputs))] = x
    with torch.no_grad():
        expected = dict(zip(graph.outputs, (module(x),)))
    return graph, compiled, env, expected


def test_a_transposed_view_is_an_affine_index_map():
    torch.manual_seed(0)
    graph = export_module(TransposedGelu(), torch.randn(1, 6, 16))
    made_by = {t: n.name for n in graph.nodes for t in n.writes()}
    reader = next(n for n in graph.nodes if n.kind == "odl" and n.source != "linear_bias")
    base, chain = view_chain(graph, next(iter(reader.inputs.values())), made_by)
    coeffs, offsets = index_map(graph, base, chain)
    # base is the linear's [6, 32] output; the view is [1, 4, 6, 8]: base[t, 8h + d] = view[0, h, t, d]
    assert graph.shapes[base].shape == (6, 32)
    assert coeffs == ((0, 0, 1, 0), (0, 8, 0, 1)) and offsets == (0, 0)


def test_folded_view_removes_the_copy_and_makes_the_producer_adjacent():
    torch.manual_seed(0)
    x = torch.randn(1, 6, 16)
    graph, compiled, env, expected = _run(TransposedGelu(), x)
    folds = compiled.plan.view_folds
    assert any(d["folded"] and "affine index map" in d["reason"] for d in folds)
    assert max_error(compiled(env), expected) <= 1e-5
    stats = compiled.runner(env).stats
    assert stats.copies == 0 and stats.calls == 0
    # the gelu now reads the linear's output: the planner weighs fusing them (and explains why
    # not: the GEMM would have to write the transposed layout as generic loops), and fuses the
    # gelu with the scaling after it
    considered = {(d.producer, d.consumer): d for d in compiled.plan.decisions}
    linear = next(n.name for n in graph.nodes if n.source == "linear_bias")
    gelu = next(n.name for n in graph.nodes if n.kind == "odl" and "gelu" in n.name)
    assert (linear, gelu) in considered and "generic loop nests" in considered[linear, gelu].reason
    assert any(d.fused and d.producer == gelu for d in compiled.plan.decisions)


def test_a_view_that_merges_strided_dims_is_refused_with_its_reason():
    class MergeAfterTranspose(nn.Module):
        def forward(self, x):
            return torch.relu(x.transpose(0, 1).reshape(4, 6)) + 1.0

    graph = export_module(MergeAfterTranspose(), torch.randn(2, 4, 3))
    _, decisions = fold_views(graph, "reference")
    assert decisions and not any(d["folded"] for d in decisions)
    assert all("not an affine index map" in d["reason"] for d in decisions)


def test_qkv_projections_become_one_gemm_and_new_weights_are_used():
    module, x = build("llama_block", "small", batch=2)
    graph, compiled, env, expected = _run(module, x)
    merged = [d for d in compiled.plan.siblings if d["merged"]]
    assert len(merged) == 1 and len(merged[0]["nodes"]) == 3 and "one GEMM" in merged[0]["reason"]
    kept = [d for d in compiled.plan.siblings if not d["merged"]]
    assert kept and "epilogue" in kept[0]["reason"]  # the SwiGLU gate keeps its fused GEMM
    assert max_error(compiled(env), expected) <= 1e-5
    wq = next(n for n in graph.params if "wq" in n)
    changed = dict(env)
    changed[wq] = env[wq] * 0.5
    unplanned = compile_graph(graph, "c", fuse=False)
    unplanned.planned = False
    with torch.no_grad():
        assert max_error(compiled(changed), unplanned(changed)) <= 1e-5


def test_a_patch_embedding_conv_imports_as_a_gemm_over_patches():
    torch.manual_seed(0)
    module = nn.Conv2d(3, 8, 4, stride=4)
    x = torch.randn(2, 3, 8, 12)
    graph, compiled, env, expected = _run(module, x)
    odl = [n.source for n in graph.nodes if n.kind == "odl"]
    assert odl == ["linear_bias"]  # no direct conv: the patches feed the GEMM template
    assert max_error(compiled(env), expected) <= 1e-5
    assert compiled.runner(env).stats.copies == 1  # the patches: one permuting copy
