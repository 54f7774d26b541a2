"""What a graph file's torch nodes may call: tensor math, and tensor constructors from an
allow-list with a size cap. Nothing that changes the process (setters, seeds, I/O).

A node with no tensor argument is a factory call (it makes a tensor from numbers); only the
pure constructors below may be one, and the graph is refused before anything allocates when
one would exceed MAX_FACTORY_ELEMENTS. Shapes are inferred on the meta device, so validating a
graph (which the server does when the Graph page opens one) never allocates its data.
"""

from __future__ import annotations

import math

from uol_core.graph.format import GraphError, Node, tensor_refs

# Pure tensor constructors: numbers in, a new tensor out, no global state touched.
CONSTRUCTORS = frozenset({"randn", "rand", "randint", "zeros", "ones", "empty", "full",
                          "arange", "linspace", "eye", "tensor"})
MAX_FACTORY_ELEMENTS = 1 << 24  # 16M elements: 64 MiB in f32
# Name prefixes of calls that change the process, whatever their arguments.
STATEFUL_PREFIXES = ("set_", "use_", "manual_seed", "seed", "initial_seed", "load", "save",
                     "from_file", "hub", "compile", "cuda", "backends", "distributed")


def _torch_name(node: Node) -> str:
    head, _, name = node.source.rpartition(".")
    return name if head in ("torch", "torch.nn.functional") else ""


def is_factory(node: Node) -> bool:
    """A torch node with no tensor argument: it builds its result from numbers alone."""
    return node.kind == "torch" and not tensor_refs([node.args, node.kwargs])


def _requested_elements(node: Node, name: str) -> int | None:
    """Elements the constructor would make, from its arguments (None: not a shape we read)."""
    args, kwargs = node.args, node.kwargs
    if name in ("arange", "linspace"):
        return None  # sized by the meta run below
    if name == "eye":
        dims = [args[0], args[1] if len(args) > 1 else args[0]] if args else []
    elif name == "randint":
        dims = args[-1] if args and isinstance(args[-1], list) else kwargs.get("size", [])
    elif name == "full":
        dims = args[0] if args else kwargs.get("size", [])
    elif name == "tensor":
        return None
    else:
        dims = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        dims = dims or kwargs.get("size", [])
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        raise GraphError(f"node {node.name}: torch.{name} needs integer sizes, got {dims!r}")
    if any(d < 0 for d in dims):
        raise GraphError(f"node {node.name}: torch.{name} sizes must not be negative: {dims}")
    return math.prod(dims)


def check_torch_call(node: Node) -> None:
    """Refuse a stateful call, a factory outside CONSTRUCTORS, or one over the size cap."""
    if node.kind != "torch":
        return
    name = _torch_name(node)
    if name.startswith(STATEFUL_PREFIXES):
        raise GraphError(f"node {node.name}: '{node.source}' changes the process's state; a graph "
                         "may only compute tensors")
    if not is_factory(node):
        return
    if name not in CONSTRUCTORS:
        raise GraphError(f"node {node.name}: '{node.source}' takes no tensor, so it must be a "
                         f"tensor constructor: torch.{', torch.'.join(sorted(CONSTRUCTORS))}")
    if {"out", "device", "pin_memory"} & set(node.kwargs):
        raise GraphError(f"node {node.name}: torch.{name} may not set out=, device= or "
                         "pin_memory= in a graph file")
    check_size(node, _requested_elements(node, name))


def check_size(node: Node, elements: int | None) -> None:
    """GraphError when a constructed tensor would exceed MAX_FACTORY_ELEMENTS."""
    if elements is not None and elements > MAX_FACTORY_ELEMENTS:
        raise GraphError(f"node {node.name}: {node.source} would make {elements:,} elements, over "
                         f"the cap of {MAX_FACTORY_ELEMENTS:,} elements per constructed tensor")
