"""The contract every backend row implements (the registry in `uol_core.backends` describes
it): the plan of an op, the choice of a config, a loaded kernel, the backend protocol, and the
generator hash that keys tuning records. Backend adapters import this module, not the
registry, so the registry can import them without a circle."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from uol_core.backends.base import KernelSource


@dataclass(frozen=True)
class Plan:
    """An op at bound sizes on a resolved target, with what the backend recognised in it
    (`kind`: 'gemm' or the op's pattern kind; `detail`: the backend's own plan object)."""

    op: Any
    sizes: Mapping[str, int]
    target: Any
    kind: str
    detail: Any = None


@dataclass(frozen=True)
class Tuned:
    """A request for the best recorded config: `lookup(budget)` returns it (tuning with that
    many measurements when nothing is recorded) or None. The API builds it over the tuning
    session, so no backend imports the session that asks the registry for it."""

    lookup: Callable[[int], Any]


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
