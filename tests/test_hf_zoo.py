"""The library zoo (uol_core/graph/hf_zoo.py): real architectures from transformers, built from
configs with random weights, at small sizes. Each imports whole (no opaque node), compiles on
the C backend and matches the module; bad models get one-line errors or reasons, never a crash."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from uol_core.graph import GraphError
from uol_core.graph.export_import import import_model
from uol_core.graph.hf_zoo import HF_MODELS, available, build
from uol_core.graph.run import compile_graph

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


def _opaque(graph) -> list[tuple[str, str]]:
    """Torch nodes kept for want of a mapping. Views and lookups by integer ids (data movement,
    labelled so: ODL has no data-dependent addressing) are not opaque."""
    return [(n.source, n.label) for n in graph.nodes
            if n.kind == "torch" and n.label.startswith("opaque")]


def test_lookups_are_the_only_torch_nodes_that_compute_nothing_and_say_so():
    module, inputs = build("bert_base", "small", batch=1)
    graph = import_model(module, *inputs)
    kept = {n.label.split(":")[0] for n in graph.nodes if n.kind == "torch"}
    assert kept <= {"view", "lookup"}


@pytest.mark.parametrize("name", sorted(HF_MODELS))
def test_library_model_imports_whole_and_matches_the_module(name):
    module, inputs = build(name, "small", batch=1)
    graph = import_model(module, *inputs, name=name)
    assert _opaque(graph) == []
    compiled = compile_graph(graph, "c")
    with torch.no_grad():
        expected = module(*inputs)
        (got,) = compiled(dict(zip(graph.inputs, inputs, strict=True))).values()
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)


def test_a_second_batch_size_is_verified_on_its_first_call():
    """The compiled graph checks each new input shape against the module once."""
    module, inputs = build("bert_base", "small", batch=1)
    graph = import_model(module, *inputs)
    compiled = compile_graph(graph, "c")
    _, wider = build("bert_base", "small", batch=3)
    with torch.no_grad():
        (got,) = compiled(dict(zip(graph.inputs, wider, strict=True))).values()
        torch.testing.assert_close(got, module(*wider), rtol=1e-3, atol=1e-4)


def test_unknown_library_model_names_the_choices():
    with pytest.raises(KeyError, match="one of: resnet50"):
        build("../../etc/passwd")


def test_data_dependent_control_flow_is_one_line_error():
    class Branchy(nn.Module):
        def forward(self, x):
            return x.relu() if x.mean() > 0 else x.tanh()

    with pytest.raises(GraphError) as caught:
        import_model(Branchy(), torch.randn(2, 4))
    assert "\n" not in str(caught.value).strip()


def test_unsupported_dtype_stays_in_torch_with_a_reason():
    class Halves(nn.Module):
        def forward(self, x):
            return torch.relu(x.half()).float() + 1.0

    graph = import_model(Halves(), torch.randn(2, 4))
    reasons = " ".join(label for _, label in _opaque(graph))
    assert "float16" in reasons or "dtype" in reasons, reasons
    with torch.no_grad():
        x = torch.randn(2, 4)
        (got,) = compile_graph(graph, "c")(dict(zip(graph.inputs, [x], strict=True))).values()
    torch.testing.assert_close(got, Halves()(x))
