"""Torch calls that write into their inputs (`relu_`, `add_`, `out=`, `F.relu(inplace=True)`, a
module built with inplace=True): which tensors a call writes, and giving a storage a private copy.

An imported program is functionalised (export_import.py), so in-place forms rarely reach a
graph; where one does (an fx import, a program that could not be functionalised), the runtime
runs it exactly as torch does, in place, with two guards: a call never writes into a graph
input or a parameter (the caller's tensors and the graph's weights stay as they were; the
graph reads a private copy from that call on), and no fusion group spans it (a merged group
would run its members on either side of the write). Which arguments a call writes comes from
the ATen schema (`Tensor(a!) self`) where the callable is an operator overload, else from
calling it once on copies of its arguments and watching their version counters.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator

import torch

from uol_core.graph.format import Node

IN_PLACE_OPERATORS = (operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                      operator.ixor, operator.ilshift, operator.irshift, operator.imatmul)


def leaves(value) -> Iterator[torch.Tensor]:
    """The tensors inside nested args, in a fixed order (lists, tuples, dict values)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)


def may_write(node: Node) -> bool:
    """Whether a graph torch node can write into one of its inputs, from what it names (no
    call): a mutable ATen schema, a trailing-underscore method, an in-place operator, an `out=`
    or `inplace=True` argument, or a module built with inplace=True. Views never write."""
    if node.kind != "torch" or node.label == "view":
        return False
    fn = node.fn
    schema = getattr(fn, "_schema", None)
    if schema is not None:
        return bool(schema.is_mutable)
    name = node.source.rsplit(".", 1)[-1].split(":")[-1]
    return (name.endswith("_") and not name.endswith("__")) or fn in IN_PLACE_OPERATORS \
        or "out" in node.kwargs or node.kwargs.get("inplace") is True \
        or getattr(fn, "inplace", False) is True


def written(fn: Callable, args: list, kwargs: dict) -> list[int]:
    """Positions (in `leaves((args, kwargs))`) of the tensors `fn(*args, **kwargs)` writes, found
    before the call: from the schema of an ATen overload, else by a call on copies."""
    schema = getattr(fn, "_schema", None)
    if schema is not None:
        return _schema_writes(schema, args, kwargs)
    return _probe(fn, args, kwargs)


def _schema_writes(schema, args: list, kwargs: dict) -> list[int]:
    if not schema.is_mutable:
        return []
    targets: list[int] = []
    for i, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if i < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        targets.extend(id(t) for t in leaves(value))
    return [k for k, t in enumerate(leaves((args, kwargs))) if id(t) in targets]


def _probe(fn: Callable, args: list, kwargs: dict) -> list[int]:
    """Call `fn` once on copies of its tensor arguments; the copies whose version counter moved
    were written. The copies are made outside inference mode, so they have version counters."""
    originals = list(leaves((args, kwargs)))
    if not originals:
        return []
    with torch.inference_mode(False), torch.no_grad():
        copies = {id(t): t.clone() for t in originals}

        def swap(value):
            if isinstance(value, torch.Tensor):
                return copies[id(value)]
            if isinstance(value, (list, tuple)):
                return type(value)(swap(v) for v in value)
            if isinstance(value, dict):
                return {k: swap(v) for k, v in value.items()}
            return value

        probe_args, probe_kwargs = swap(args), swap(kwargs)
        before = {id(t): t._version for t in copies.values()}
        fn(*probe_args, **probe_kwargs)
    return [k for k, t in enumerate(originals) if copies[id(t)]._version != before[id(copies[id(t)])]]


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def whole_storage(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under `tensor`, as a flat tensor of its dtype."""
    count = tensor.untyped_storage().nbytes() // tensor.element_size()
    return tensor.as_strided((count,), (1,), 0)


def rebase(value: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
    """`value` (on some storage) as the same window on `copy`, a flat copy of that storage."""
    return copy.as_strided(tuple(value.shape), tuple(value.stride()), value.storage_offset())


def privatise(env: dict, tensor: torch.Tensor) -> None:
    """Give `tensor`'s storage a private copy: every tensor in `env` on that storage now views
    the copy (so a write through it changes neither the caller's tensor nor a parameter)."""
    copy = whole_storage(tensor).clone()
    for name, value in list(env.items()):
        if isinstance(value, torch.Tensor) and same_storage(value, tensor):
            env[name] = rebase(value, copy)
