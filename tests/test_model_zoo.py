"""The model zoo (uol_core/graph/zoo.py) at small sizes: every model imports with torch.export
with no opaque node, runs whole and matches the torch module."""

from __future__ import annotations

import pytest

from uol_core.graph import run_graph
from uol_core.graph.export_import import export_module
from uol_core.graph.zoo import MODELS, build


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


def test_nanogpt_block_trains_on_uol_kernels_in_lockstep_with_torch():
    """The training benchmark's nanoGPT case at a small size: its Linear and LayerNorm layers and
    its causal attention on UOL kernels, gradients and AdamW steps equal to torch's."""
    import copy

    import torch

    from uol_core.graph.zoo import NanoGPTBlock
    from uol_core.torch.nn import UolAttention, swap_modules

    torch.manual_seed(0)
    reference = NanoGPTBlock(32, 2)
    ours = copy.deepcopy(reference)
    assert sorted(swap_modules(ours)) == ["c_attn", "c_fc+gelu_tanh", "c_proj", "ln_1", "ln_2",
                                          "mlp_proj"]
    ours.attention = UolAttention(16, causal=True)
    calls: list[int] = []
    ours.attention.register_forward_hook(lambda *_: calls.append(1))
    x, y = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (reference, ours)]
    for _ in range(3):
        losses = []
        for model, opt in zip((reference, ours), opts):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0])
    assert len(calls) == 3  # the block ran UOL's attention, not torch's
    # the fused qkv projection's weight is stored [in, out] by UOL
    torch.testing.assert_close(ours.c_attn.weight.T, reference.c_attn.weight, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["silu_mlp", "nanogpt_block"])
def test_imported_model_called_at_another_batch_matches_the_module(name):
    """torch.export specialises shapes: a call at another batch imports the model again at
    that batch (once) rather than running reshapes built for the first."""
    import torch

    from uol_core.graph.run import compile_graph

    module, x = build(name, "small", batch=1)
    graph = export_module(module, x)
    compiled = compile_graph(graph, "c")
    _, wider = build(name, "small", batch=3)
    (input_name,) = graph.inputs
    with torch.no_grad():
        (got,) = compiled({input_name: wider}).values()
        torch.testing.assert_close(got, module(wider), rtol=1e-4, atol=1e-5)
        assert compiled.at_shapes({input_name: wider}) is compiled.at_shapes({input_name: wider})
        assert compiled.at_shapes({input_name: x}) is compiled
