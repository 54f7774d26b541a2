"""The search every tuning session shares (acg/session.py): measure the model's top few, then
local search around the best until gains flatten or the budget runs out, then a confirmation
round that times the finalists in turn; and the database key of a tuning record.

Every measurement (and every failure) is written to the tuning database at once; a failure
is never retried; `replay=True` answers only from the database (to compare strategies offline).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uol_core.runtime.build import compiler_version
from uol_core.runtime.tuningdb import TuningKey, op_hash, target_fingerprint
from uol_core.runtime.tuninglease import LEASE_WAIT_S, TuningLease

LEASE_MIN_TTL_S = 60.0  # a key's lease outlives twice the worker's timeout, at least this
# The confirmation round: measured one at a time, configs are ordered by the machine's mood
# as much as by their speed (on a shared 2-core host one 512^3 tune measured its first four
# configs at 128-133 GFLOP/s and their neighbours, one knob away, at 201-252; a tune's pick
# measured 0.84x torch where the model's own pick, timed in turn with it, ran 0.92x). So the
# finalists (_finalists) are timed again in turn, in one process, and that settles it.
CONFIRM_WITHIN = 0.5
CONFIRM_FINALISTS = 4
CONFIRM_SECONDS_PER_FINALIST = 0.5  # at least CONFIRM_ROUNDS rounds either way
CONFIRM_ROUNDS = 5


@dataclass
class Trial:
    """One config tried: the model's prediction and rank, and what the worker (or DB) said."""

    config: Any  # a Config, or the GEMM's TileConfig
    predicted_gflops: float
    model_rank: int
    result: dict
    from_db: bool = False

    @property
    def gflops(self) -> float:
        return self.result.get("gflops") or 0.0 if self.result.get("status") == "ok" else 0.0


@dataclass
class TuneResult:
    """Outcome of a tuning run: the best config and every trial, in order."""

    best: Any
    best_gflops: float
    trials: list[Trial] = field(default_factory=list)
    stopped: str = ""
    # The confirmation round, when one ran: per finalist its config key, its first
    # measurement and its GFLOP/s timed in turn with the others (or the race's failure).
    confirmation: list[dict] = field(default_factory=list)

    @property
    def measurements(self) -> int:
        return len(self.trials)


def tuning_key(op: Any, sizes: dict, target: Any, backend: str = "c") -> TuningKey:
    """The database key of an op at sizes on a target, with this compiler and the backend's
    declared generator hash (every file its emitters import, and its compile flags; see
    `Backend.hash`). Rows written under an older spelling of the same generator (the hash of
    fewer files and the template's name) are read as the key's own (`TuningKey.older`)."""
    # the registry loads the backend modules on first use, and they import acg
    from uol_core.backends import get_backend

    chosen = get_backend(backend, target)
    older = getattr(chosen, "older_generators", None)
    return TuningKey(op_hash(op), op.name, json.dumps(dict(sizes), sort_keys=True),
                     ",".join(sorted({d.dtype.value for d in op.inputs + op.outputs})),
                     target_fingerprint(target), compiler_version(), chosen.hash(),
                     tuple(older()) if older else ())


def search(session, budget: int | None, seconds: float | None, top: int, patience: int,
           progress: Callable[[Trial, int], None] | None = None,
           after_top: Callable[[list[Trial]], None] | None = None) -> TuneResult:
    """The search every tuner shares: measure the model's top `top` (one per family where
    the session names families), then step to the best untried neighbour of the best until
    the budget runs out or gains stay flat for `patience` measurements. `session` offers
    ranked(), measure(cfg), neighbours(cfg) and optionally family(cfg); configs are told
    apart by their key().

    A measuring session (`db`, `key`, not `replay`) first takes the key's lease: a second
    tuner on the same key waits (`lease_wait_s`, default LEASE_WAIT_S) and then finds the
    first one's measurements in the database instead of timing them again beside it."""
    if getattr(session, "replay", True) or getattr(session, "db", None) is None:
        return _search(session, budget, seconds, top, patience, progress, after_top, None)
    ttl = max(LEASE_MIN_TTL_S, 2 * float(getattr(session, "timeout_s", LEASE_MIN_TTL_S)))
    with TuningLease(session.db, session.key, ttl) as lease:
        waited = time.perf_counter()
        if not lease.acquire(float(getattr(session, "lease_wait_s", LEASE_WAIT_S))):
            return TuneResult(None, 0.0, stopped=(
                f"another tuner is measuring this op at these sizes ({lease.blocker.describe()}); "
                f"waited {time.perf_counter() - waited:.0f} s. Run again when it has finished: "
                "its results are then read from the tuning database"))
        return _search(session, budget, seconds, top, patience, progress, after_top,
                       lease.renew)


def confirm_round(session, out: TuneResult) -> None:
    """Time the finalists of `out` in turn (CONFIRM_*) with the session's runner (`race`),
    record each as a row of one race, and make the race's winner `out.best`. Rows of a race
    outrank every row recorded before it (TuningDB.best); a tune that measured nothing new
    takes the database's best (read back by the session's model). A session with `flops` (a
    pattern's own work) rates the race by it."""
    if all(t.from_db for t in out.trials):  # measured before: its race (if any) settled it
        row = session.db.best(session.key)
        if row is not None:
            out.best, out.best_gflops = session.model.parse(row["config"]), row["gflops"]
        return
    finalists = _finalists(session, out)
    if len(finalists) < 2:
        return
    result = session.runner.race([t.config for t in finalists],
                                 CONFIRM_SECONDS_PER_FINALIST * len(finalists), CONFIRM_ROUNDS)
    if result.get("status") != "ok":
        out.confirmation = [{"status": result.get("status"), "reason": result.get("reason")}]
        return
    race, flops = uuid.uuid4().hex[:12], getattr(session, "flops", 0)
    # where the race ran (a remote worker's node and facts), on each of its rows
    context = {k: v for k, v in result.items() if k not in ("status", "results")}
    for trial, row in zip(finalists, result["results"]):
        row.update(context)
        if flops and row.get("median_s"):
            row["gflops"] = flops / row["median_s"] / 1e9
        row.update(race=race, raced=len(finalists), predicted_gflops=trial.predicted_gflops,
                   model_rank=trial.model_rank)
        session.db.record(session.key, trial.config.key(), row)
        out.confirmation.append({"config": trial.config.key(), "first_gflops": trial.gflops,
                                 "race_gflops": row.get("gflops") or 0.0,
                                 "status": row.get("status")})
    winner = max(zip(finalists, result["results"]), key=lambda fr: fr[1].get("gflops") or 0)
    if winner[1].get("gflops"):
        out.best, out.best_gflops = winner[0].config, winner[1]["gflops"]


def _finalists(session, out: TuneResult) -> list[Trial]:
    """What the confirmation round races: the best measured config, then the best of each
    other family (register tile), then the next best, CONFIRM_FINALISTS at most, each within
    CONFIRM_WITHIN of the best measurement."""
    family = getattr(session, "family", None) or (lambda cfg: cfg.key())
    ranked, unique = sorted((t for t in out.trials if t.gflops > 0), key=lambda t: -t.gflops), {}
    for trial in ranked:
        if trial.gflops >= (1 - CONFIRM_WITHIN) * out.best_gflops:
            unique.setdefault(trial.config.key(), trial)
    candidates = list(unique.values())
    chosen, families = [], set()
    for trial in candidates:  # the best of each family first
        if family(trial.config) not in families:
            families.add(family(trial.config))
            chosen.append(trial)
    chosen += [t for t in candidates if t not in chosen]
    return chosen[:CONFIRM_FINALISTS]


def _first_per_family(session, top: int) -> list:
    """The model's best `top` configs, at most one per family (a GEMM's register tile) while
    other families remain. A model's top configs are often one tile with another kc or
    prefetch distance, within 1-3% of each other in its own estimate, while tiles it rates as
    close measure 10% apart (AVX-512, 1024^3: 8x32 0.77-0.82x torch, 4x64 0.85x, 6x64
    0.86-0.89x); the local search tunes kc and the rest around whichever tile wins."""
    family = getattr(session, "family", None)
    ranked = [cfg for cfg, _ in session.ranked()]
    if family is None:
        return ranked[:top]
    chosen, seen = [], set()
    for cfg in ranked:
        if family(cfg) not in seen:
            seen.add(family(cfg))
            chosen.append(cfg)
            if len(chosen) == top:
                return chosen
    return chosen + [c for c in ranked if c not in chosen][:top - len(chosen)]


def _search(session, budget: int | None, seconds: float | None, top: int, patience: int,
            progress: Callable[[Trial, int], None] | None,
            after_top: Callable[[list[Trial]], None] | None,
            renew: Callable[[], None] | None) -> TuneResult:
    """The search, then the session's confirmation round where it has one (`confirm`)."""
    out = _explore(session, budget, seconds, top, patience, progress, after_top, renew)
    if out.best is not None and hasattr(session, "confirm"):
        session.confirm(out)
    return out


def _explore(session, budget: int | None, seconds: float | None, top: int, patience: int,
             progress: Callable[[Trial, int], None] | None,
             after_top: Callable[[list[Trial]], None] | None,
             renew: Callable[[], None] | None) -> TuneResult:
    start = time.perf_counter()
    out = TuneResult(None, 0.0)
    tried: set[str] = set()
    stale = 0

    def run(cfg) -> bool:
        nonlocal stale
        trial = session.measure(cfg)
        if renew is not None:
            renew()  # a measurement took at most the worker's timeout: keep the key
        tried.add(cfg.key())
        out.trials.append(trial)
        if progress:
            progress(trial, len(out.trials))
        stale = 0 if trial.gflops > out.best_gflops * 1.01 else stale + 1
        if trial.gflops > out.best_gflops:
            out.best, out.best_gflops = cfg, trial.gflops
        return (budget is not None and len(out.trials) >= budget) or \
            (seconds is not None and time.perf_counter() - start >= seconds)

    for cfg in _first_per_family(session, top):
        if run(cfg):
            out.stopped = "budget"
            return out
    if after_top:
        after_top(out.trials)
    while out.best is not None:
        todo = [c for c in session.neighbours(out.best) if c.key() not in tried]
        if not todo:
            out.stopped = "no untried neighbour of the best"
            break
        if run(todo[0]):
            out.stopped = "budget"
            break
        if stale >= patience:
            out.stopped = f"gains flat for {patience} measurements"
            break
    if out.best is None:
        out.stopped = out.stopped or "every measured config failed"
    return out
