"""Tuning for any registered backend that has no tuner of its own (Triton): the shared search
(`acg.tuner.search`) over the backend's own Space.

The backend plans, gives its space and its model's pick, emits and loads; each config is
verified against the reference evaluator and then timed with the backend's benchmark. Without a
GPU a Triton kernel runs under the interpreter, where a time says nothing about a GPU: such
configs are verified and recorded with the reason, never ranked by time, so the model's pick
stands. Every result is written to the tuning database at once, under a key that names the
backend's generator hash.
"""

from __future__ import annotations

from collections.abc import Callable

from uol_core.acg.config import resolve_target
from uol_core.acg.space_core import Config, as_mapping
from uol_core.acg.tuner import Trial, TuneResult, generator_id, search, tuning_key
from uol_core.odl.cost import op_cost
from uol_core.runtime.tuningdb import TuningDB


class BackendSession:
    """ranked / measure / neighbours over one backend's space for one op at bound sizes."""

    def __init__(self, op, sizes: dict, target="host", backend: str = "triton",
                 db: TuningDB | None = None, replay: bool = False, seed: int = 0) -> None:
        from uol_core.backends import get_backend

        self.op, self.sizes, self.seed = op, dict(sizes), seed
        self.target = resolve_target(target)
        self.backend = get_backend(backend, self.target)
        self.plan = self.backend.plan(op, self.sizes, self.target)
        self.space = self.backend.space(op, self.sizes, self.target)
        self.db, self.replay = db or TuningDB(), replay
        self.flops = op_cost(op, self.sizes).flops
        chosen = as_mapping(self.backend.choose(self.plan).config)
        # the model's pick, as the space's knobs (the emitter's other defaults are not knobs)
        pick = Config({k: v for k, v in chosen.items() if k in self.space.domains})
        configs = [Config(as_mapping(c)) for c in self.space.configs]
        self._legal = {c.key(): c for c in configs}
        # the model's pick first, then the space in its own order (best predicted first where
        # the backend ranks it)
        self._ranked = [(c, 0.0) for c in {c.key(): c for c in (pick, *configs)}.values()]
        self._rank = {c.key(): i + 1 for i, (c, _) in enumerate(self._ranked)}
        self.key = tuning_key(op, self.sizes, self.target,
                              generator_id(self.backend.name, backend=self.backend.name))
        self._inputs = self._expected = None

    def ranked(self) -> list[tuple[Config, float]]:
        return self._ranked

    def neighbours(self, cfg: Config) -> list[Config]:
        """Legal configs one domain step away in one knob, in the space's order."""
        found = []
        for knob, domain in self.space.domains.items():
            if cfg.get(knob) not in domain:
                continue
            i = domain.index(cfg[knob])
            for j in (i - 1, i + 1):
                other = self._legal.get(cfg.replace(**{knob: domain[j]}).key()) \
                    if 0 <= j < len(domain) else None
                if other is not None:
                    found.append(other)
        return sorted(found, key=lambda c: self._rank.get(c.key(), 1 << 30))

    def measure(self, cfg: Config) -> Trial:
        """From the database when known, else emitted, loaded, verified and benchmarked."""
        rank = self._rank.get(cfg.key(), 0)
        row = self.db.lookup(self.key, cfg.key())
        if row is not None:
            return Trial(cfg, 0.0, rank, row, from_db=True)
        if self.replay:
            return Trial(cfg, 0.0, rank, {"status": "missing",
                                          "reason": "not in the database (replay mode)"},
                         from_db=True)
        result = self._run(cfg)
        result.update(predicted_gflops=0.0, model_rank=rank)
        self.db.record(self.key, cfg.key(), result)  # at once: a killed tuner loses nothing
        return Trial(cfg, 0.0, rank, result)

    def _run(self, cfg: Config) -> dict:
        from uol_core.runtime.inputs import random_inputs
        from uol_core.runtime.reference import evaluate_all
        from uol_core.runtime.verify import compare

        if self._inputs is None:
            self._inputs = random_inputs(self.op, self.sizes, seed=self.seed)
            self._expected = evaluate_all(self.op, self._inputs)
        try:
            source = self.backend.emit(self.plan, dict(cfg))
            kernel = self.backend.load(source, self.plan)
            verdict = compare(kernel.run_with(self._inputs), self._expected,
                              int(source.meta.get("reduction_length", 1) or 1))
        except Exception as exc:  # a config that fails to build or run is a result too
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        if not verdict.ok:
            return {"status": "wrong", "reason": str(verdict)}
        note = getattr(kernel, "timing_note", "")
        times = [] if note else kernel.bench(self._inputs)
        if not times:
            return {"status": "verified", "reason": f"verified; not timed ({note or 'no timer'})"}
        median = sorted(times)[len(times) // 2]
        return {"status": "ok", "median_s": median,
                "gflops": self.flops / median / 1e9 if self.flops else 1.0 / median}

    def tune(self, budget: int | None = 8, seconds: float | None = None, top: int = 3,
             patience: int = 3, progress: Callable[[Trial, int], None] | None = None
             ) -> TuneResult:
        """The model's pick and the next configs, then steps around the fastest."""
        result = search(self, budget, seconds, top, patience, progress)
        if result.best is None and any(t.result.get("status") == "verified"
                                       for t in result.trials):
            result.stopped = ("verified under the interpreter, not timed (no GPU here): "
                              "the model's pick stands")
        return result

    def close(self) -> None:
        """Nothing to release: kernels run in this process."""
