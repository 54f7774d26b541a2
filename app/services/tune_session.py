"""The Studio's tuning session for backends without an ACG tuner (Triton): a session of the
shared search (`uol_core.acg.tuner.search`) whose measurements are queued Runs.

Each measurement goes through the same checks and per-client queue as a Run and lands in the
history; the search starts from the current config and configs spread over the space, then
steps one knob at a time around the fastest.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from uol_core.acg.space_core import Config, as_mapping


class TuneStopped(Exception):
    """The user stopped the tune: no further measurement."""


class RunSession:
    """ranked / measure / neighbours over the knob space of one op (see the module docstring)."""

    def __init__(self, space, base: dict | None, budget: int,
                 run: Callable[[dict], dict], stop: Callable[[], bool] | None = None,
                 progress: Callable | None = None, inert: frozenset[str] = frozenset()) -> None:
        self.space, self.budget, self.run = space, budget, run
        self.stop, self.progress = stop, progress
        # knobs that change nothing in this kernel are held at the start's values: measuring
        # their other values would only spend the budget on the same kernel
        self.inert = inert
        self.start = Config(space.resolve(base or {}))
        legal = [Config(as_mapping(c)) for c in (space.acg.configs if space.acg else [])]
        held = [c.replace(**{k: self.start[k] for k in inert if k in c and k in self.start})
                for c in legal]
        legal = [c for c in held if not space.violated(dict(c))]
        self._legal = {_id(c): c for c in legal}
        self.trail: list[dict] = []
        self.best: dict | None = None

    def ranked(self) -> list[tuple[Config, float]]:
        """The current config, then legal configs evenly spaced over the space."""
        picks = [self.start]
        configs = list(self._legal.values())
        step = max(1, len(configs) // max(self.budget - 1, 1))
        picks += configs[::step]
        unique = list({_id(p): p for p in picks}.values())
        return [(c, 0.0) for c in unique]

    def neighbours(self, cfg: Config) -> list[Config]:
        """Legal configs one domain step away in one knob."""
        found = []
        for knob in self.space.domains:
            if knob in self.inert:
                continue
            domain = self.space.domain(knob, cfg)
            if cfg.get(knob) not in domain:
                continue
            i = domain.index(cfg[knob])
            for j in (i - 1, i + 1):
                other = cfg.replace(**{knob: domain[j]}) if 0 <= j < len(domain) else None
                if other is not None and (_id(other) in self._legal or not self._legal) \
                        and not self.space.violated(dict(other)):
                    found.append(self._legal.get(_id(other), other))
        return found

    def measure(self, cfg: Config):
        """One queued Run of `cfg` as a tuner Trial; the trail and the fastest verified run
        are kept here."""
        from uol_core.acg.tuner import Trial

        if self.stop is not None and self.stop():
            raise TuneStopped
        res = self.run(dict(cfg))
        i = len(self.trail) + 1
        self.trail.append({"i": i, "config": dict(cfg), "ok": res.get("ok"),
                           "median_s": res.get("median_s"), "id": res.get("id"),
                           "gflops": res.get("gflops"),
                           "error": res.get("error", "")})
        if res.get("ok") and res.get("median_s") and (
                self.best is None or res["median_s"] < self.best["median_s"]):
            self.best = res
        if self.progress:
            self.progress(i, self.budget, self.trail, self.best)
        # the search only compares trials of one op: 1 / median time orders them as GFLOP/s
        # would, also for an op whose FLOP count is zero (a copy, a gather)
        speed = 1.0 / res["median_s"] if res.get("ok") and res.get("median_s") else 0.0
        return Trial(cfg, 0.0, 0, {"status": "ok" if res.get("ok") else "error",
                                   "gflops": speed})

    def tune(self) -> str:
        """Run the shared search within the budget; why it stopped."""
        from uol_core.acg.tuner import search

        try:
            result = search(self, self.budget, None, top=max(1, self.budget // 2),
                            patience=self.budget)
        except TuneStopped:
            return "stopped"
        return result.stopped


def _id(cfg) -> str:
    """A config's identity whatever the order of its knobs."""
    return json.dumps(dict(cfg), sort_keys=True)
