"""The rankings a tuning session follows: each orders a space's legal configs, predicts a config's
GFLOP/s, and reads a config back from its database key. The backend picks one per plan
(`Backend.tuning_model`); the session (acg/session.py) is the same for all of them.

- (the C backend's own models sit beside their spaces: `GemmModel`, the GEMM's cost model
  corrected by measurements, in `uol_core/backends/c/gemm/cost_model.py`; `PatternModel`, the
  pattern kernels' roofline, in `uol_core/backends/c/space.py`);
- `PickFirst`: a backend's own pick, then its space in order, no predictions (Triton);
- `Spread`: a given start, then configs spread evenly over the space (the Studio's tune of a
  backend whose runs it queues itself).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

from uol_core.acg.space_core import Config, as_mapping, parse_key


class TuningModel:
    """The space's own order and no predictions; the base every ranking refines.

    `defaults`: the search's budget, top and patience when a caller gives none; `flops`: the
    op's work, to rate a kernel the runner does not rate (0: the runner's own GFLOP/s);
    `ranks`: whether the order is a ranking (a config's `model_rank`, neighbours sorted by it);
    `learns`: whether measurements correct the model after the first ones."""

    defaults: tuple[int, int, int] = (8, 3, 3)
    flops: float = 0.0
    ranks: bool = True
    learns: bool = False

    def rank(self, configs: list) -> list[tuple[Any, float]]:
        """Configs in the order to try them, each with its predicted GFLOP/s."""
        return [(c, 0.0) for c in configs]

    def estimate(self, cfg: Any) -> float:
        """Predicted GFLOP/s of one config (0: no prediction)."""
        return 0.0

    def learn(self, measured: list[tuple[Any, float]]) -> None:
        """Correct the model with (config, measured GFLOP/s) pairs; most models learn nothing."""

    def parse(self, text: str) -> Any:
        """A config from its database key."""
        return parse_key(text)

    def identity(self, cfg: Any) -> Hashable:
        """What tells two configs apart in the space (derived knobs left out)."""
        return cfg.key()

    family = None  # or a function config -> what the first measurements spread over


class PickFirst(TuningModel):
    """A backend's model pick first, then its space in its own order (best predicted first
    where the backend ranks it); no predictions. `flops` rates what the runner times."""

    def __init__(self, pick: Mapping[str, Any], knobs: Mapping[str, list],
                 flops: float = 0.0) -> None:
        # the model's pick, as the space's knobs (the emitter's other defaults are not knobs)
        self.pick = Config({k: v for k, v in as_mapping(pick).items() if k in knobs})
        self.flops = flops

    def rank(self, configs: list) -> list[tuple[Any, float]]:
        unique = {c.key(): c for c in (self.pick, *configs)}
        return [(c, 0.0) for c in unique.values()]


class Spread(TuningModel):
    """A start config, then legal configs evenly spaced over the space (`budget` of them in all);
    not a ranking: neighbours keep the space's order."""

    ranks = False

    def __init__(self, start: Config, budget: int) -> None:
        self.start, self.budget = start, budget

    def rank(self, configs: list) -> list[tuple[Any, float]]:
        step = max(1, len(configs) // max(self.budget - 1, 1))
        unique = {identity(p): p for p in [self.start, *configs[::step]]}
        return [(c, 0.0) for c in unique.values()]

    def identity(self, cfg: Any) -> Hashable:
        return identity(cfg)


def identity(cfg: Any) -> str:
    """A config's identity whatever the order of its knobs."""
    return json.dumps(dict(as_mapping(cfg)), sort_keys=True)
