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

The contract's types (`Plan`, `Choice`, `Kernel`, `Backend`) and the generator hash live in
`contract.py`, which the backend modules import instead of this registry. Adding a backend is
one module plus one row in `_FACTORIES`. "auto" resolves by target: a GPU
target gets Triton, any other the C backend. Modules are imported when a backend is first
asked for, so importing a single emitter (backends.c) stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from uol_core.backends.contract import Backend

AUTO = "auto"
REFERENCE = "reference"  # the IR evaluator's row: the verification oracle and the fallback
AUTO_BY_TARGET_KIND = {"gpu": "triton"}  # what "auto" means per HFL target kind ...
AUTO_DEFAULT = "c"  # ... and for every other kind


# A row's module loads when the backend is first asked for: importing the registry stays
# cheap, and the rows (which import acg, whose tuning session asks this registry) stay out of
# its import.
def _c() -> Backend:
    from uol_core.backends.c.backend import CBackend  # see above

    return CBackend()


def _triton() -> Backend:
    from uol_core.backends.triton.backend import TritonBackend  # loaded when asked for

    return TritonBackend()


def _reference() -> Backend:
    from uol_core.backends.reference_backend import ReferenceBackend  # loaded when asked for

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


def gpu_backend_names() -> tuple[str, ...]:
    """The kernel backends that build for a GPU target (those "auto" picks for one)."""
    gpu = set(AUTO_BY_TARGET_KIND.values())
    return tuple(name for name in kernel_backend_names() if name in gpu)


def backend_choices() -> tuple[str, ...]:
    """What a user may ask for: "auto" and every registered backend."""
    return (AUTO, *_FACTORIES)


def resolve_name(name: str, target: Any = None) -> str:
    """The backend `name` means on `target`: "auto" is Triton on a GPU target, else C."""
    if name == AUTO:
        # only "auto" needs the target: acg loads when asked, not with the registry
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
