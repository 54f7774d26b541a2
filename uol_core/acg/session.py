"""The one tuning session: `Session(backend, space, runner)` offers ranked / measure / neighbours
over one backend's space for one op at bound sizes, and tunes with the shared search
(`acg.tuner.search`: the model's top few, then steps around the best, then a confirmation
round where the runner races).

What differs between backends is data, chosen by the registry row, never by the caller: the
ranking (`Backend.tuning_model`: acg/tuning_models.py), the runner (`Backend.tuning_runner`:
runtime/runners.py) and the generator the key names (`Backend.generator(plan)`). The API, the
CLI, the remote workers and the IDE all open sessions with `open_session`; the IDE passes its
own runner (queued Runs) and ranking, and keeps only presentation.

Every measurement (and every failure) is written to the tuning database at once under the
session's key; a failure is never retried; `replay=True` answers only from the database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from uol_core.acg.config import resolve_target
from uol_core.acg.space_core import as_mapping
from uol_core.acg.tuner import (
    LEASE_MIN_TTL_S,
    Trial,
    TuneResult,
    confirm_round,
    search,
    tuning_key,
)
from uol_core.acg.tuning_models import TuningModel
from uol_core.runtime.tuningdb import TuningDB, TuningKey
from uol_core.runtime.tuninglease import LEASE_WAIT_S


class Session:
    """Tuning state for one op at bound sizes on one backend: its space's legal configs in the
    model's order, the database rows under `key`, and the runner that measures the rest.

    Without a database (`db=None`) nothing is looked up or recorded (the Studio's queued runs,
    which keep their own history)."""

    def __init__(self, backend: Any, space: Any, runner: Any, *, model: TuningModel | None = None,
                 plan: Any = None, key: TuningKey | None = None, db: TuningDB | None = None,
                 replay: bool = False, lease_wait_s: float = LEASE_WAIT_S) -> None:
        self.backend, self.space, self.runner, self.plan = backend, space, runner, plan
        self.model = model or TuningModel()
        self.key, self.db, self.replay = key, db, replay
        self.lease_wait_s = lease_wait_s  # how long tune() waits for another tuner on this key
        self.op = getattr(plan, "op", None)
        self.sizes = dict(getattr(plan, "sizes", None) or {})
        if db is not None and key is not None and not replay and self.model.learns:
            # learn the per-target correction from what is already measured
            prior = [(self.model.parse(r["config"]), r["gflops"])
                     for r in db.rows(key) if r["status"] == "ok" and r["gflops"]]
            if prior:
                self.model.learn(prior)
        self._legal = {self.model.identity(c): c for c in space.configs}
        self._ranked = self.model.rank(list(self._legal.values()))
        self._rank = {c.key(): i + 1 for i, (c, _) in enumerate(self._ranked)} \
            if self.model.ranks else {}

    @property
    def timeout_s(self) -> float:
        """The runner's timeout per measurement (the search's lease outlives twice it); a
        runner without one (in process) counts as LEASE_MIN_TTL_S."""
        return float(getattr(self.runner, "timeout_s", LEASE_MIN_TTL_S))

    @property
    def worker(self) -> Any:
        """The runner's worker, once a measurement started it (None before)."""
        return getattr(self.runner, "worker", None)

    @property
    def flops(self) -> float:
        """The op's work when the model rates kernels by it (a race's GFLOP/s), else 0."""
        return self.model.flops

    @property
    def family(self) -> Callable | None:
        return self.model.family

    def ranked(self) -> list[tuple[Any, float]]:
        """The legal configs in the model's order, each with its predicted GFLOP/s."""
        return self._ranked

    def model_rank(self, cfg: Any) -> int | None:
        return self._rank.get(cfg.key())

    def put_first(self, default: dict) -> bool:
        """Measure the config matching `default` first (a tune's speedup is then against a
        measured baseline); the model's order follows. False: no legal config matches."""
        match = [pair for pair in self._ranked
                 if all(as_mapping(pair[0]).get(k, v) == v for k, v in default.items())]
        if match:
            first = match[0][0].key()
            self._ranked = match[:1] + [p for p in self._ranked if p[0].key() != first]
        return bool(match)

    def measure(self, cfg: Any) -> Trial:
        """The result of `cfg`: from the database if known (failures included), else measured
        by the runner and recorded at once."""
        predicted, rank = self.model.estimate(cfg), self._rank.get(cfg.key(), 0)
        if self.db is not None:
            row = self.db.lookup(self.key, cfg.key())
            if row is not None:
                return Trial(cfg, predicted, rank, row, from_db=True)
            if self.replay:
                return Trial(cfg, predicted, rank,
                             {"status": "missing", "reason": "not in the database (replay mode)"},
                             from_db=True)
        result = self.runner.run(cfg)
        if self.db is not None:
            result.update(predicted_gflops=predicted, model_rank=rank)
            self.db.record(self.key, cfg.key(), result)  # at once: a killed tuner loses nothing
        return Trial(cfg, predicted, rank, result)

    def neighbours(self, cfg: Any) -> list:
        """Legal configs one domain step away in one knob, best ranked first."""
        found = []
        values = as_mapping(cfg)
        for knob, domain in self.space.domains.items():
            if values.get(knob) not in domain:
                continue
            i = domain.index(values[knob])
            for j in (i - 1, i + 1):
                other = self._legal.get(self.model.identity(cfg.replace(**{knob: domain[j]}))) \
                    if 0 <= j < len(domain) else None
                if other is not None:
                    found.append(other)
        return sorted(found, key=lambda c: self._rank.get(c.key(), 1 << 30))

    def tune(self, budget: int | None = None, seconds: float | None = None,
             top: int | None = None, patience: int | None = None,
             progress: Callable[[Trial, int], None] | None = None) -> TuneResult:
        """The model's top `top` (one per family where it has families), then local search
        around the best; stops on budget, time or flat gains (defaults: the model's)."""
        default_budget, default_top, default_patience = self.model.defaults
        learn = (lambda trials: self.model.learn([(t.config, t.gflops) for t in trials
                                                  if t.gflops])) if self.model.learns else None
        result = search(self, default_budget if budget is None else budget, seconds,
                        default_top if top is None else top,
                        default_patience if patience is None else patience, progress,
                        after_top=learn)
        if result.best is None and any(t.result.get("status") == "verified"
                                       for t in result.trials):
            result.stopped = ("verified under the interpreter, not timed (no GPU here): "
                              "the model's pick stands")
        return result

    def confirm(self, out: TuneResult) -> None:
        """The confirmation round, where the runner can race configs in turn."""
        if hasattr(self.runner, "race"):
            confirm_round(self, out)

    def best_config(self) -> Any:
        """The best recorded config under this key (None: nothing verified yet)."""
        row = self.db.best(self.key) if self.db is not None else None
        return self.model.parse(row["config"]) if row is not None else None

    def close(self) -> None:
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()


def open_session(op: Any, sizes: dict, target: Any = "host", backend: str = "c", *,
                 db: TuningDB | None = None, replay: bool = False,
                 lease_wait_s: float = LEASE_WAIT_S, **runner_options: Any) -> Session:
    """The tuning session of an op's kernel on a backend of the registry: its plan, space,
    ranking, runner and key all come from the backend's row. `runner_options` go to the
    backend's runner (worker, seed, min_seconds, timeout_s)."""
    # the registry imports backend modules on first use, which import acg: asked for here
    from uol_core.backends import get_backend, kernel_backend_names

    target = resolve_target(target)
    chosen = get_backend(backend, target)
    if chosen.name not in kernel_backend_names():
        raise ValueError(f"the {chosen.name} backend evaluates the IR and has no knobs to tune")
    plan = chosen.plan(op, dict(sizes), target)
    space = chosen.space(op, plan.sizes, target)
    key = tuning_key(op, plan.sizes, target, chosen.name)
    return Session(chosen, space, chosen.tuning_runner(plan, **runner_options),
                   model=chosen.tuning_model(plan, space), plan=plan, key=key,
                   db=db or TuningDB(), replay=replay, lease_wait_s=lease_wait_s)


def tuned(op: Any, sizes: Mapping[str, int], target: Any, backend: str, budget: int) -> Any:
    """The best recorded config of the op's kernel, tuning with `budget` when none is recorded
    (None: nothing verified)."""
    session = open_session(op, dict(sizes), target, backend)
    try:
        best = session.best_config()
        return best if best is not None else session.tune(budget=budget).best
    finally:
        session.close()


def recorded(op: Any, sizes: dict, target: Any, cfg: Any, db: TuningDB | None = None,
             backend: str = "c") -> tuple[dict | None, int | None]:
    """The recorded result of `cfg` and its rank among the verified measurements (1 = fastest)."""
    db = db or TuningDB()
    rows = db.rows(tuning_key(op, sizes, resolve_target(target), backend))
    ok = sorted((r for r in rows if r["status"] == "ok" and r["gflops"]),
                key=lambda r: -r["gflops"])
    for rank, row in enumerate(ok, 1):
        if row["config"] == cfg.key():
            return row, rank
    return None, None
