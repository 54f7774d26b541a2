"""The backend registry: the one place a backend is named.

Every caller (the API, the CLI, runtime dispatch, graph routing, the tuner, the IDE) asks
`get_backend(name, target)` for a `Backend` and goes through its contract:

    plan(op, sizes, target) -> Plan          what the op is at these sizes on this target
    space(op, sizes, target) -> Space        the knobs, their named constraints, legal configs
    choose(plan, request) -> Choice          the model's config with a request on top
    emit(plan, config) -> KernelSource       kernel text with its line map to ODL
    load(source, plan) -> Kernel             something that runs on named torch tensors
    hash() -> str                            identity of the generator (tuning keys, caches):
                                             every file its emitters import + compile flags
    tuning_model(plan, space) -> TuningModel how a tuning session ranks the space
    tuning_runner(plan, **options) -> runner how a tuning session measures a config

A tuning session (acg/session.py) is the same for every backend: it asks the row for the last
two and keys its records by the plan and `hash()`, without emitting a kernel.

Adding a backend is one module plus one row in `_FACTORIES`. "auto" resolves by target: a GPU
target gets Triton, any other the C backend. Modules are imported when a backend is first
asked for, so importing a single emitter (backends.c) stays cheap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from uol_core.backends.base import KernelSource

AUTO = "auto"
REFERENCE = "reference"  # the IR evaluator's row: the verification oracle and the fallback
AUTO_BY_TARGET_KIND = {"gpu": "triton"}  # what "auto" means per HFL target kind ...
AUTO_DEFAULT = "c"  # ... and for every other kind


@dataclass(frozen=True)
class Plan:
    """An op at bound sizes on a resolved target, with what the backend recognised in it
    (`kind`: 'gemm' or the op's pattern kind; `detail`: the backend's own plan object)."""

    op: Any
    sizes: Mapping[str, int]
    target: Any
    kind: str
    detail: Any = None


@dataclass
class Choice:
    """The config a backend builds, the space it came from, and the cost model when there is one."""

    config: Any
    space: Any
    model: Any = None
    notes: list[str] = field(default_factory=list)


class Kernel(Protocol):
    """A loaded kernel: run on named inputs (optionally into given outputs), outputs by name."""

    def run_with(self, tensors: Mapping, out: Any = None) -> dict: ...


class Backend(Protocol):
    """What every backend offers; see the module docstring."""

    name: str
    lang: str
    label: str

    def plan(self, op: Any, sizes: Mapping[str, int], target: Any) -> Plan: ...

    def space(self, op: Any, sizes: Mapping[str, int], target: Any) -> Any: ...

    def choose(self, plan: Plan, request: Any = None) -> Choice: ...

    def emit(self, plan: Plan, config: Any) -> KernelSource: ...

    def load(self, source: KernelSource, plan: Plan) -> Kernel: ...

    def hash(self) -> str: ...

    def tuning_model(self, plan: Plan, space: Any) -> Any: ...

    def tuning_runner(self, plan: Plan, **options: Any) -> Any: ...


@cache
def generator_hash(patterns: tuple[str, ...], flags: str = "") -> str:
    """A short digest of the uol_core files matching `patterns` (paths from the package root,
    '**' for any depth) and of the compile flags: a generator's identity, as Triton keys its
    cache by its source and environment (any template, platform, plan or flag edit changes
    it). Read once per process: the modules that run are the ones imported at start."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted({p for pattern in patterns for p in root.glob(pattern)}):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    digest.update(flags.encode())
    return digest.hexdigest()[:12]


@cache
def source_hash(*patterns: str) -> str:
    """A short digest of this package's modules matching `patterns`: the generator identity
    tuning records were keyed by before `generator_hash` (their key's older spelling)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted({p for pattern in patterns for p in here.glob(pattern)}):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _c() -> Backend:
    from uol_core.backends.c.backend import CBackend

    return CBackend()


def _triton() -> Backend:
    from uol_core.backends.triton.backend import TritonBackend

    return TritonBackend()


def _reference() -> Backend:
    from uol_core.backends.reference_backend import ReferenceBackend

    return ReferenceBackend()


# name -> factory: the registry's rows, in the order they are offered to users
_FACTORIES: dict[str, Callable[[], Backend]] = {"c": _c, "triton": _triton,
                                                REFERENCE: _reference}
_EVALUATORS = frozenset({REFERENCE})  # rows that evaluate the IR instead of generating kernels
_LOADED: dict[str, Backend] = {}


def backend_names() -> tuple[str, ...]:
    """The registered backends, without "auto"."""
    return tuple(_FACTORIES)


def kernel_backend_names() -> tuple[str, ...]:
    """The backends that generate kernels (what the IDE offers and measures)."""
    return tuple(name for name in _FACTORIES if name not in _EVALUATORS)


def backend_choices() -> tuple[str, ...]:
    """What a user may ask for: "auto" and every registered backend."""
    return (AUTO, *_FACTORIES)


def resolve_name(name: str, target: Any = None) -> str:
    """The backend `name` means on `target`: "auto" is Triton on a GPU target, else C."""
    if name == AUTO:
        from uol_core.acg.config import resolve_target

        kind = getattr(resolve_target(target if target is not None else "host"), "kind", "cpu")
        return AUTO_BY_TARGET_KIND.get(kind, AUTO_DEFAULT)
    if name not in _FACTORIES:
        raise ValueError(f"unknown backend '{name}'; choose one of {', '.join(backend_choices())}")
    return name


def get_backend(name: str, target: Any = None) -> Backend:
    """The registered backend `name` ("auto" resolved for `target`)."""
    name = resolve_name(name, target)
    if name not in _LOADED:
        _LOADED[name] = _FACTORIES[name]()
    return _LOADED[name]


def generator_of(backend: Backend, op: Any, sizes: Mapping[str, int], target: Any = "host") -> str:
    """Which generator of `backend` writes the op's kernel (plans, chooses and emits; no build)."""
    plan = backend.plan(op, sizes, target)
    source = backend.emit(plan, backend.choose(plan).config)
    return str(source.meta.get("generator", backend.name))
