"""Import a torch nn.Module with torch.export: an ATen-level graph with every shape fixed, where
stock modules with Python control flow (nn.TransformerEncoderLayer, nn.MultiheadAttention) trace
whole. Each ATen node maps to an ODL op (aten_rules.py) or stays a torch node with the reason:
a view (zero-copy, runs in torch), an unsupported op, a dtype, a dynamic shape. Nodes whose
inputs are all parameters are folded at import (a weight's transpose, a slice of a buffer).

The exported program is functionalised first (`ExportedProgram.run_decompositions` with the Core
ATen table, less the ops mapped here whole): in-place forms (`relu_`, `add_`, `hardtanh_`, an
`out=` variant) arrive as their functional ops, so every tensor is written once and a node's
value never changes after it is computed. Where a program cannot be functionalised, an in-place
node whose input nobody reads afterwards maps as its functional op; any other stays in torch and
the planned runtime runs it in place (planned.py, inplace.py).

`import_model` tries torch.export first and falls back to torch.fx symbolic tracing (with the
export error kept in the graph's description) when export cannot trace the module.
"""

from __future__ import annotations

import math
import operator

import torch
from torch import fx, nn

from uol_core.graph.aten_map import Unmapped
from uol_core.graph.format import DTYPE_NAMES, Graph, GraphError, Node, TensorSpec
from uol_core.graph.functional import functionalize
from uol_core.graph.load import validate
from uol_core.graph.merge import fresh_name
from uol_core.odl import OdlError, parse
from uol_core.odl.ir import Op

# Ops that only re-describe memory (or are identities at inference): they stay torch views.
VIEW_OPS = {"view", "_unsafe_view", "reshape", "transpose", "permute", "unsqueeze", "squeeze",
            "flatten", "unflatten", "contiguous", "expand", "select", "split", "split_with_sizes",
            "chunk", "alias", "clone", "t", "detach", "slice", "unbind", "narrow", "lift_fresh_copy"}

# factories whose values follow from sizes alone: evaluated at import, like a parameter
SHAPE_FACTORIES = {"arange", "full", "zeros", "ones", "eye", "linspace", "scalar_tensor",
                   "zeros_like", "ones_like", "full_like"}

# rules that turn a bool tensor known at import into f32 themselves (a condition, a mask)
CASTS_CONSTANT_MASKS = {"where", "scaled_dot_product_attention"}

# rules that check some of their operands' dtypes themselves: the integer ids of a table
# lookup, an attention mask of bools
OWN_DTYPES = {"embedding": (torch.int64, torch.int32), "index_select": (torch.int64, torch.int32),
              "gather": (torch.int64, torch.int32), "index": (torch.int64, torch.int32),
              "scaled_dot_product_attention": (torch.bool,)}


def packet(target) -> str:
    """The ATen op name without namespace and overload ('aten.linear.default' -> 'linear')."""
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


class ExportImporter:
    """Walks an exported program once, emitting graph nodes, parameters and views."""

    def __init__(self, program, name: str) -> None:
        self.program, self.name = program, name
        self.nodes: list[Node] = []
        self.inputs: dict[str, TensorSpec] = {}
        self.params: dict[str, TensorSpec] = {}
        self.values: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, TensorSpec | None] = {}
        self.forms: dict[str, dict[str, str]] = {}  # fx node -> {"nd"|"flat": graph tensor}
        self.consts: dict[str, torch.Tensor] = {}  # fx node -> value, for nodes known at import
        self.used: set[str] = set()
        self.absorbed: dict[str, str] = {}  # fx node -> the node whose op computes it (a folded norm)
        self.notes: list[str] = []  # import decisions the graph's description reports
        self.unpacked: set[str] = set()  # fx nodes of a tuple mapped to its item 0 (a batch norm)
        self.functional = False  # the program is functionalised: no node writes another's value
        self.modules: dict[str, nn.Module] = {}  # get_attr of a submodule: a wrapped region's body

    # ------------------------------------------------------------ names and tensors

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    @staticmethod
    def shape(n: fx.Node) -> tuple[int, ...]:
        return tuple(int(s) for s in n.meta["val"].shape)

    @staticmethod
    def flat_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (math.prod(shape[:-1]), shape[-1]) if len(shape) >= 2 else shape

    def param(self, base: str, value: torch.Tensor) -> str:
        name = self.fresh(base)
        value = value.detach().contiguous()
        self.params[name], self.values[name] = TensorSpec(tuple(value.shape),
                                                          DTYPE_NAMES.get(value.dtype, "f32")), value
        return name

    def tensor(self, n: fx.Node, form: str = "nd") -> str:
        """The graph tensor holding `n` in `form` ("nd" or "flat"); a reshape of a constant is
        a new parameter, of anything else a torch view node."""
        if n.name in self.consts and n.name not in self.forms:
            self.forms[n.name] = {"nd": self.param(n.name, self.consts[n.name])}
        forms = self.forms[n.name]
        if form in forms:
            return forms[form]
        shape = self.shape(n)
        want = self.flat_shape(shape) if form == "flat" else shape
        if n.name in self.consts:
            forms[form] = self.param(f"{n.name}_{form}", self.consts[n.name].reshape(want))
            return forms[form]
        out = self.fresh(f"{n.name}_{form}")
        self.nodes.append(Node(out, "torch", source="method:reshape", outputs={"out": out},
                               args=[{"tensor": next(iter(forms.values()))}, list(want)],
                               fn=torch.Tensor.reshape, label="view"))
        self.shapes[out] = TensorSpec(want, "f32")
        forms[form] = out
        return out

    def odl(self, n: fx.Node, text: str, inputs: dict[str, str], form: str, source: str = "inline",
            reshape_to: tuple[int, ...] | None = None) -> None:
        """Add an ODL node computing `n` (in `form`); `reshape_to` adds a view after it."""
        op = _parse(text)
        out = self.fresh(n.name if reshape_to is None else f"{n.name}_raw")
        self.nodes.append(Node(self.fresh(f"{n.name}_op"), "odl", op=op, source=source,
                               inputs=inputs, outputs={op.outputs[0].name: out}))
        self.forms[n.name] = {form: out}
        if reshape_to is not None:
            view = self.fresh(n.name)
            self.nodes.append(Node(view, "torch", source="method:reshape", outputs={"out": view},
                                   args=[{"tensor": out}, list(reshape_to)], fn=torch.Tensor.reshape,
                                   label="view"))
            self.shapes[view] = TensorSpec(reshape_to, "f32")
            self.forms[n.name] = {"nd": view}

    def torch_node(self, n: fx.Node, label: str) -> None:
        """Keep `n` as a torch call (a view, or opaque with `label` giving the reason)."""
        def arg(a):
            if isinstance(a, fx.Node) and a.name in self.modules:
                return self.modules[a.name]  # passed as it is: the call runs its body
            if isinstance(a, fx.Node):
                return {"tensor": self.tensor(a, "nd")}
            if isinstance(a, (list, tuple)):
                return [arg(x) for x in a]
            if isinstance(a, dict):
                return {k: arg(v) for k, v in a.items()}
            if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
                return a
            return a

        out = self.fresh(n.name)
        source = "operator.getitem" if n.target is operator.getitem else f"aten.{packet(n.target)}"
        fn = n.target
        if packet(fn) in ("view", "_unsafe_view"):  # our kernels' outputs may be laid out otherwise
            fn, source = torch.ops.aten.reshape.default, "aten.reshape"
        self.nodes.append(Node(self.fresh(f"{n.name}_op"), "torch", source=source, outputs={"out": out},
                               args=arg(list(n.args)), kwargs=arg(dict(n.kwargs)), fn=fn,
                               label=label))
        val = n.meta.get("val")
        self.shapes[out] = TensorSpec(tuple(int(s) for s in val.shape), DTYPE_NAMES.get(val.dtype, "f32")) \
            if isinstance(val, torch.Tensor) else None
        self.forms[n.name] = {"nd": out}

    # ------------------------------------------------------------ the walk

    def fold(self, n: fx.Node) -> bool:
        """Evaluate `n` now when every tensor it reads is known at import (parameters, buffers),
        or it makes a tensor from sizes alone (`arange`, `full`, `zeros_like`: position ids,
        masks, rotary tables), unless it writes in place (a module's state stays its own)."""
        schema = getattr(n.target, "_schema", None)
        if schema is not None and schema.is_mutable:
            return False
        by_shape = packet(n.target) in SHAPE_FACTORIES
        reads = list(n.all_input_nodes)
        if not by_shape and (not reads or any(a.name not in self.consts for a in reads)):
            return False

        def value(a):
            if isinstance(a, fx.Node):
                if by_shape:  # only the shape and dtype of a _like factory's input matter
                    val = a.meta["val"]
                    return torch.empty(tuple(int(d) for d in val.shape), dtype=val.dtype)
                return self.consts[a.name]
            if isinstance(a, (list, tuple)):
                return type(a)(value(x) for x in a)
            return a

        with torch.no_grad():
            result = n.target(*value(n.args), **{k: value(v) for k, v in n.kwargs.items()})
        if isinstance(result, torch.Tensor):
            self.consts[n.name] = result
            return True
        if isinstance(result, (list, tuple)) and all(isinstance(r, torch.Tensor) for r in result):
            self.consts[n.name] = result  # a split of a constant: its getitems fold in turn
            return True
        return False

    def reason(self, n: fx.Node) -> str | None:
        """Why `n` cannot be an ODL op whatever its kind (dtype, dynamic shape), or None. A bool
        condition or mask known at import is no reason: `where` and attention make it f32; nor are
        a lookup's integer ids or a run-time bool attention mask (OWN_DTYPES)."""
        casts = packet(n.target) in CASTS_CONSTANT_MASKS
        own = OWN_DTYPES.get(packet(n.target), ())
        vals = [n.meta.get("val")] + [a.meta.get("val") for a in n.all_input_nodes
                                      if not (casts and a.name in self.consts)
                                      and getattr(a.meta.get("val"), "dtype", None) not in own]
        for v in vals:
            if isinstance(v, torch.Tensor):
                if any(not isinstance(s, int) for s in v.shape):
                    return "dynamic shape: a size is symbolic (export with static shapes)"
                if v.dtype != torch.float32:
                    return f"dtype: {str(v.dtype).replace('torch.', '')} tensor (ODL import maps f32)"
        return None

    def run(self) -> Graph:
        # deferred: at the top this import closes a circle, and fails while the modules load
        from uol_core.graph.aten_rules import RULES

        sig = self.program.graph_signature
        state = {**self.program.state_dict, **getattr(self.program, "constants", {})}
        lifted = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
                  **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
        out_names: list[str] = []
        for n in self.program.graph_module.graph.nodes:
            if n.op == "placeholder":
                if n.name in lifted:
                    self.consts[n.name] = state[lifted[n.name]].detach()
                    continue
                name = self.fresh(n.name)
                val = n.meta["val"]
                self.inputs[name] = TensorSpec(self.shape(n), DTYPE_NAMES.get(val.dtype, "f32"))
                self.forms[n.name] = {"nd": name}
            elif n.op == "output":
                results = self.user_outputs(n)
                out_names = [self.tensor(r) if r.name not in self.consts
                             else self.param(r.name, self.consts[r.name]) for r in results]
            elif n.op == "call_function":
                self.visit(n, RULES)
            elif n.op == "get_attr":  # a constant, or the body of a wrapped region (no_grad)
                value = _attr(self.program.graph_module, str(n.target))
                if isinstance(value, torch.Tensor):
                    self.consts[n.name] = value
                else:
                    self.modules[n.name] = value
            else:
                raise GraphError(f"exported graph node {n.name}: unexpected kind {n.op}")
        return Graph(self.name, self.inputs, self.params, self.nodes, out_names,
                     f"imported from {self.name} with torch.export"
                     + (f"; {', '.join(self.notes)}" if self.notes else ""), self.values, dict(self.shapes))

    def user_outputs(self, n: fx.Node) -> list[fx.Node]:
        """The module's own results among the output node's values (a functionalised program
        also returns the buffers and inputs it mutates; the graph computes results only)."""
        from torch.export.graph_signature import OutputKind

        results = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
        specs = self.program.graph_signature.output_specs
        if len(specs) != len(results):
            return list(results)
        mutated = [s.target for s in specs if s.kind in (OutputKind.BUFFER_MUTATION,
                                                         OutputKind.USER_INPUT_MUTATION)]
        if mutated:
            self.notes.append(f"the module updates {', '.join(map(str, mutated))} in place; the "
                              "graph computes its results, not those updates")
        return [r for r, s in zip(results, specs) if s.kind == OutputKind.USER_OUTPUT]

    def visit(self, n: fx.Node, rules: dict) -> None:
        kind = packet(n.target)
        if kind.startswith(("_assert", "sym_constrain")):  # export's own shape/dtype checks
            return
        if kind not in ("dropout",) and self.fold(n):
            return
        if n.target is operator.getitem and n.args[0].name in self.unpacked:
            if n.args[1] != 0:
                raise GraphError(f"exported graph node {n.name}: item {n.args[1]} of a mapped "
                                 f"{n.args[0].name} is read")
            self.forms[n.name] = dict(self.forms[n.args[0].name])
            return
        if kind == "clone" and self.functional:  # nothing writes either copy: the same values
            self.forms[n.name] = dict(self.forms[n.args[0].name])
            return
        if kind.endswith("_") and not kind.endswith("__") and self.functional_inplace(n, rules):
            return
        if n.target is operator.getitem or kind in VIEW_OPS:
            self.torch_node(n, "view")
            return
        if kind in ("dropout", "feature_dropout") and not _arg(n, 2, "train", False):
            self.forms[n.name] = dict(self.forms[n.args[0].name])  # identity at inference
            return
        if "higher_order" in str(n.target) or kind in ("cond", "while_loop", "map_impl"):
            self.torch_node(n, f"opaque: data-dependent control flow ({kind})")
            return
        blocked = self.reason(n)
        rule = rules.get(kind)
        if blocked is None and rule is None:
            blocked = f"unsupported op: aten.{kind} has no ODL mapping"
        if blocked is None:
            try:
                rule(self, n)
                return
            except Unmapped as why:
                self.unpacked.discard(n.name)
                blocked = f"unsupported form: aten.{kind}: {why}"
            except OdlError as err:  # a generated op the checker refuses (bounds, shapes)
                self.unpacked.discard(n.name)
                blocked = f"unsupported form: aten.{kind}: {str(err).splitlines()[0]}"
        self.torch_node(n, f"opaque: {blocked}")


    def functional_inplace(self, n: fx.Node, rules: dict) -> bool:
        """Map an in-place node (`relu_`, `add_`) as its functional op when that computes the
        same values: the tensor it writes is an intermediate (not an input, a parameter or a
        view of another tensor) that no node reads after it. Else it stays in torch, in place."""
        rule = rules.get(packet(n.target)[:-1])
        target = n.args[0] if n.args else None
        if rule is None or not isinstance(target, fx.Node) or target.op != "call_function":
            return False
        if target.name in self.consts or packet(target.target) in VIEW_OPS \
                or target.target is operator.getitem:
            return False
        order = {node: i for i, node in enumerate(n.graph.nodes)}
        if any(order[u] > order[n] for u in target.users if u is not n):
            return False
        if self.reason(n) is not None:
            return False
        try:
            rule(self, n)
        except (Unmapped, OdlError):
            return False
        self.notes.append(f"{n.name} ({packet(n.target)}) mapped as its functional form")
        return True


def _attr(module: nn.Module, path: str) -> torch.Tensor | nn.Module:
    """A `get_attr` target: a tensor (a buffer or constant, detached) or a submodule (the body
    a higher-order op such as wrap_with_set_grad_enabled runs)."""
    value = module
    for part in path.split("."):
        value = getattr(value, part)
    if isinstance(value, torch.Tensor):
        return value.detach()
    if not isinstance(value, nn.Module):
        raise GraphError(f"exported graph reads attribute {path}, a {type(value).__name__} "
                         "(a tensor or a submodule is expected)")
    return value


def _arg(n: fx.Node, pos: int, name: str, default):
    """An ATen argument by position or keyword."""
    if len(n.args) > pos:
        return n.args[pos]
    return n.kwargs.get(name, default)


_PARSED: dict[str, Op] = {}


def _parse(text: str) -> Op:
    if text not in _PARSED:
        _PARSED[text] = parse(text)
    return _PARSED[text]


def export_module(module: nn.Module, *example_inputs: torch.Tensor, name: str | None = None) -> Graph:
    """Import `module` (put in eval mode) with torch.export; keeps the module as the reference."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.graph.fx_import import TRACE_LOCK

    module = module.eval()
    try:
        with TRACE_LOCK:  # torch.export's state is global: one export at a time per process
            program = torch.export.export(module, tuple(example_inputs), strict=False)
            program, note = functionalize(program)
    except Exception as err:  # export's own message is what the user needs
        raise GraphError(f"torch.export cannot trace {type(module).__name__}: "
                         f"{str(err).strip().splitlines()[0]}") from None
    importer = ExportImporter(program, name or type(module).__name__)
    importer.functional = not note
    if note:
        importer.notes.append(note)
    graph = importer.run()
    graph.module, graph.program = module, program
    for fx_name, forms in importer.forms.items():  # in program order: an alias (a dropout,
        for tensor in forms.values():              # a clone) keeps the name of its source
            graph.origins.setdefault(tensor, fx_name)
    return validate(graph)


def import_model(module: nn.Module, *example_inputs: torch.Tensor, name: str | None = None,
                 method: str = "auto") -> Graph:
    """torch.export first ("auto"), torch.fx symbolic tracing when export fails; or force one
    with method="export" / "fx". Both failing raises one GraphError quoting both."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.graph.fx_import import import_module

    if method not in ("auto", "export", "fx"):
        raise GraphError(f"unknown import method '{method}' (auto, export or fx)")
    if method == "fx":
        return import_module(module, *example_inputs, name=name)
    try:
        return export_module(module, *example_inputs, name=name)
    except GraphError as export_error:
        if method == "export":
            raise
        try:
            graph = import_module(module, *example_inputs, name=name)
        except GraphError as fx_error:
            raise GraphError(f"{export_error}; fallback: {fx_error}") from None
        graph.description += f" (torch.export failed: {export_error})"
        return graph
