"""Import a torch nn.Module as an operator graph: trace with torch.fx, map known ops to library (or
generated) ODL ops; every other op stays an opaque torch node that runs in torch, labelled so.

Row-wise ops (linear, layernorm, softmax, elementwise) run on the 2-D "flat" view [rows, C] of a
tensor; views between the N-D and flat forms are inserted only where a consumer needs the other
form, so a linear followed by a residual add stays adjacent and can fuse.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import operator
import threading
from functools import cache

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from uol_core.graph.format import DTYPE_NAMES, Graph, GraphError, Node, TensorSpec
from uol_core.graph.load import validate
from uol_core.graph.merge import fresh_name
from uol_core.odl import parse
from uol_core.odl.ir import GELU_FORMS, Op
from uol_core.ops import load_op, op_text

# torch.fx's symbolic tracer and torch.export keep their state in module globals (the patcher,
# the module hierarchy being exported): two traces at once in one process break each other
# ("CURRENT_PATCHER is None", a fake tensor in the constants). The IDE serves callbacks on
# several threads, so every trace in this package holds this lock.
TRACE_LOCK = threading.RLock()

UNARY = {torch.relu: "relu", F.relu: "relu", F.gelu: "gelu", F.silu: "silu", torch.sigmoid: "sigmoid",
         torch.tanh: "tanh", torch.exp: "exp", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh",
         "exp": "exp", nn.ReLU: "relu", nn.GELU: "gelu", nn.SiLU: "silu", nn.Sigmoid: "sigmoid",
         nn.Tanh: "tanh"}
BINARY = {operator.add: "+", torch.add: "+", "add": "+", operator.sub: "-", torch.sub: "-",
          "sub": "-", operator.mul: "*", torch.mul: "*", "mul": "*", operator.truediv: "/",
          torch.div: "/", "div": "/"}
VIEWS = {"view", "reshape", "flatten", "unflatten", "transpose", "permute", "contiguous",
         "unsqueeze", "squeeze", "getitem", "chunk", "split", "size", "getattr", "expand"}


@cache
def _parse(text: str) -> Op:
    return parse(text)


def _axes(rank: int) -> tuple[str, str]:
    dims = ["M", "N"] if rank == 2 else [f"D{i}" for i in range(rank)]
    idx = ["m", "n"] if rank == 2 else [f"i{i}" for i in range(rank)]
    return ", ".join(dims), ", ".join(idx)


def map_op(expr: str, rank: int, inputs: tuple[str, ...]) -> Op:
    """An elementwise op over `rank` axes; `expr` uses {X} style placeholders for reads."""
    dims, idx = _axes(rank)
    sig = ", ".join(f"{n}: f32[{dims}]" for n in inputs)
    body = expr.format(**{n: f"{n}[{idx}]" for n in inputs})
    return _parse(f"op map{rank}({sig}) -> Y: f32[{dims}]:\n    Y[{idx}] = {body}\n")


def conv_op(padding: int, bias: bool) -> Op:
    """Conv2d (stride 1) with zero padding and an optional per-channel bias."""
    read = "X[n, c, h + r, w + s]" if not padding else \
        f"pad(X[n, c, h + r - {padding}, w + s - {padding}], 0)"
    out = "H - R + 1" if not padding else f"H + {2 * padding} - R + 1"
    outw = out.replace("H", "W").replace("R", "S")
    b_in, b_add = (", b: f32[K]", " + b[k]") if bias else ("", "")
    return _parse(f"op conv2d_p{padding}{'_bias' if bias else ''}(X: f32[N, C, H, W], "
                  f"F: f32[K, C, R, S]{b_in}) -> Y: f32[N, K, {out}, {outw}]:\n"
                  f"    Y[n, k, h, w] = sum[c, r, s]({read} * F[k, c, r, s]){b_add}\n")


class _Importer:
    """Walks the traced graph once, emitting graph nodes, parameters and views."""

    def __init__(self, gm: fx.GraphModule, name: str) -> None:
        self.gm, self.name = gm, name
        self.nodes: list[Node] = []
        self.inputs: dict[str, TensorSpec] = {}
        self.params: dict[str, TensorSpec] = {}
        self.values: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, TensorSpec | None] = {}
        self.forms: dict[str, dict[str, str]] = {}  # fx node -> {"nd"|"flat": graph tensor}
        self.used: set[str] = set()

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def shape(self, n: fx.Node) -> tuple[int, ...]:
        return tuple(n.meta["tensor_meta"].shape)

    def tensor(self, n: fx.Node, form: str = "nd") -> str:
        """The graph tensor holding fx value `n` in the given form, adding a view when needed."""
        forms = self.forms[n.name]
        if form in forms:
            return forms[form]
        shape = self.shape(n)
        flat = (math.prod(shape[:-1]), shape[-1]) if len(shape) >= 2 else shape
        want = flat if form == "flat" else shape
        have = next(iter(forms.values()))
        out = self.fresh(f"{n.name}_{form}")
        self.nodes.append(Node(out, "torch", source="method:reshape", outputs={"out": out},
                               args=[{"tensor": have}, list(want)], fn=torch.Tensor.reshape,
                               label="view"))
        self.shapes[out] = TensorSpec(want, "f32")
        forms[form] = out
        return out

    def param(self, base: str, value: torch.Tensor) -> str:
        name = self.fresh(base)
        value = value.detach().contiguous().float()
        self.params[name], self.values[name] = TensorSpec(tuple(value.shape)), value
        return name

    def odl(self, n: fx.Node, op: Op, source: str, inputs: dict[str, str], form: str) -> None:
        out = self.fresh(n.name)
        self.nodes.append(Node(self.fresh(f"{n.name}_op"), "odl", op=op, source=source,
                               inputs=inputs, outputs={op.outputs[0].name: out}))
        self.forms[n.name] = {form: out}

    def opaque(self, n: fx.Node, label: str) -> None:
        def arg(a):
            if isinstance(a, fx.Node):
                return {"tensor": self.tensor(a) if "tensor_meta" in a.meta else self.forms[a.name]["nd"]}
            if isinstance(a, (list, tuple)):
                return [arg(x) for x in a]
            if isinstance(a, dict):
                return {k: arg(v) for k, v in a.items()}
            return a

        if n.op == "call_module":
            fn, source = self.gm.get_submodule(n.target), f"module:{type(self.gm.get_submodule(n.target)).__name__}"
        elif n.op == "call_method":
            fn, source = (lambda self_, *a, _m=n.target, **k: getattr(self_, _m)(*a, **k)), f"method:{n.target}"
        else:
            fn, source = n.target, fx.node._get_qualified_name(n.target)
        out = self.fresh(n.name)
        self.nodes.append(Node(self.fresh(f"{n.name}_op"), "torch", source=source, outputs={"out": out},
                               args=arg(list(n.args)), kwargs=arg(dict(n.kwargs)), fn=fn, label=label))
        meta = n.meta.get("tensor_meta")
        self.shapes[out] = TensorSpec(tuple(meta.shape), DTYPE_NAMES.get(meta.dtype, "f32")) \
            if hasattr(meta, "shape") else None
        self.forms[n.name] = {"nd": out}

    # ------------------------------------------------------------ mapping rules

    def form_of(self, args: list[fx.Node]) -> str:
        """The form an elementwise op runs in: one every operand already has (no new views)."""
        for form in ("flat", "nd"):
            if all(form in self.forms[a.name] for a in args):
                return form
        return "flat"

    def rank(self, n: fx.Node, form: str) -> int:
        return min(len(self.shape(n)), 2) if form == "flat" else len(self.shape(n))

    def writes_a_live_input(self, n: fx.Node) -> bool:
        """An in-place call (`nn.ReLU(inplace=True)`, `F.relu(x, inplace=True)`, `x.relu_()`)
        whose input is read after it: those readers see the written values in torch, so it
        stays a torch call (run in place) rather than a functional ODL op."""
        inplace = n.kwargs.get("inplace") is True or (n.op == "call_method" and n.target.endswith("_"))
        if n.op == "call_module":
            inplace = getattr(self.gm.get_submodule(n.target), "inplace", False) is True
        if not inplace or not n.args or not isinstance(n.args[0], fx.Node):
            return False
        order = {node: i for i, node in enumerate(self.gm.graph.nodes)}
        return any(order[u] > order[n] for u in n.args[0].users if u is not n)

    def map_rule(self, n: fx.Node) -> bool:
        if self.writes_a_live_input(n):
            return False
        key = self.gm.get_submodule(n.target).__class__ if n.op == "call_module" else n.target
        approximate = n.kwargs.get("approximate", "none")
        if n.op == "call_module":
            approximate = getattr(self.gm.get_submodule(n.target), "approximate", "none")
        fn = UNARY.get(key) if approximate == "none" else \
            (GELU_FORMS.get(approximate) if UNARY.get(key) == "gelu" else None)
        if fn is not None:
            src = n.args[0]
            form = self.form_of([src])
            op = map_op(f"{fn}({{X}})", self.rank(src, form), ("X",))
            self.odl(n, op, "inline", {"X": self.tensor(src, form)}, form)
            return True
        if key in BINARY and len(n.args) == 2 and not n.kwargs:
            a, b = n.args
            tensors = [x for x in (a, b) if isinstance(x, fx.Node) and "tensor_meta" in x.meta]
            if len(tensors) == 2 and self.shape(a) == self.shape(b):
                form = self.form_of([a, b])
                op = map_op(f"{{A}} {BINARY[key]} {{B}}", self.rank(a, form), ("A", "B"))
                self.odl(n, op, "inline", {"A": self.tensor(a, form), "B": self.tensor(b, form)}, form)
                return True
            if len(tensors) == 1 and isinstance(b if tensors[0] is a else a, (int, float)):
                x, c = tensors[0], float(b if tensors[0] is a else a)
                expr = f"{{X}} {BINARY[key]} {c!r}" if tensors[0] is a else f"{c!r} {BINARY[key]} {{X}}"
                form = self.form_of([x])
                op = map_op(expr, self.rank(x, form), ("X",))
                self.odl(n, op, "inline", {"X": self.tensor(x, form)}, form)
                return True
        return False

    def module_rule(self, n: fx.Node) -> bool:
        mod, x = self.gm.get_submodule(n.target), n.args[0] if n.args else None
        base = n.target.replace(".", "_")
        if isinstance(mod, nn.Linear):
            w = self.param(f"{base}_weight_t", mod.weight.t())  # [K, N]: folded once at import
            ins = {"X": self.tensor(x, "flat"), "W": w}
            if mod.bias is not None:
                ins["b"] = self.param(f"{base}_bias", mod.bias)
            if mod.bias is not None:
                self.odl(n, load_op("linear_bias"), "linear_bias", ins, "flat")
            else:
                self.odl(n, load_op("matmul"), "matmul", {"A": ins["X"], "B": w}, "flat")
            return True
        if isinstance(mod, nn.LayerNorm) and len(mod.normalized_shape) == 1 and mod.elementwise_affine \
                and mod.bias is not None:
            text = op_text("layernorm").replace("1e-5", repr(mod.eps))
            ins = {"X": self.tensor(x, "flat"), "gamma": self.param(f"{base}_gamma", mod.weight),
                   "beta": self.param(f"{base}_beta", mod.bias)}
            self.odl(n, _parse(text), "layernorm" if mod.eps == 1e-5 else "inline", ins, "flat")
            return True
        if isinstance(mod, nn.Conv2d) and mod.stride == (1, 1) and mod.dilation == (1, 1) \
                and mod.groups == 1 and isinstance(mod.padding, tuple) and len(set(mod.padding)) == 1 \
                and mod.padding_mode == "zeros":
            op = conv_op(mod.padding[0], mod.bias is not None)
            ins = {"X": self.tensor(x), "F": self.param(f"{base}_weight", mod.weight)}
            if mod.bias is not None:
                ins["b"] = self.param(f"{base}_bias", mod.bias)
            self.odl(n, op, "inline", ins, "nd")
            return True
        if isinstance(mod, nn.BatchNorm2d) and not mod.training and mod.affine and mod.eps == 1e-5 \
                and mod.track_running_stats:
            ins = {"X": self.tensor(x), "mu": self.param(f"{base}_mean", mod.running_mean),
                   "var": self.param(f"{base}_var", mod.running_var),
                   "gamma": self.param(f"{base}_gamma", mod.weight),
                   "beta": self.param(f"{base}_beta", mod.bias)}
            self.odl(n, load_op("batchnorm_inference"), "batchnorm_inference", ins, "nd")
            return True
        if isinstance(mod, nn.MaxPool2d) and mod.kernel_size in (2, (2, 2)) and mod.stride in (2, (2, 2)) \
                and mod.padding in (0, (0, 0)) and all(s % 2 == 0 for s in self.shape(x)[2:]):
            self.odl(n, load_op("maxpool2d"), "maxpool2d", {"X": self.tensor(x)}, "nd")
            return True
        if isinstance(mod, nn.AdaptiveAvgPool2d) and mod.output_size in (1, (1, 1)):
            self.odl(n, load_op("global_avgpool"), "global_avgpool", {"X": self.tensor(x)}, "flat")
            return True
        return False

    def function_rule(self, n: fx.Node) -> bool:
        if n.target in (F.softmax, torch.softmax, "softmax") and n.args[1:] in ((-1,), ()) and \
                n.kwargs.get("dim", -1) in (-1, len(self.shape(n.args[0])) - 1):
            self.odl(n, load_op("softmax"), "softmax", {"X": self.tensor(n.args[0], "flat")}, "flat")
            return True
        if n.target is F.scaled_dot_product_attention and len(n.args) == 3 and not n.kwargs:
            q, k, v = n.args
            if len(self.shape(q)) == 4 and self.shape(k) == self.shape(v):
                scale = 1.0 / math.sqrt(self.shape(q)[-1])
                text = op_text("attention_batched").replace("0.125", repr(scale))
                ins = {"Q": self.tensor(q), "K": self.tensor(k), "V": self.tensor(v)}
                self.odl(n, _parse(text), "attention_batched" if scale == 0.125 else "inline", ins, "nd")
                return True
        return False

    def run(self, outputs_meta) -> Graph:
        out_names: list[str] = []
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                name = self.fresh(n.name)
                meta = n.meta["tensor_meta"]
                self.inputs[name] = TensorSpec(tuple(meta.shape), DTYPE_NAMES.get(meta.dtype, "f32"))
                self.forms[n.name] = {"nd": name}
            elif n.op == "get_attr":
                self.forms[n.name] = {"nd": self.param(n.target, getattr_path(self.gm, n.target))}
            elif n.op == "output":
                results = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
                out_names = [self.tensor(r) for r in results]
            else:
                handled = (self.map_rule(n) or (n.op == "call_module" and self.module_rule(n))
                           or (n.op != "call_module" and self.function_rule(n)))
                if not handled:
                    kind = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
                    if n.op == "call_module":
                        kind = ""
                    what = f"module {type(self.gm.get_submodule(n.target)).__name__}" \
                        if n.op == "call_module" else f"{n.op.replace('call_', '')} {kind or n.target}"
                    label = "view" if kind in VIEWS else \
                        f"opaque: unsupported op: {what} has no ODL mapping in the torch.fx importer"
                    self.opaque(n, label)
        return Graph(self.name, self.inputs, self.params, self.nodes, out_names,
                     f"imported from {self.name} with torch.fx", self.values, dict(self.shapes))


def getattr_path(obj, path: str):
    """`a.b.c` attribute lookup (fx get_attr targets)."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def import_module(module: nn.Module, *example_inputs: torch.Tensor, name: str | None = None) -> Graph:
    """Trace `module` (put in eval mode) and map it to a validated graph; keeps the module as reference."""
    module = module.eval()
    with TRACE_LOCK:
        try:
            gm = fx.symbolic_trace(module)
        except Exception as err:  # tracing limits (data-dependent control flow): the user's to see
            raise GraphError(f"torch.fx cannot trace {type(module).__name__}: {err}") from None
        try:  # ShapeProp prints the traceback of a failing node itself: the error says it
            with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
                ShapeProp(gm).propagate(*example_inputs)
        except Exception as err:  # e.g. an input shape the module does not take
            cause = err.__cause__ or err
            raise GraphError(f"{type(module).__name__} does not run on inputs of shape "
                             f"{[tuple(x.shape) for x in example_inputs]}: "
                             f"{str(cause).strip().splitlines()[0]}") from None
    graph = _Importer(gm, name or type(module).__name__).run(None)
    graph.module = module
    return validate(graph)


def load_module(spec: str) -> nn.Module:
    """Instantiate `package.module:Class` with no arguments."""
    if ":" not in spec:
        raise GraphError(f"'{spec}': write module:Class, e.g. uol_core.graph.examples:MLP")
    mod_name, cls_name = spec.split(":", 1)
    try:
        cls = getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise GraphError(f"cannot load {spec}: {err}") from None
    return cls()
