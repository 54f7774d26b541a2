"""Knob spaces for the Studio's knob panel: legal values per knob, and the constraint forbidding the rest.

The C backend's space is the ACG GEMM space (`uol_core.acg.space`, solved once per op, target
and sizes, then cached: re-solving takes about a second and a knob change must not). Triton
knobs are the backend's launch constants with the target limits they must respect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Rule:
    """A named constraint: the formula a person reads and its predicate over a config dict."""

    name: str
    formula: str
    check: Any  # callable(cfg: dict) -> bool

    def holds(self, cfg: dict) -> bool:
        try:
            return bool(self.check(cfg))
        except (KeyError, TypeError, ZeroDivisionError):
            return True  # a rule about knobs this kernel lacks does not apply


@dataclass
class KnobSpace:
    """Domains per knob, the rules, and the default (first legal, or the compiler's pick)."""

    backend: str
    domains: dict[str, list]
    rules: list[Rule]
    default: dict[str, Any]
    acg: Any = None  # the ACG Space (C backend), for explanations
    model: Any = None  # the ACG cost model (C backend)
    legal_count: int = 0
    notes: list[str] = field(default_factory=list)

    def violated(self, cfg: dict) -> list[Rule]:
        """Rules that `cfg` breaks."""
        return [r for r in self.rules if not r.holds(cfg)]

    def legal_values(self, name: str) -> list:
        """The values knob `name` may take: its domain, or for a derived knob (the C backend's
        nc) the values it takes across the legal configs."""
        if name in self.domains:
            return list(self.domains[name])
        if self.acg is not None and self.acg.configs:
            return sorted({getattr(c, name) for c in self.acg.configs if hasattr(c, name)})
        return [self.default[name]]

    def resolve(self, config: dict) -> dict:
        """Default config with the user's knob values on top (unknown keys dropped); a value
        outside its knob's legal list raises ValueError before anything is built or run."""
        cfg = dict(self.default)
        for key, value in (config or {}).items():
            if key not in cfg or value is None:
                continue
            kind = type(cfg[key])
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(f"knob {key}={value!r} is not an integer")
            try:  # a client can post anything: only the legal values reach the generator
                cfg[key] = str(value) if kind is str else kind(value)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"knob {key}={value!r} is not a {kind.__name__}") from None
            legal = self.legal_values(key)
            if cfg[key] not in legal:
                shown = legal if len(legal) <= 12 else [*legal[:6], "...", *legal[-3:]]
                raise ValueError(f"knob {key}={cfg[key]!r} is not one of its legal values "
                                 f"{shown}")
        return cfg

    def knob_rows(self, cfg: dict, source_text: str = "") -> list[dict]:
        """Per knob: current value and options; an option that breaks a rule is disabled, with why."""
        rows = []
        for name, domain in self.domains.items():
            if len(domain) < 2 or (self.backend == "triton" and source_text
                                   and name.startswith("BLOCK") and name not in source_text):
                continue  # fixed by the target, or unused by this kernel
            options = []
            for value in domain:
                broken = self.violated({**cfg, name: value})
                reason = "; ".join(f"{r.name}: {r.formula}" for r in broken)
                options.append({"value": value, "disabled": bool(broken), "reason": reason})
            rows.append({"name": name, "value": cfg.get(name), "options": options})
        return rows


def _c_space(odl: str, target: str, sizes: dict[str, int]) -> KnobSpace:
    from uol_core import parse
    from uol_core.acg.cost_model import CostModel
    from uol_core.acg.lower import lower_contraction
    from uol_core.acg.space import build_space
    from uol_core.hfl import load_target

    tgt = load_target(target)
    plan = lower_contraction(parse(odl), sizes)
    space = build_space(plan, tgt)
    model = CostModel(plan, tgt)
    rules = [Rule(c.name, c.formula, lambda cfg, c=c: c.predicate(*(cfg[v] for v in c.variables)))
             for c in space.constraints]
    if not space.configs:
        raise ValueError(f"no legal C config for {plan.op.name} on {target}: every assignment "
                         f"breaks a constraint ({', '.join(r.name for r in rules)})")
    # the cost model's top pick is what `uol_core.compile` builds with config=None
    pick = model.rank(space.configs)[0][0]
    knobs = KnobSpace("c", space.domains, rules, pick.to_dict(), space, len(space.configs))
    knobs.model = model
    return knobs


TRITON_DOMAINS = {
    "BLOCK": [32, 64, 128, 256, 512, 1024],
    "BLOCK_R": [8, 16, 32, 64, 128],
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [1, 4, 8],
    "num_warps": [1, 2, 4, 8, 16],
    "num_stages": [1, 2, 3, 4],
}


def _triton_space(odl: str, target: str, sizes: dict[str, int]) -> KnobSpace:
    from uol_core.backends.triton import DEFAULTS
    from uol_core.hfl import load_target

    tgt = load_target(target)
    smem = tgt.smem_per_block_optin_bytes or tgt.smem_per_block_bytes or 96 * 1024
    threads = tgt.max_threads_per_block or 1024
    warp = tgt.warp_size or 32
    regs = tgt.registers_per_sm or 65536
    rules = [
        Rule("shared memory", f"(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 4 B * num_stages <= {smem} B",
             lambda c: (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * 4
             * c["num_stages"] <= smem),
        Rule("threads per block", f"num_warps * {warp} <= {threads}",
             lambda c: c["num_warps"] * warp <= threads),
        Rule("registers", f"BLOCK_M*BLOCK_N accumulators / (num_warps*{warp}) <= 255 per thread "
             f"and <= {regs} per SM", lambda c: c["BLOCK_M"] * c["BLOCK_N"]
             / (c["num_warps"] * warp) <= 255 and c["BLOCK_M"] * c["BLOCK_N"] <= regs),
        Rule("work per warp", "BLOCK >= 32 * num_warps (every lane gets an element)",
             lambda c: c["BLOCK"] >= warp * c["num_warps"]),
    ]
    default = {k: v for k, v in DEFAULTS.items() if k in TRITON_DOMAINS}
    count = math.prod(len(v) for v in TRITON_DOMAINS.values())
    return KnobSpace("triton", dict(TRITON_DOMAINS), rules, default, None, count)


@lru_cache(maxsize=32)
def space_for(odl: str, backend: str, target: str, sizes: tuple) -> KnobSpace:
    """The knob space of an op, cached by (text, backend, target, sizes)."""
    builder = _c_space if backend == "c" else _triton_space
    return builder(odl, target, dict(sizes))


def explain(space: KnobSpace, cfg: dict, op, sizes: dict[str, int], target) -> str:
    """Why this config: the rules that bind it, the roofline bound, and HFL facts with provenance."""
    from uol_core import op_cost
    from uol_core.hfl.roofline import roofline

    lines = [f"{op.name} on {target.name} ({space.backend} backend), sizes "
             + ", ".join(f"{k}={v}" for k, v in sizes.items()),
             f"legal configs in the space: {space.legal_count}"]
    binding = []
    for name, domain in space.domains.items():
        stops = {r.name for v in domain for r in space.violated({**cfg, name: v})}
        if stops:
            binding.append(f"  {name}={cfg.get(name)}: larger choices stopped by "
                           + ", ".join(sorted(stops)))
    if binding:
        lines.append("binding constraints:")
        lines.extend(binding)
    cost = op_cost(op, sizes)
    try:
        roof = roofline(cost.flops, cost.bytes, target)
        lines.append(f"roofline: {roof.bound}-bound, intensity {roof.intensity:.2f} FLOP/B "
                     f"(ridge {roof.ridge_intensity:.2f}), attainable "
                     f"{roof.attainable_gflops:.1f} GFLOP/s, at best {roof.min_seconds * 1e6:.1f} us")
    except ValueError as exc:
        lines.append(f"roofline: unavailable ({exc})")
    lines.append("HFL facts used:")
    for fname in ("peak_gflops.fp32", "mem_bandwidth_gbps", "l1d_bytes", "l2_bytes",
                  "vector_registers", "cores"):
        try:
            prov = target.provenance(fname)
        except KeyError:
            continue
        base, _, sub = fname.partition(".")
        value = getattr(target, base)
        lines.append(f"  {fname} = {value[sub] if sub else value}  [{prov}]")
    return "\n".join(lines)
