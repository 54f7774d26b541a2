"""One case of the optimisation guide: a target x an operator family at its typical sizes.

Everything comes from the compiler's contracts: the registry's backend for the target plans
the op, chooses its config from the ACG space and cost model; the case records that config,
whether the space holds it legal, the constraints that stop each knob growing, the roofline
position (HFL peak and bandwidth), the model's predicted time, and what moving one knob one
step would do. A prediction is always labelled as such; a time measured on this host says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlencode

from uol_core.acg.config import TileConfig
from uol_core.acg.space_core import as_mapping
from uol_core.backends import get_backend
from uol_core.backends.c.space import predict_seconds
from uol_core.backends.triton.space import predict
from uol_core.guide.families import Family
from uol_core.hfl.roofline import peak_key, roofline
from uol_core.odl.cost import op_cost, peak_dtype
from uol_core.ops import load_op

PREDICTED = "model-predicted (ACG cost model; not measured)"
ROOFLINE_ONLY = "model-predicted (roofline bound only; this space has no cost model)"
MEASURED = "measured on this host"
MAX_KNOB_CHANGES = 5
MAX_ILLEGAL_MOVES = 2  # of the five, when there are such moves


@dataclass
class GuideCase:
    """One guide entry; JSON-ready through `to_dict`."""

    id: str
    target: str
    target_kind: str
    family: str
    op: str
    sizes: dict
    backend: str
    pattern: str
    config: dict
    legal: bool
    violated: list[str]
    binding: list[str]
    constraints: list[dict]
    roofline: dict
    predicted_s: float | None
    prediction_label: str
    knob_changes: list[dict] = field(default_factory=list)
    measured_s: float | None = None
    measured_label: str = ""
    studio_link: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def studio_link(op: str, target: str, backend: str, sizes: dict, config: dict) -> str:
    """The Studio URL that opens this case's kernel (op, target, backend, sizes, knobs)."""
    query = {"op": op, "target": target, "backend": backend,
             "sizes": ",".join(f"{k}={v}" for k, v in sizes.items()),
             "config": ",".join(f"{k}={v}" for k, v in config.items())}
    return "/?" + urlencode(query)


def build_case(target: Any, fam: Family) -> GuideCase:
    """The case of `fam` on `target` (a resolved HFL Target), from the backend contract."""

    op = load_op(fam.op)
    backend = get_backend("auto", target)
    plan = backend.plan(op, fam.sizes, target)
    choice = backend.choose(plan)
    space = choice.space
    config = {k: v for k, v in dict(as_mapping(choice.config)).items()}
    violated = [f"{c.name}: {c.formula}" for c in space.violated(config)]
    predict = _predictor(plan, choice)
    predicted = predict(config) if predict else None
    roof = _roofline(op, fam.sizes, target)
    label = PREDICTED if predict else ROOFLINE_ONLY
    if predicted is None:
        predicted = roof.get("min_seconds")
    return GuideCase(
        id=f"{target.name}/{fam.name}", target=target.name, target_kind=target.kind,
        family=fam.name, op=fam.op, sizes=dict(fam.sizes), backend=backend.name,
        pattern=plan.kind, config=config, legal=not violated and _in_space(space, config),
        violated=violated, binding=_binding(space, config), constraints=space.report(),
        roofline=roof, predicted_s=predicted, prediction_label=label,
        knob_changes=_knob_changes(space, config, predict, predicted),
        studio_link=studio_link(fam.op, target.name, backend.name, fam.sizes, config),
        note="; ".join(getattr(choice, "notes", []) or getattr(space, "notes", []) or []))


def _predictor(plan: Any, choice: Any):
    """Predicted seconds of a config of this plan's space, or None where no model exists."""

    space, target = choice.space, plan.target
    if choice.model is not None:
        return lambda cfg: choice.model.estimate(TileConfig.from_config(cfg)).seconds
    if space.family == "pattern":
        defaults = {"threads": 1, "chunk": 0, "vec": 0, "fuse": 1}
        return lambda cfg: predict_seconds(plan.op, plan.sizes, target, {**defaults, **cfg})
    problem = space.facts.get("problem") if space.family == "gpu" else None
    if problem and not problem.get("fallback"):
        return lambda cfg: predict(cfg, problem, target)["time_s"]
    return None


def _roofline(op: Any, sizes: dict, target: Any) -> dict:
    """Where the op sits under the target's roofline, held to the peak of the units it runs on."""

    cost = op_cost(op, sizes)
    try:
        roof = roofline(cost.flops, cost.bytes, target, peak_key(target, peak_dtype(op)))
    except ValueError as exc:  # HflError: a target without a peak or a bandwidth
        return {"bound": "unknown", "reason": str(exc)}
    return {"flops": roof.flops, "bytes": roof.bytes_moved, "intensity": roof.intensity,
            "ridge_intensity": roof.ridge_intensity, "bound": roof.bound,
            "attainable_gflops": roof.attainable_gflops, "peak_gflops": roof.peak_gflops,
            "bandwidth_gbps": roof.bandwidth_gbps, "min_seconds": roof.min_seconds}


def _values(cfg: Any) -> dict:
    return dict(as_mapping(cfg))


def _config_key(cfg: Any) -> frozenset:
    return frozenset(_values(cfg).items())


def _in_space(space: Any, config: dict) -> bool:
    """Whether the space's solver produced `config` (compared on the searched knobs: a
    backend may add fixed or derived ones to what it builds)."""
    knobs = list(space.domains)
    keys = {_config_key({k: _values(c).get(k) for k in knobs}) for c in space.configs}
    return _config_key({k: config.get(k) for k in knobs}) in keys


def _neighbours(space: Any, config: dict, knob: str) -> list:
    domain = space.domain(knob, config)
    if config.get(knob) not in domain:
        return []
    i = domain.index(config[knob])
    return [domain[j] for j in (i - 1, i + 1) if 0 <= j < len(domain)]


def _binding(space: Any, config: dict) -> list[str]:
    """Per knob: the constraints that stop it taking its next larger value."""
    out = []
    for knob in space.domains:
        domain = space.domain(knob, config)
        if config.get(knob) not in domain:
            continue
        i = domain.index(config[knob])
        if i + 1 >= len(domain):
            continue
        stops = sorted({c.name for c in space.violated({**config, knob: domain[i + 1]})})
        if stops:
            out.append(f"{knob}={config[knob]}: {domain[i + 1]} breaks {', '.join(stops)}")
    return out


def _knob_changes(space: Any, config: dict, predict, base_s: float | None) -> list[dict]:
    """One-step moves of each knob: illegal ones name the constraint, legal ones the model's
    predicted time and its ratio to the chosen config's (> 1: slower)."""
    knobs = list(space.domains)
    legal_keys = {_config_key({k: _values(c).get(k) for k in knobs}) for c in space.configs}
    moves = []
    for knob in space.domains:
        for value in _neighbours(space, config, knob):
            changed = {**config, knob: value}
            broken = sorted({c.name for c in space.violated(changed)})
            row = {"knob": knob, "from": config[knob], "to": value}
            if broken:
                moves.append({**row, "legal": False, "why": "breaks " + ", ".join(broken)})
            elif (_config_key({k: changed.get(k) for k in knobs}) in legal_keys and predict
                  and base_s):
                seconds = predict(changed)
                moves.append({**row, "legal": True, "predicted_s": seconds,
                              "ratio": seconds / base_s, "label": PREDICTED})
    # the most telling: the largest predicted changes, then moves a constraint forbids
    legal = sorted((m for m in moves if m["legal"]), key=lambda m: -abs(m["ratio"] - 1.0))
    illegal = [m for m in moves if not m["legal"]]
    keep = min(len(legal), MAX_KNOB_CHANGES - min(len(illegal), MAX_ILLEGAL_MOVES))
    return legal[:keep] + illegal[:MAX_KNOB_CHANGES - keep]
