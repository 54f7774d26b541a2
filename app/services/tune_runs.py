"""The Studio's tune of a backend whose measurements it queues as Runs (Triton): the one tuning
session (`uol_core.acg.session.Session`) with a runner that queues each config as a Run.

Each measurement goes through the same checks and per-client queue as a Run and lands in the
history; the session's `Spread` ranking starts from the current config and configs spread over
the space, then steps one knob at a time around the fastest. What stays here is presentation:
the trail of measurements, the fastest verified run, and the progress callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from uol_core.acg.session import Session
from uol_core.acg.space_core import Config, as_mapping
from uol_core.acg.tuning_models import Spread


class TuneStopped(Exception):
    """The user stopped the tune: no further measurement."""


class QueuedRuns:
    """A session's runner: one queued Run per config; keeps the trail and the fastest run."""

    def __init__(self, run: Callable[[dict], dict], budget: int,
                 stop: Callable[[], bool] | None = None, progress: Callable | None = None) -> None:
        self.run_config, self.budget, self.stop, self.progress = run, budget, stop, progress
        self.trail: list[dict] = []
        self.best: dict | None = None

    def run(self, cfg: Config) -> dict:
        """One queued Run of `cfg` as a result row; the trail and the best are kept here."""
        if self.stop is not None and self.stop():
            raise TuneStopped
        res = self.run_config(dict(cfg))
        i = len(self.trail) + 1
        self.trail.append({"i": i, "config": dict(cfg), "ok": res.get("ok"),
                           "median_s": res.get("median_s"), "id": res.get("id"),
                           "gflops": res.get("gflops"), "error": res.get("error", "")})
        if res.get("ok") and res.get("median_s") and (
                self.best is None or res["median_s"] < self.best["median_s"]):
            self.best = res
        if self.progress:
            self.progress(i, self.budget, self.trail, self.best)
        # the search only compares trials of one op: 1 / median time orders them as GFLOP/s
        # would, also for an op whose FLOP count is zero (a copy, a gather)
        speed = 1.0 / res["median_s"] if res.get("ok") and res.get("median_s") else 0.0
        if res.get("ok") and not speed:  # verified with nothing to time it (Triton, no GPU)
            return {"status": "verified", "gflops": 0.0,
                    "reason": f"verified; not timed ({res.get('mode') or 'no timer'})"}
        return {"status": "ok" if res.get("ok") else "error", "gflops": speed}


def queued_session(space: Any, base: dict | None, budget: int, run: Callable[[dict], dict],
                   stop: Callable[[], bool] | None = None, progress: Callable | None = None,
                   inert: frozenset[str] = frozenset()) -> Session:
    """The session over the knob space `space` (app.services.knobs) measured by queued Runs.

    Knobs that change nothing in this kernel (`inert`) are held at the start's values:
    measuring their other values would only spend the budget on the same kernel."""
    start = Config(space.resolve(base or {}))
    legal = [Config(as_mapping(c)) for c in (space.acg.configs if space.acg else [])]
    held = [c.replace(**{k: start[k] for k in inert if k in c and k in start}) for c in legal]
    legal = [c for c in held if not space.violated(dict(c))]
    searched = replace(space.acg, configs=legal)
    return Session(space.backend, searched, QueuedRuns(run, budget, stop, progress),
                   model=Spread(start, budget))


def tune_queued(session: Session) -> str:
    """Run the shared search within the runner's budget; why it stopped."""
    budget = session.runner.budget
    try:
        result = session.tune(budget, None, top=max(1, budget // 2), patience=budget)
    except TuneStopped:
        return "stopped"
    return result.stopped
