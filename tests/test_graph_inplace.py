"""In-place torch ops and aliasing: every in-place op we know of, written between two kernels,
gives torch's answer in the planned replay and group by group; an in-place write never touches
the caller's tensors or the graph's weights; imported modules full of `inplace=True` verify."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from uol_core.graph.aten_rules import BINARY, UNARY
from uol_core.graph.export_import import import_model
from uol_core.graph.format import Graph, Node, TensorSpec
from uol_core.graph.load import validate
from uol_core.graph.run import compile_graph, run_graph
from uol_core.odl import parse

SHAPE = (4, 8)

ATEN = torch.ops.aten
# in-place forms beyond those of the mapped ops: fills, copies, masked and fused updates ("P" a
# tensor argument of the written tensor's shape, "M" a bool mask of it)
OTHER_IN_PLACE = {
    "clamp_": (ATEN.clamp_.default, [-0.5, 0.5]), "hardtanh_": (ATEN.hardtanh_.default, []),
    "relu6_": (ATEN.relu6_.default, []), "leaky_relu_": (ATEN.leaky_relu_.default, [0.1]),
    "elu_": (ATEN.elu_.default, []), "gelu_": (ATEN.gelu_.default, []),
    "pow_.Scalar": (ATEN.pow_.Scalar, [2.0]), "fill_": (ATEN.fill_.Scalar, [0.25]),
    "zero_": (ATEN.zero_.default, []), "copy_": (ATEN.copy_.default, ["P"]),
    "clamp_min_": (ATEN.clamp_min_.default, [0.1]), "clamp_max_": (ATEN.clamp_max_.default, [0.1]),
    "masked_fill_": (ATEN.masked_fill_.Scalar, ["M", 0.0]),
    "threshold_": (ATEN.threshold_.default, [0.1, -1.0]),
    "addcmul_": (ATEN.addcmul_.default, ["P", "P"]), "addcdiv_": (ATEN.addcdiv_.default, ["P", "P"]),
    "lerp_": (ATEN.lerp_.Scalar, ["P", 0.3]), "square_": (ATEN.square_.default, []),
    **{f"{k}_": (getattr(ATEN, f"{k}_").default, []) for k in
       ("sgn", "sign", "trunc", "round", "frac", "expm1", "log1p")},
}


def known_in_place() -> dict[str, tuple]:
    """The in-place form of every op with an ODL rule (unary: no argument; binary: a tensor),
    and OTHER_IN_PLACE: name -> (overload, arguments after the written tensor)."""
    cases = {f"{k}_": (getattr(ATEN, f"{k}_").default, []) for k in UNARY if hasattr(ATEN, f"{k}_")}
    cases.update({f"{k}_": (getattr(ATEN, f"{k}_").Tensor, ["P"]) for k in BINARY
                  if hasattr(ATEN, f"{k}_")})
    return {**cases, **OTHER_IN_PLACE}


CASES = known_in_place()


def _arguments(extra: list) -> tuple[list, dict[str, torch.Tensor]]:
    """Graph-node arguments after the written tensor (tensors as graph params), and the params."""
    args: list = [None]
    params: dict[str, torch.Tensor] = {}
    gen = torch.Generator().manual_seed(1)
    for item in extra:
        if item in ("P", "M"):
            name = f"p{len(params)}"
            value = torch.rand(SHAPE, generator=gen) + 0.5
            params[name] = value > 1.0 if item == "M" else value
            args.append({"tensor": name})
        else:
            args.append(item)
    return args, params


def _graph(name: str, target: str = "h") -> tuple[Graph, dict]:
    """x -> [kernel: h = 2x - 0.5] -> op_(h) in torch -> [kernel: y = w + h], where w is what
    the op returns and h the tensor it wrote (torch: both are the written values). With target
    "x" the op writes the graph input itself, with "q" a parameter."""
    op, extra = CASES[name]
    args, params = _arguments(extra)
    pre = parse("op pre(X: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = X[m, n] * 2.0 - 0.5\n")
    post = parse("op post(A: f32[M, N], B: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = A[m, n] + B[m, n]\n")
    if target == "q":
        params["q"] = torch.rand(SHAPE, generator=torch.Generator().manual_seed(2)) * 2 - 1
    args[0] = {"tensor": target}
    nodes = [Node("pre", "odl", op=pre, source="inline", inputs={"X": "x"}, outputs={"Y": "h"}),
             Node("write", "torch", source=f"aten.{op.__name__}", outputs={"out": "w"}, args=args,
                  fn=op, label="opaque: writes in place"),
             Node("post", "odl", op=post, source="inline", inputs={"A": "w", "B": target}, outputs={"Y": "y"})]
    specs = {k: TensorSpec(tuple(v.shape), "bool" if v.dtype == torch.bool else "f32") for k, v in params.items()}
    graph = Graph("inplace", {"x": TensorSpec(SHAPE)}, specs, nodes, ["y"], values=dict(params))
    return validate(graph), params


def _eager(name: str, params: dict, x: torch.Tensor, target: str) -> torch.Tensor:
    op, extra = CASES[name]
    args, _ = _arguments(extra)
    x = x.clone()
    h = x * 2.0 - 0.5
    written_into = {"h": h, "x": x, "q": params.get("q", h).clone()}[target]
    written = op(written_into, *[params[a["tensor"]] if isinstance(a, dict) else a for a in args[1:]])
    return written + written_into


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_in_place_op_between_kernels_gives_torch_s_answer(name):
    graph, params = _graph(name)
    x = torch.rand(SHAPE, generator=torch.Generator().manual_seed(0)) * 2 - 1
    expected = _eager(name, params, x, "h")
    compiled = compile_graph(graph, "c")
    # the write sits between the two kernels: fusing them would move one across it
    assert [g.nodes for g in compiled.plan.groups] == [["pre"], ["write"], ["post"]]
    for planned in (True, False):
        compiled.planned = planned
        for _ in range(2):  # the replay built on the first call, then replayed
            got = compiled({"x": x, **params})["y"]
            torch.testing.assert_close(got, expected, equal_nan=True, msg=f"{name} planned={planned}")


@pytest.mark.parametrize("target", ["x", "q"])
@pytest.mark.parametrize("name", ["relu_", "add_", "mul_", "hardtanh_", "copy_", "zero_"])
def test_an_in_place_write_into_an_input_or_parameter_leaves_them_as_they_were(name, target):
    graph, params = _graph(name, target)
    x = torch.rand(SHAPE, generator=torch.Generator().manual_seed(0)) * 2 - 1
    x_before = x.clone()
    weights = {k: v.clone() for k, v in graph.values.items()}
    expected = _eager(name, params, x, target)
    compiled = compile_graph(graph, "c")
    for planned in (True, False):
        compiled.planned = planned
        for _ in range(2):
            got = compiled({"x": x, **graph.values})["y"]
            torch.testing.assert_close(got, expected, equal_nan=True, msg=f"planned={planned}")
    assert torch.equal(x, x_before)  # the caller's tensor: the graph wrote a private copy
    assert all(torch.equal(graph.values[k], v) for k, v in weights.items())  # and the weights


class Residual(nn.Module):
    """A classic residual CNN block stack: conv, batch norm, ReLU(inplace=True), `out += x`."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(inplace=True))
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        out = self.relu(out)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        scale = self.fc2(self.act(self.fc1(nn.functional.adaptive_avg_pool2d(x, 1))))
        return torch.sigmoid(scale) * x


class MobileSE(nn.Module):
    """A mobile CNN: stride-2 stem with Hardswish(inplace), an inverted residual (1x1 expand,
    depthwise 3x3, squeeze-and-excitation with SiLU(inplace), 1x1 project, `r += x`),
    ReLU6(inplace), dropout(inplace) in eval."""

    def __init__(self, c: int = 8, expand: int = 4) -> None:
        super().__init__()
        h = c * expand

        def norm_act(cin, cout, k=1, stride=1, groups=1, act=nn.SiLU):
            layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
            return nn.Sequential(*layers, *([act(inplace=True)] if act else []))

        self.stem = norm_act(3, c, 3, 2, act=nn.Hardswish)
        self.block = nn.Sequential(norm_act(c, h), norm_act(h, h, 3, groups=h), SqueezeExcite(h, c // 2),
                                   norm_act(h, c, act=None))
        self.head = nn.Sequential(norm_act(c, 16, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Dropout(0.2, inplace=True), nn.Linear(16, 10))

    def forward(self, x):
        x = self.stem(x)
        r = self.block(x)
        r += x
        return self.head(r)


def _randomised(module: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.num_features, generator=gen))
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return module.eval()


@pytest.mark.parametrize("cls", [Residual, MobileSE])
def test_cnns_with_in_place_activations_and_residual_adds_import_whole_and_verify(cls):
    # both returned wrong tensors: their relu_, add_, silu_, hardswish_, hardtanh_ nodes stayed
    # in torch, and the planned replay did not run them (their results alias their inputs)
    torch.manual_seed(0)
    module = _randomised(cls())
    x = torch.randn(2, 3, 16, 16)
    graph = import_model(module, x)
    assert [n.source for n in graph.nodes if n.kind == "torch" and n.label != "view"] == []
    compiled = compile_graph(graph, "c")
    with torch.no_grad():
        expected = module(x)
    got = compiled({"x": x, **graph.values})[graph.outputs[0]]  # checked against the module
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert next(iter(compiled.checked.values())) < 1e-4


def test_an_in_place_module_whose_input_is_read_later_stays_in_place_in_the_fx_import():
    class ReadAfter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.Hardtanh(inplace=True)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            h = x * 3.0
            y = self.relu(h)  # writes h: the next line reads the written values
            return self.act(h + y) * h

    x = torch.randn(4, 8)
    graph = import_model(ReadAfter(), x, method="fx")
    report = run_graph(graph, "c", repeat=1)
    assert report["verified"], report["mismatch"]
    assert any(n.source == "module:ReLU" for n in graph.nodes if n.kind == "torch")


def test_a_program_that_was_not_functionalised_maps_its_in_place_nodes_as_functional_ops():
    # the fallback when run_decompositions fails: relu_ and add_ whose inputs nobody reads
    # afterwards compute the same values as relu and add
    from uol_core.graph.export_import import ExportImporter
    from uol_core.graph.load import validate

    torch.manual_seed(0)
    module = _randomised(Residual())
    x = torch.randn(2, 3, 12, 12)
    program = torch.export.export(module, (x,), strict=False)
    assert any(str(n.target).startswith("aten.add_") for n in program.graph.nodes)
    graph = ExportImporter(program, "Residual").run()
    graph.module = module
    graph = validate(graph)
    assert "relu_ (relu_) mapped as its functional form" in graph.description
    assert [n.source for n in graph.nodes if n.kind == "torch" and n.label != "view"] == []
    got = compile_graph(graph, "c")({"x": x, **graph.values})[graph.outputs[0]]
    with torch.no_grad():
        torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-5)
