"""Explanations of a chosen kernel: binding constraints, roofline bound and fraction achieved,
model vs measured rank, the HFL facts used (with provenance). `explain_space` explains a config
of any `Space`; the C GEMM's own explanation (its cost model, tile picture) is
`uol_core/backends/c/gemm/explain.py`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from uol_core.hfl.roofline import peak_key, roofline
from uol_core.odl.cost import op_cost, peak_dtype


@dataclass
class Explanation:
    """Everything a user needs to see why this kernel is what it is."""

    op: str
    sizes: dict
    config: dict
    binding: list[str] = field(default_factory=list)  # constraints and resources near their limit
    violated: list[str] = field(default_factory=list)
    roofline: dict = field(default_factory=dict)
    model_rank: int | None = None
    legal_configs: int = 0
    measured: dict = field(default_factory=dict)
    hfl_facts: list[dict] = field(default_factory=list)
    constraints: list[dict] = field(default_factory=list)
    picture: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        """Plain-text report (the CLI prints this; the IDE draws its own)."""
        lines = [f"{self.op} at {', '.join(f'{k}={v}' for k, v in self.sizes.items())}",
                 "config: " + ", ".join(f"{k}={v}" for k, v in self.config.items()),
                 f"model rank: {self.model_rank} of {self.legal_configs} legal configs"]
        lines.append("binding constraints:")
        lines += [f"  - {b}" for b in self.binding] or ["  (none near its limit)"]
        if self.violated:
            lines.append("violated (config given by hand):")
            lines += [f"  - {v}" for v in self.violated]
        r = self.roofline
        lines.append(f"roofline: {r.get('attainable_gflops', 0):.1f} GFLOP/s ({r.get('bound')}"
                     f" bound), model predicts {r.get('predicted_gflops', 0):.1f}")
        if self.measured:
            m = self.measured
            lines.append(f"measured: {m.get('gflops', 0):.1f} GFLOP/s = "
                         f"{100 * m.get('fraction_of_roofline', 0):.0f}% of roofline"
                         + (f", measured rank {m['measured_rank']}" if "measured_rank" in m else ""))
        lines.append("HFL facts used:")
        lines += [f"  {f['field']} = {f['value']}  [{f['provenance']}]" for f in self.hfl_facts]
        lines.append("constraints (assignments removed of the full product):")
        lines += [f"  {c['name']}: {c['formula']}  -> removed {c['removed']}"
                  for c in self.constraints]
        lines.append(self.picture)
        return "\n".join(lines)


def explain_space(op, sizes: dict, target, space, cfg, picture: str = "",
                  measured: dict | None = None) -> Explanation:
    """An Explanation from any `Space` (the GPU tile space, say): the rules that stop each
    knob growing, the constraints with the HFL facts they use, and the op's roofline."""

    cfg = dict(cfg)
    binding = []
    for knob, domain in space.domains.items():
        larger = [v for v in domain if _after(v, cfg.get(knob))]
        stops = {c.name for v in larger[:1] for c in space.violated({**cfg, knob: v})}
        if stops:
            binding.append(f"{knob}={cfg.get(knob)}: larger stopped by {', '.join(sorted(stops))}")
    cost = op_cost(op, sizes)
    try:  # against the peak of the units the op runs on (a bf16 GEMM: the bf16 peak)
        roof = roofline(cost.flops, cost.bytes, target,
                        peak_key(target, peak_dtype(op))).to_dict()
    except (ValueError, AttributeError) as exc:  # a target without peak numbers
        roof = {"bound": f"unknown ({exc})"}
    facts = sorted({f for c in space.constraints for f in c.provenance})
    hfl = [{"field": f, "value": getattr(target, f, None), "provenance": hfl_provenance(target, f)}
           for f in facts]
    return Explanation(op.name, dict(sizes), cfg, binding=binding,
                       violated=[f"{c.name}: {c.formula}" for c in space.violated(cfg)],
                       roofline=roof, legal_configs=len(space.configs),
                       measured=dict(measured or {}), hfl_facts=hfl,
                       constraints=space.report(), picture=picture)


def _after(value, current) -> bool:
    try:
        return value > current
    except TypeError:
        return False


def hfl_provenance(target, name: str) -> str:
    """Where the HFL target's `name` comes from (its source), or "HFL target"."""
    try:
        return str(target.provenance(name))
    except (KeyError, AttributeError):
        return "HFL target"
