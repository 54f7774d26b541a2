"""The tuner for the non-GEMM C kernels (rows, maps, stencils, scans, fused ops).

A session of the shared search (`acg.tuner.search`): rank the legal configs of the pattern
space with its roofline model, measure the top few in the worker (verified first), then step
one knob at a time around the best until gains flatten or the budget runs out. Every
measurement and every failure is written to the tuning database at once, under a key that
names the template that writes the kernel (rows, flash, conv, generic: each has its own
version), so a template change never reuses another version's records.
"""

from __future__ import annotations

from collections.abc import Callable

from uol_core.acg.config import resolve_target
from uol_core.acg.space_core import Config, parse_key
from uol_core.acg.space_patterns import build_pattern_space, pattern_config, predict_seconds
from uol_core.acg.tuner import Trial, TuneResult, confirm_round, generator_id, search, tuning_key
from uol_core.backends.c import emit
from uol_core.odl.cost import op_cost
from uol_core.odl.printer import format_op
from uol_core.runtime.tuningdb import TuningDB
from uol_core.runtime.worker import Worker, make_job


def parse_pattern_key(text: str) -> Config:
    """'threads=2,chunk=0,vec=8,fuse=1' -> Config."""
    return pattern_config(parse_key(text))


class PatternTuningSession:
    """Tuning state for one non-GEMM op at bound sizes on one target."""

    def __init__(self, op, sizes: dict, target="host", db: TuningDB | None = None,
                 worker: Worker | None = None, replay: bool = False, seed: int = 0,
                 min_seconds: float = 0.15, timeout_s: float = 120.0):
        self.op, self.sizes = op, dict(sizes)
        self.target = resolve_target(target)
        self.space = build_pattern_space(op, self.sizes, self.target)
        self.db = db or TuningDB()
        self.worker, self.own_worker = worker, worker is None
        self.replay, self.seed, self.min_seconds, self.timeout_s = replay, seed, min_seconds, timeout_s
        self.flops = op_cost(op, self.sizes).flops
        configs = list(self.space.configs)
        self._ranked = sorted(((c, self.predicted_gflops(c)) for c in configs),
                              key=lambda pair: -pair[1])
        self.key = tuning_key(op, self.sizes, self.target, self._generator())
        self._rank = {c.key(): i + 1 for i, (c, _) in enumerate(self._ranked)}
        self._legal = {c.key(): c for c in configs}

    def _generator(self) -> str:
        """The template that writes this op's kernel (it does not depend on the knobs)."""
        pick = self._ranked[0][0] if self._ranked else {}
        src = emit(self.op, dict(pick), self.target, self.sizes)
        return generator_id(str(src.meta.get("generator", "")))

    def predicted_gflops(self, cfg: Config) -> float:
        return self.flops / predict_seconds(self.op, self.sizes, self.target, cfg) / 1e9

    def ranked(self) -> list[tuple[Config, float]]:
        return self._ranked

    def measure(self, cfg: Config) -> Trial:
        """From the database when known (failures included), else built, verified and timed."""
        predicted, rank = self.predicted_gflops(cfg), self._rank.get(cfg.key(), 0)
        row = self.db.lookup(self.key, cfg.key())
        if row is not None:
            return Trial(cfg, predicted, rank, row, from_db=True)
        if self.replay:
            return Trial(cfg, predicted, rank, {"status": "missing",
                                                "reason": "not in the database (replay mode)"},
                         from_db=True)
        if self.worker is None:
            self.worker = Worker(self.timeout_s)
        src = emit(self.op, dict(cfg), self.target, self.sizes)
        job = make_job(src, self.op.source or format_op(self.op), f"{self.op.name}.odl",
                       self.sizes, seed=self.seed, min_seconds=self.min_seconds)
        result = self.worker.run(job, self.timeout_s)
        if result.get("status") == "ok" and result.get("median_s") and not result.get("gflops"):
            # the worker knows GEMM FLOPs only; the ODL cost counts every pattern's work
            result["gflops"] = self.flops / result["median_s"] / 1e9
        result.update(predicted_gflops=predicted, model_rank=rank)
        self.db.record(self.key, cfg.key(), result)  # at once: a killed tuner loses nothing
        return Trial(cfg, predicted, rank, result)

    def neighbours(self, cfg: Config) -> list[Config]:
        """Legal configs one domain step away in one knob, best predicted first."""
        found = []
        for var, domain in self.space.domains.items():
            if cfg.get(var) not in domain:
                continue
            i = domain.index(cfg[var])
            for j in (i - 1, i + 1):
                if 0 <= j < len(domain):
                    other = self._legal.get(cfg.replace(**{var: domain[j]}).key())
                    if other is not None:
                        found.append(other)
        return sorted(found, key=lambda c: self._rank.get(c.key(), 1 << 30))

    def tune(self, budget: int | None = 8, seconds: float | None = None, top: int = 3,
             patience: int = 3, progress: Callable[[Trial, int], None] | None = None
             ) -> TuneResult:
        """Model top-`top`, then local search around the best (the shared `search`)."""
        return search(self, budget, seconds, top, patience, progress)

    def confirm(self, out: TuneResult) -> None:
        """The shared confirmation round over this session's configs."""
        confirm_round(self, out, lambda cfg: emit(self.op, dict(cfg), self.target, self.sizes),
                      parse_pattern_key)

    def close(self) -> None:
        if self.own_worker and self.worker is not None:
            self.worker.close()


def tuned_pattern_config(op, sizes: dict, target, budget: int = 6) -> dict | None:
    """The best recorded config of a non-GEMM op, tuning with a small budget when none is."""
    session = PatternTuningSession(op, sizes, target)
    try:
        row = session.db.best(session.key)
        if row is not None:
            return dict(parse_pattern_key(row["config"]))
        result = session.tune(budget=budget)
        return dict(result.best) if result.best is not None else None
    finally:
        session.close()
