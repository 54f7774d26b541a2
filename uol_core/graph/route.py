"""Where a group's op runs: the chosen backend when it can emit the op, else the reference evaluator.

The backends come from the registry (`uol_core.backends`). A new backend (or a new pattern in
one) is picked up here with no change to planning or running: `can_emit` asks the backend
itself, so the fusion planner and the runner follow whatever the backend accepts today.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import uol_core
from uol_core.api import check_memory
from uol_core.backends import REFERENCE, backend_names, generator_of, get_backend
from uol_core.odl.ir import Op
from uol_core.odl.printer import format_op
from uol_core.runtime.reference import evaluate_all

BACKENDS = backend_names()
Runner = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Route:
    """A runnable kernel for one op at fixed sizes: who runs it and why."""

    engine: str  # "c", "triton" or "reference"
    run: Runner
    note: str = ""  # why the backend was not used, when it was not
    kernel: Any = None  # the compiled kernel (uol_core.compile) when a backend builds one


_EMIT_CACHE: dict[tuple, tuple[bool, str]] = {}
_ROUTE_CACHE: dict[tuple, Route] = {}


def _key(op: Op, sizes: dict[str, int], backend: str, target) -> tuple:
    return (format_op(op), tuple(sorted(sizes.items())), backend, str(target))


def _check(op: Op, sizes: dict[str, int], backend: str, target) -> str:
    """Plan and emit the kernel text without building it (cheap enough for the fusion
    planner); returns the generator that would write the kernel (a template, generic, ...)."""

    check_memory(op, sizes)
    return generator_of(get_backend(backend, target), op, sizes, target)


_GENERATOR: dict[tuple, str] = {}


def generator(op: Op, sizes: dict[str, int], backend: str, target="host") -> str:
    """Which code generator of the backend writes the op's kernel ('' when none does)."""
    can_emit(op, sizes, backend, target)
    return _GENERATOR.get(_key(op, sizes, backend, target), "")


def can_emit(op: Op, sizes: dict[str, int], backend: str, target="host") -> tuple[bool, str]:
    """Whether `backend` generates a kernel for `op` at `sizes`, and if not, the backend's reason."""
    if backend == REFERENCE:
        return True, ""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
    key = _key(op, sizes, backend, target)
    if key not in _EMIT_CACHE:
        try:
            _GENERATOR[key] = _check(op, sizes, backend, target)
            _EMIT_CACHE[key] = (True, "")
        except Exception as err:  # the backend's own refusal, whatever its type, is the answer
            _EMIT_CACHE[key] = (False, str(err).split("\n")[0])
    return _EMIT_CACHE[key]


def _reference(op: Op) -> Runner:
    return lambda tensors: evaluate_all(op, tensors)


def _build(op: Op, sizes: dict[str, int], backend: str, target) -> tuple[Runner, Any]:
    kernel = uol_core.compile(op, shapes=sizes, target=target, backend=backend)
    single = len(op.outputs) == 1

    def run(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = kernel(**tensors)
        return {op.outputs[0].name: out} if single else out

    return run, kernel


def route(op: Op, sizes: dict[str, int], backend: str = "c", target="host") -> Route:
    """The kernel that runs `op`: the backend's when it emits and builds, else the reference."""
    key = _key(op, sizes, backend, target)
    if key in _ROUTE_CACHE:
        return _ROUTE_CACHE[key]
    ok, why = can_emit(op, sizes, backend, target)
    result = Route(REFERENCE, _reference(op), "" if backend == REFERENCE else why)
    if ok and backend != REFERENCE:
        try:
            run, kernel = _build(op, sizes, backend, target)
            result = Route(backend, run, kernel=kernel)
        except Exception as err:  # a build failure falls back, and the report says why
            result = Route(REFERENCE, _reference(op), f"{backend} build failed: {err}")
    _ROUTE_CACHE[key] = result
    return result

