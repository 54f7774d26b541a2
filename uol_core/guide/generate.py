"""Generate the optimisation guide: every HFL target x every operator family, cached.

Building the ACG spaces of the GEMM-like cases takes about a second each, so the whole guide
(some 450 cases) takes minutes the first time; each target's cases are cached in the user
cache under a key made of its HFL record, the generators' hashes and the families, and are
rebuilt only when one of them changes. Measured times (this host's: `measure_host_cases` or
the tuner's records; a live remote worker's: `measure_guide` with the caller's measurers, see
`uol_core.guide.measure`) stand beside the prediction, labelled with where they were measured;
every other case stays model-predicted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uol_core.acg.config import resolve_target
from uol_core.backends import backend_names, get_backend
from uol_core.guide.cases import MEASURED, GuideCase, build_case
from uol_core.guide.families import FAMILIES, Family
from uol_core.guide.measure import (
    MeasurerFor,
    TargetMeasurement,
    case_key,
    host_only,
    measure_cases,
)
from uol_core.hfl import list_targets
from uol_core.runtime.tuningdb import TuningDB
from uol_core.runtime.usercache import private_dir

GUIDE_VERSION = 1
Progress = Callable[[int, int, str], None]  # done, total, what is being built


@dataclass
class Guide:
    """The cases, and what they were generated from."""

    cases: list[GuideCase]
    targets: list[str]
    families: list[dict]
    key: str = ""
    errors: list[dict] = field(default_factory=list)  # cases the compiler could not plan

    def to_dict(self) -> dict:
        return {"version": GUIDE_VERSION, "key": self.key, "targets": self.targets,
                "families": self.families, "cases": [c.to_dict() for c in self.cases],
                "errors": self.errors}

    @classmethod
    def from_dict(cls, data: dict) -> Guide:
        return cls([GuideCase(**c) for c in data["cases"]], list(data["targets"]),
                   list(data["families"]), data.get("key", ""), list(data.get("errors", [])))


def shipped_targets() -> list[str]:
    """The HFL's shipped targets (not the probed host)."""

    return [name for name in list_targets() if name != "host"]


def guide_key(targets: Iterable[Any], families: Iterable[Family]) -> str:
    """Content key of a guide: the HFL records, the backends' generator hashes, the families,
    this package's code and the ACG's (its space and cost model choose every case's config)."""

    digest = hashlib.sha256(f"guide-{GUIDE_VERSION}".encode())
    code = Path(__file__).parent
    for module in sorted([*code.glob("*.py"), *code.parent.joinpath("acg").rglob("*.py")]):
        digest.update(module.read_bytes())
    for target in targets:
        digest.update(json.dumps(target.to_dict(), sort_keys=True, default=str).encode())
    for name in backend_names():
        digest.update(get_backend(name).hash().encode())
    for fam in families:
        digest.update(repr((fam.name, fam.op, sorted(fam.sizes.items()))).encode())
    return digest.hexdigest()[:20]


def generate(targets: Iterable[str] | None = None, families: Iterable[Family] | None = None,
             progress: Progress | None = None, use_cache: bool = True) -> Guide:
    """The guide of `targets` (default: every shipped target) x `families` (default: all).

    Each target's cases are cached on their own, so a guide of other targets reuses them."""

    resolved = [resolve_target(name) for name in (targets or shipped_targets())]
    fams = list(families or FAMILIES)
    cases: list[GuideCase] = []
    errors: list[dict] = []
    total = len(resolved) * len(fams)
    for n, target in enumerate(resolved):
        key = guide_key([target], fams)
        part = _read_cache(key) if use_cache else None
        if part is None:
            part = Guide([], [target.name], [], key)
            for i, fam in enumerate(fams):
                if progress:
                    progress(n * len(fams) + i, total, f"{target.name}/{fam.name}")
                try:
                    part.cases.append(build_case(target, fam))
                except Exception as exc:  # one unplannable case must not lose the others
                    part.errors.append({"id": f"{target.name}/{fam.name}",
                                        "error": f"{type(exc).__name__}: {exc}"})
            if use_cache:
                _write_cache(part)
        cases += part.cases
        errors += part.errors
    if progress:
        progress(total, total, "done")
    guide = Guide(cases, [t.name for t in resolved],
                  [{"name": f.name, "op": f.op, "sizes": f.sizes, "why": f.why} for f in fams],
                  guide_key(resolved, fams), errors)
    return _with_recorded_times(guide)


def _cache_path(key: str):
    return private_dir("guide") / f"guide-{key}.json"


def _read_cache(key: str) -> Guide | None:
    path = _cache_path(key)
    try:
        return Guide.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or from an older layout: regenerate


def _write_cache(guide: Guide) -> None:
    path = _cache_path(guide.key)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(guide.to_dict(), default=str))
    tmp.replace(path)


def _with_recorded_times(guide: Guide) -> Guide:
    """Cases of a target that is this host get the tuning database's time of their config."""
    host_cases = [c for c in guide.cases if c.target == "host" and c.measured_s is None]
    if not host_cases:
        return guide

    db = TuningDB()
    try:
        for case in host_cases:
            row = db.lookup(*case_key(case))
            if row and row.get("status") == "ok" and row.get("median_s"):
                case.measured_s = row["median_s"]
                case.measured_label = f"{MEASURED} (tuning database)"
    finally:
        db.close()
    return guide


def measure_host_cases(guide: Guide, progress: Progress | None = None,
                       timeout_s: float = 60.0, limit: int | None = None) -> Guide:
    """Build, verify and time (in a worker process) the chosen kernel of every case whose
    target is this host; a case that fails keeps its prediction and says why in `note`."""
    return measure_guide(guide, host_only(timeout_s), limit, progress, timeout_s)[0]


def measure_guide(guide: Guide, measurer_for: MeasurerFor, limit: int | None = None,
                  progress: Progress | None = None, timeout_s: float = 120.0
                  ) -> tuple[Guide, list[TargetMeasurement]]:
    """The guide with up to `limit` cases per target measured where `measurer_for` says (a
    live remote worker of the target, this host, ...), and what was measured per target."""
    return guide, measure_cases(guide.cases, measurer_for, limit, progress, timeout_s)
