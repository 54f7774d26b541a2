"""Linear layers that feed an activation *call* in their parent's forward: `F.gelu(self.fc(x))`.

`swap_modules` walks modules, and a Sequential shows it a Linear followed by an activation
module, which it fuses. Most models call the activation as a function inside `forward` instead
(nanoGPT's MLP: `F.gelu(self.c_fc(h), approximate="tanh")`), and there the Linear became a
UolLinear while the activation stayed a torch op: one more pass over the hidden activations
forward, and one backward.

Here a module's own forward is traced with torch.fx, its children kept as leaves. Each Linear
child called once, whose only user is a supported activation (a function, a tensor method or
an activation module), becomes one UolLinear with the activation fused, and the module's
forward becomes the rewritten trace. A forward is left as it is when it does not trace, when it
traces differently in training and eval mode (a `self.training` branch that a trace would
freeze), when it takes optional or variadic arguments (a trace would freeze the branch on
`mask is not None`), or when nothing in it fuses. Like any trace, the rewritten forward keeps
the branches the module's other attributes chose when it was swapped.

The rewritten forward is generated code bound to the module: `state_dict` and `torch.compile`
work as before; pickling the whole module object does not (save its state instead).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from uol_core.graph.fx_import import TRACE_LOCK
from uol_core.torch.nn_mlp import activation_of, gelu_function

# Activation functions and tensor methods -> the ODL function of their result, from the call's
# keyword arguments (None: not a form the fused kernels compute).
_FUNCTIONS: dict[object, Callable[[dict], str | None]] = {
    F.relu: lambda kw: None if kw.get("inplace") else "relu",
    torch.relu: lambda kw: "relu",
    F.silu: lambda kw: None if kw.get("inplace") else "silu",
    F.gelu: lambda kw: gelu_function(kw.get("approximate", "none")),
}
_METHODS = {"relu": "relu"}


class _OneLevel(fx.Tracer):
    """Traces only the root's forward: every child module is a leaf, a call_module node."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return True


def fuse_activation_calls(module: nn.Module,
                          make_linear: Callable[[nn.Linear, str], nn.Module | None],
                          prefix: str = "") -> list[str]:
    """Fuse `module`'s Linear children into the activation calls that alone read them.

    `make_linear(linear, activation)` builds the fused layer (None: leave this one). Returns
    the fused layers as dotted names with their activation ("mlp.c_fc+gelu_tanh"); [] when
    nothing changed."""
    if not any(isinstance(child, nn.Linear) for child in module.children()):
        return []
    graph = _trace_in_both_modes(module)
    if graph is None:
        return []
    fused: list[str] = []
    for node, user, activation in _fusible(module, graph):
        name = str(node.target)
        fused_layer = make_linear(module.get_submodule(name), activation)
        if fused_layer is None:
            continue
        module._modules[name] = fused_layer
        user.replace_all_uses_with(node)
        graph.erase_node(user)
        fused.append(f"{prefix}{name}+{activation}")
    if fused:
        graph.lint()
        rewritten = fx.GraphModule(module, graph)
        module.forward = types.MethodType(type(rewritten).forward, module)
    return fused


def _trace_in_both_modes(module: nn.Module) -> fx.Graph | None:
    """The forward's graph, or None when it does not trace or depends on the training mode.
    Only the root's flag is flipped: the children are leaves, their own flags never read."""
    if not _plain_signature(module.forward):
        return None
    was_training = module.training
    graphs: list[fx.Graph] = []
    try:
        with TRACE_LOCK:  # fx keeps its tracing state in module globals
            for mode in (True, False):
                module.training = mode
                graphs.append(_OneLevel().trace(module))
    except Exception:  # any forward fx cannot trace is left as it is
        return None
    finally:
        module.training = was_training
    train, evaluate = graphs
    if train.python_code("self").src != evaluate.python_code("self").src:
        return None
    if any(n.op == "get_attr" and not _resolves(module, str(n.target)) for n in train.nodes):
        return None  # a constant the trace made up (torch.tensor(...) in forward)
    return train


def _plain_signature(forward: Callable) -> bool:
    """Only positional parameters without defaults: a trace binds an optional argument to a
    proxy, so `if mask is not None` would freeze its branch for a call that passes None."""
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in params)


def _resolves(module: nn.Module, target: str) -> bool:
    obj: object = module
    for part in target.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _fusible(module: nn.Module, graph: fx.Graph) -> list[tuple[fx.Node, fx.Node, str]]:
    """(Linear call, activation call, ODL function) for each Linear child called exactly once
    whose only user is a supported activation of that output alone."""
    calls: dict[str, list[fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls.setdefault(str(node.target), []).append(node)
    found = []
    for target, nodes in calls.items():
        if not isinstance(module.get_submodule(target), nn.Linear) or len(nodes) != 1:
            continue
        node = nodes[0]
        if len(node.users) != 1:
            continue
        user = next(iter(node.users))
        activation = _activation(module, user, node)
        if activation is not None:
            found.append((node, user, activation))
    return found


def _activation(module: nn.Module, user: fx.Node, arg: fx.Node) -> str | None:
    """The ODL function `user` applies to `arg`, when it applies one and only that."""
    if user.args != (arg,):
        return None
    if user.op == "call_function" and user.target in _FUNCTIONS:
        return _FUNCTIONS[user.target](dict(user.kwargs))
    if user.op == "call_method" and user.target in _METHODS and not user.kwargs:
        return _METHODS[str(user.target)]
    if user.op == "call_module" and not user.kwargs:
        return activation_of(module.get_submodule(str(user.target)))
    return None
