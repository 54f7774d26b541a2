"""Measured times for the guide's cases: each case whose target has a measurer is built,
verified and timed there; every other case keeps its prediction (labelled as such).

Where a target's cases can run is the caller's knowledge, not the compiler's: this host runs
`host` in a sandboxed worker process (`local_measurer`), and a caller that knows remote
workers (the CLI and the IDE, through uol_remote) passes a `measurer_for` that answers with a
measurer per target whose jobs go to a live worker of it. Targets run side by side (each on
its own machine); a target's cases run one after another, so its timings never overlap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uol_core.acg.config import resolve_target
from uol_core.acg.tuner import tuning_key
from uol_core.backends import get_backend
from uol_core.guide.cases import MEASURED, GuideCase
from uol_core.ops import load_op, op_text
from uol_core.runtime.tuningdb import TuningDB
from uol_core.runtime.worker import Worker, make_job

MIN_SECONDS = 0.05  # each timing: enough repeats for a stable median, short for a whole guide
DEFAULT_TIMEOUT_S = 120.0
Progress = Callable[[int, int, str], None]  # done, total, what is being measured


def _nothing() -> None:
    return None


@dataclass
class CaseMeasurer:
    """How one target's cases are timed.

    `run_kernel(job, timeout_s)` runs a built C kernel job (`uol_core.runtime.worker.make_job`)
    and returns the worker's result dict (status, median_s, ...). `run_request(request,
    timeout_s)` compiles, verifies and times a kernel of another backend (Triton) from
    {odl, sizes, target, backend, config}, or is None where only C kernels run. `label(result)`
    says where a result was measured ("measured on ..."). A run that did not happen (the
    worker vanished, refused the job) raises; a kernel that failed returns its status."""

    run_kernel: Callable[[dict, float], dict]
    label: Callable[[dict], str]
    run_request: Callable[[dict, float], dict] | None = None
    close: Callable[[], None] = _nothing


MeasurerFor = Callable[[str], CaseMeasurer | None]


@dataclass
class TargetMeasurement:
    """What measuring one target's cases did: how many were measured, failed or left out."""

    target: str
    where: str = ""  # the label of its first measured case ("" when none was)
    measured: int = 0
    failed: list[str] = field(default_factory=list)  # "case id: why"
    skipped: int = 0  # beyond the per-target limit
    has_measurer: bool = True


def local_measurer(timeout_s: float = DEFAULT_TIMEOUT_S) -> CaseMeasurer:
    """C kernels of `host` timed in a sandboxed worker process on this machine."""

    worker = Worker(timeout_s=timeout_s)
    return CaseMeasurer(run_kernel=worker.run, label=lambda _result: MEASURED,
                        close=worker.close)


def host_only(timeout_s: float = DEFAULT_TIMEOUT_S) -> MeasurerFor:
    """The measurers of a machine without remote workers: `host` here, nothing else."""
    return lambda target: local_measurer(timeout_s) if target == "host" else None


def measure_cases(cases: list[GuideCase], measurer_for: MeasurerFor, limit: int | None = None,
                  progress: Progress | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                  min_seconds: float = MIN_SECONDS) -> list[TargetMeasurement]:
    """Time up to `limit` cases per target (all with None), in the cases' order, on the
    measurer `measurer_for(target)` gives; a target it answers None for keeps its
    predictions. Fills each case's `measured_s` and `measured_label` in place; a case that
    could not be measured keeps its prediction and says why in `note`."""
    by_target: dict[str, list[GuideCase]] = {}
    for case in cases:
        by_target.setdefault(case.target, []).append(case)
    plans: list[tuple[TargetMeasurement, CaseMeasurer | None, list[GuideCase]]] = []
    for target, own in by_target.items():
        measurer = measurer_for(target)
        chosen = own if limit is None or measurer is None else own[:max(0, limit)]
        report = TargetMeasurement(target, has_measurer=measurer is not None,
                                   skipped=len(own) - len(chosen) if measurer else 0)
        for case in own[len(chosen):] if measurer else []:
            case.note = _joined(case.note, f"not measured: beyond the limit of {limit} cases "
                                           "per target")
        plans.append((report, measurer, chosen if measurer else []))
    total = sum(len(chosen) for _, _, chosen in plans)
    done = [0]
    lock = threading.Lock()

    def tick(what: str) -> None:
        if progress:
            with lock:
                progress(done[0], total, what)

    def measure_target(report: TargetMeasurement, measurer: CaseMeasurer,
                       chosen: list[GuideCase]) -> None:
        try:
            for case in chosen:
                tick(f"measuring {case.id}")
                why = measure_case(case, measurer, timeout_s, min_seconds)
                if why:
                    report.failed.append(f"{case.id}: {why}")
                else:
                    report.measured += 1
                    report.where = report.where or case.measured_label
                with lock:
                    done[0] += 1
        finally:
            measurer.close()

    threads = [threading.Thread(target=measure_target, args=plan, daemon=True,
                                name=f"guide-measure-{plan[0].target}")
               for plan in plans if plan[1] is not None]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tick("done")
    return [report for report, _, _ in plans]


def measure_case(case: GuideCase, measurer: CaseMeasurer, timeout_s: float = DEFAULT_TIMEOUT_S,
                 min_seconds: float = MIN_SECONDS) -> str | None:
    """Build, verify and time the case's chosen kernel on `measurer`: None when measured, else
    why not (also appended to the case's note)."""
    try:
        result = _run(case, measurer, timeout_s, min_seconds)
    except Exception as exc:  # no worker took it, too large for the memory budget, ...
        result = {"status": "not run", "reason": f"{type(exc).__name__}: {exc}"}
    if result.get("status") not in ("not run", None):
        record_case(case, result)
    if result.get("status") == "ok" and result.get("median_s"):
        case.measured_s, case.measured_label = float(result["median_s"]), measurer.label(result)
        return None
    why = f"{result.get('status')}: {result.get('reason') or result.get('mode') or ''}".strip()
    case.note = _joined(case.note, f"not measured: {why}")
    return why


def case_key(case: GuideCase):
    """(tuning key, config text) of a case's kernel: the key and config string the tuners
    write, so the guide's measurements and the tuners' rows are one history."""

    target = resolve_target(case.target)
    op = load_op(case.op)
    config = ",".join(f"{k}={v}" for k, v in case.config.items())
    return tuning_key(op, case.sizes, target, case.backend), config


def record_case(case: GuideCase, result: dict) -> None:
    """Write a case's measurement (or its failure) to the tuning database at once, with the
    result's host facts (a remote worker's) in its row; a database problem never loses the
    measurement on the case itself."""

    try:
        key, config = case_key(case)
        db = TuningDB()
        try:
            db.record(key, config, {**result, "source": "guide"})
        finally:
            db.close()
    except Exception as exc:  # the case keeps its time; the note says it was not recorded
        case.note = _joined(case.note, f"not recorded in the tuning database: {exc}")


def _run(case: GuideCase, measurer: CaseMeasurer, timeout_s: float, min_seconds: float) -> dict:

    target = resolve_target(case.target)
    backend = get_backend(case.backend, target)
    if getattr(backend, "worker_jobs", False):
        op = load_op(case.op)
        source = backend.emit(backend.plan(op, case.sizes, target), case.config)
        job = make_job(source, op_text(case.op), f"{case.op}.odl", case.sizes, warmup=1,
                       repeats=3, min_seconds=min_seconds)
        return measurer.run_kernel(job, timeout_s)
    if measurer.run_request is None:
        return {"status": "not run", "reason": f"the {case.backend} backend's kernels run only "
                                               "on a worker of their target"}
    request: dict[str, Any] = {"odl": op_text(case.op), "sizes": dict(case.sizes),
                               "target": case.target, "backend": case.backend,
                               "config": dict(case.config)}
    return measurer.run_request(request, timeout_s)


def _joined(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more
