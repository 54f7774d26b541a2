"""Never a wrong answer: a compiled graph checks its first call at each input shape and raises,
naming the first group whose output differs and by how much, instead of returning the tensors;
`uol graph run` exits non-zero with the same finding."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.graph.export_import import import_model
from uol_core.graph.format import Graph, Node, TensorSpec
from uol_core.graph.load import validate
from uol_core.graph.planned import Segment
from uol_core.graph.route import route
from uol_core.graph.run import compile_graph
from uol_core.graph.verify import VerificationError
from uol_core.odl import parse


class Noisy(nn.Module):
    """Adds fresh noise on every call: no compiled graph can give the module's values."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + torch.rand_like(x)


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _chain() -> Graph:
    """x -> a = 2x -> b = a + 1 -> y = b * a: three map kernels (compiled unfused)."""
    def op(name: str, expr: str, ins: str) -> object:
        sig = ", ".join(f"{i}: f32[M, N]" for i in ins)
        return parse(f"op {name}({sig}) -> Y: f32[M, N]:\n    Y[m, n] = {expr}\n")

    nodes = [Node("twice", "odl", op=op("twice", "A[m, n] * 2.0", "A"), inputs={"A": "x"}, outputs={"Y": "a"}),
             Node("plus", "odl", op=op("plus", "A[m, n] + 1.0", "A"), inputs={"A": "a"}, outputs={"Y": "b"}),
             Node("prod", "odl", op=op("prod", "A[m, n] * B[m, n]", "AB"), inputs={"A": "b", "B": "a"},
                  outputs={"Y": "y"})]
    return validate(Graph("chain", {"x": TensorSpec((4, 8))}, {}, nodes, ["y"]))


def test_a_module_the_graph_cannot_match_raises_on_the_first_call_naming_the_group():
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    graph = import_model(Noisy(), x)
    compiled = compile_graph(graph, "c")
    env = {"x": x, **graph.values}
    with pytest.raises(VerificationError, match=r"differs from the torch module by .*first differing "
                       r"group: .*rand_like.* off by") as caught:
        compiled(env)
    assert caught.value.detail["stage"] == "kernel" and caught.value.detail["group_error"] > 1e-3
    with pytest.raises(VerificationError):  # and never returns a tensor at that shape afterwards
        compiled(env)


def test_the_cli_exits_non_zero_and_the_report_names_the_group():
    result = CliRunner().invoke(app, ["graph", "run", "tests.test_graph_verify:Noisy", "--input-shape",
                                      "4,8", "--backend", "reference", "--repeat", "1", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["verified"] is False and "rand_like" in report["mismatch"]["group"]
    assert "first differing group" in report["mismatch"]["message"]


def test_a_verified_graph_checks_once_per_input_shape():
    torch.manual_seed(0)
    module = TwoLayers().eval()
    graph = import_model(module, torch.randn(4, 8))
    compiled = compile_graph(graph, "c")
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    for _ in range(3):
        out = compiled({"x": torch.randn(4, 8), **graph.values})
    assert len(calls) == 1 and next(iter(compiled.checked.values())) < 1e-4  # the module ran once
    assert out[graph.outputs[0]].shape == (4, 8)


def test_a_module_changed_after_import_is_reported_as_the_import_differing():
    torch.manual_seed(0)
    module = TwoLayers().eval()
    graph = import_model(module, torch.randn(4, 8))
    module.b.weight = nn.Parameter(module.b.weight.detach() * 2)  # the graph keeps its own copy
    with pytest.raises(VerificationError, match="every value matches the exported program: the "
                       "module itself now computes otherwise") as caught:
        compile_graph(graph, "c")({"x": torch.randn(4, 8), **graph.values})
    assert caught.value.detail["stage"] == "import"


def test_an_op_imported_with_another_meaning_is_traced_to_its_program_node(monkeypatch):
    from uol_core.graph import aten_rules

    monkeypatch.setitem(aten_rules.RULES, "relu", aten_rules.unary("sigmoid"))  # a wrong rule
    torch.manual_seed(0)
    graph = import_model(TwoLayers().eval(), torch.randn(4, 8))
    with pytest.raises(VerificationError, match=r"the first value off is the exported program's "
                       r"node relu \(graph tensor relu, off by") as caught:
        compile_graph(graph, "c")({"x": torch.randn(4, 8), **graph.values})
    assert caught.value.detail["program_node"] == "relu"


def test_a_kernel_that_computes_something_else_is_named():
    graph = _chain()
    compiled = compile_graph(graph, "c", fuse=False)
    wrong = parse("op plus(A: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = A[m, n] + 2.0\n")
    compiled.routes["plus"] = route(wrong, {"M": 4, "N": 8}, "c", "host")
    with pytest.raises(VerificationError, match=r"reference evaluator .* first differing group: plus "
                       r"\(plus; c\) writes b off by") as caught:
        compiled({"x": torch.randn(4, 8)})
    assert caught.value.detail["stage"] == "kernel"


def test_a_replay_that_writes_over_a_live_buffer_is_named_with_the_planned_runtime():
    graph = _chain()
    compiled = compile_graph(graph, "c", fuse=False)
    compiled.verify = False
    env = {"x": torch.randn(4, 8)}
    compiled(env)  # builds the planned replay for this shape
    kernels = {k.group: k for s in compiled.runner(env).steps if isinstance(s, Segment) for k in s.kernels}
    plus = kernels["plus"]
    plus.ptrs[1] = plus.ptrs[0]  # "plus" now writes b over a, which "prod" still reads
    compiled.verify = True
    with pytest.raises(VerificationError, match=r"first differing group: plus .* memory-planned "
                       r"replay") as caught:
        compiled(env)
    assert caught.value.detail["stage"] == "planned runtime"
