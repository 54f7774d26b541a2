"""Knob spaces for the Studio's knob panel: legal values per knob, and the constraint forbidding the rest.

The panel renders whatever `Space` (uol_core.acg.space_core) the op's backend gives through
the registry: the C GEMM's tile space, the C pattern space (softmax, norms, conv, ...), the
Triton tile space. It is solved once per op, backend, target and sizes, then cached:
re-solving can take a second and a knob change must not.

A derived knob (the C GEMM's nc, `uol_core.backends.c.gemm.space.block_nc` of kc, nr, par and
threads) is not searched and has no panel row: its legal values are the ones it takes across
the legal configs, and a config that does not give it gets the value derived from its own knobs.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from uol_core.acg.space_core import Constraint, Space

DERIVED_KNOBS = frozenset({"nc"})  # follow the other knobs: a config carried over drops them


@dataclass
class KnobPanel:
    """The panel's view of the op's `Space` (uol_core.acg.space_core): the backend, the model's
    default config, the Studio-only knobs (`extra`: offered, never searched), the notes. The
    space answers for domains (scoped: the C GEMM's nr is counted in vector lanes, so an
    AVX-512 config has other nr values than an AVX2 one), violations and derived knobs."""

    backend: str
    acg: Space
    default: dict[str, Any]
    model: Any = None  # the ACG cost model (C GEMMs), for explanations
    notes: list[str] = field(default_factory=list)
    extra: dict[str, list] = field(default_factory=dict)  # Studio-only knob -> its values
    # the backend names its knobs in the kernel text: a knob absent from it is unused there
    hide_unused: bool = False
    # (knob, the other knobs' values) -> whether every legal value emits the same kernel
    inert_cache: dict = field(default_factory=dict, repr=False)

    @property
    def domains(self) -> dict[str, list]:
        """Every knob with a panel row: the space's searched knobs, then the Studio's own."""
        return {**self.acg.domains, **self.extra}

    @property
    def legal_count(self) -> int:
        return len(self.acg.configs)

    @property
    def derived(self) -> dict[str, list]:
        """Derived knob -> the values it takes across the legal configs (the C GEMM's nc)."""
        return self.acg.derived

    def domain(self, name: str, cfg: dict | None = None) -> list:
        """Knob `name`'s domain, the one of `cfg`'s scope (its isa) where that differs."""
        if name in self.extra:
            return list(self.extra[name])
        return self.acg.domain(name, cfg)

    def violated(self, cfg: dict) -> list[Constraint]:
        """The space's constraints that `cfg` breaks."""
        return self.acg.violated(cfg)

    def legal_values(self, name: str, cfg: dict | None = None) -> list:
        """The values knob `name` may take (in `cfg`'s scope): its domain, or for a derived
        knob (the C backend's nc) the values it takes across the legal configs. A config
        given by hand may break the space's other constraints (they cost speed, not
        correctness): the panel marks those values, the compile keeps them."""
        if name in self.domains:
            return self.domain(name, cfg)
        if name in self.derived:
            return self.acg.legal_values(name)
        return [self.default[name]]

    def resolve(self, config: dict) -> dict:
        """Default config with the user's knob values on top (unknown keys dropped); a value
        outside its knob's legal list raises ValueError before anything is built or run.
        A derived knob the config does not give is derived from the resolved knobs."""
        config = config or {}
        cfg = dict(self.default)
        if self.acg.derive is not None:
            searched = {k: v for k, v in config.items() if k not in self.derived}
            cfg.update(self.acg.derive(self._checked(cfg, searched)))
        return self._checked(cfg, config)

    def _checked(self, base: dict, config: dict) -> dict:
        cfg = dict(base)
        given = [key for key, value in config.items() if key in cfg and value is not None]
        for key in given:
            value, kind = config[key], type(cfg[key])
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(f"knob {key}={value!r} is not an integer")
            try:  # a client can post anything: only the legal values reach the generator
                cfg[key] = str(value) if kind is str else kind(value)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"knob {key}={value!r} is not a {kind.__name__}") from None
        for key in given:  # once every value is in: a scoped domain needs the final isa
            legal = self.legal_values(key, cfg)
            if cfg[key] not in legal:
                shown = legal if len(legal) <= 12 else [*legal[:6], "...", *legal[-3:]]
                raise ValueError(f"knob {key}={cfg[key]!r} is not one of its legal values "
                                 f"{shown}")
        return cfg

    def unoffered(self, cfg: dict, source_text: str, emit_text: Any = None) -> list[dict]:
        """Knobs with a choice in the space that change nothing in this kernel, each with why:
        not named in its text (where the backend names its knobs there), or, given
        `emit_text(cfg) -> kernel text`, every legal value emits the same kernel as `cfg`."""
        out = []
        for name in self.domains:
            domain = self.domain(name, cfg)
            if len(domain) < 2:
                continue  # fixed by the target: not a choice
            if self.hide_unused and source_text and name not in source_text:
                out.append({"name": name, "reason": "not used by this kernel"})
                continue
            legal = [v for v in domain if not self.violated({**cfg, name: v})]
            if emit_text is not None and len(legal) > 1 and \
                    self._inert(name, legal, cfg, source_text, emit_text):
                shown = ", ".join(map(str, legal[:8])) + (", ..." if len(legal) > 8 else "")
                out.append({"name": name, "reason": f"every legal value ({shown}) emits the "
                                                    "same kernel"})
        return out

    def _inert(self, name: str, legal: list, cfg: dict, source_text: str, emit_text) -> bool:
        key = (name, tuple(sorted((k, str(v)) for k, v in cfg.items() if k != name)))
        if key not in self.inert_cache:
            def same(value) -> bool:
                try:
                    return emit_text({**cfg, name: value}) == source_text
                except Exception:  # a value the emitter refuses differs from this kernel
                    return False
            self.inert_cache[key] = all(same(v) for v in legal if v != cfg.get(name))
        return self.inert_cache[key]

    def knob_rows(self, cfg: dict, source_text: str = "", skip: frozenset = frozenset()
                  ) -> list[dict]:
        """Per knob: current value and options; an option that breaks a rule is disabled, with
        why. Knobs in `skip` (see `unoffered`) get no row."""
        rows = []
        for name in self.domains:
            domain = self.domain(name, cfg)
            if len(domain) < 2 or name in skip or \
                    (self.hide_unused and source_text and name not in source_text):
                continue  # fixed by the target, or unused by this kernel
            options = []
            for value in domain:
                broken = self.violated({**cfg, name: value})
                reason = "; ".join(f"{r.name}: {r.formula}" for r in broken)
                options.append({"value": value, "disabled": bool(broken), "reason": reason})
            rows.append({"name": name, "value": cfg.get(name), "options": options})
        return rows


def _space(odl: str, backend: str, target: str, sizes: dict[str, int]) -> KnobPanel:
    """The panel's view of the Space the backend solves for the op (any pattern, any target)."""
    from app.services.kernels import _parse  # the compile's own Op: caches keyed by it hit
    from uol_core.acg.space_core import as_mapping
    from uol_core.backends import get_backend

    chosen = get_backend(backend, target)
    plan = chosen.plan(_parse(odl), sizes, target)
    choice = chosen.choose(plan, None)  # the model's pick: what `uol_core.compile` builds
    space = choice.space
    if not space.configs:
        raise ValueError(f"no legal {chosen.name} config for {plan.op.name} on {target}: every "
                         "assignment breaks a constraint ("
                         f"{', '.join(c.name for c in space.constraints)})")
    knobs = KnobPanel(chosen.name, space, dict(as_mapping(choice.config)), choice.model,
                      [*space.notes, *choice.notes],
                      hide_unused=bool(getattr(chosen, "knobs_named_in_source", False)))
    _offer_streaming(knobs, chosen, plan)
    return knobs


def _offer_streaming(knobs: KnobPanel, chosen, plan) -> None:
    """A C kernel that can write its large output with non-temporal stores gets a `stream`
    knob (0: ordinary stores, the default). The tuner does not search it: it pays only for an
    output written in place (acg/stores.py), and a tuning run cannot tell how the kernel's
    callers will allocate. Offered where stream=1 emits another kernel."""
    if chosen.name != "c" or plan.kind == "gemm" or "stream" in knobs.domains:
        return
    base = dict(knobs.default)
    try:
        differs = (chosen.emit(plan, {**base, "stream": 1}).text
                   != chosen.emit(plan, {**base, "stream": 0}).text)
    except Exception:  # a kernel that cannot be emitted offers nothing more
        return
    if differs:
        knobs.extra["stream"] = [0, 1]
        knobs.default["stream"] = 0
        knobs.notes.append("stream: 1 writes the output with non-temporal stores, for an output "
                           "written in place (not searched by the tuner)")


@lru_cache(maxsize=32)
def space_for(odl: str, backend: str, target: str, sizes: tuple) -> KnobPanel:
    """The knob space of an op, cached by (text, backend, target, sizes)."""
    return _space(odl, backend, target, dict(sizes))


def explain(space: KnobPanel, cfg: dict, op, sizes: dict[str, int], target) -> str:
    """Why this config, as text (spaces without a cost model; the C GEMM's has its own):
    `uol_core.acg.explain.explain_space`'s binding rules and roofline, with the backend, the
    model's notes and the HFL facts with their provenance."""
    # loaded for an explanation only: the panel's knob changes need none of them
    from uol_core.acg.explain import explain_space
    from uol_core.hfl.roofline import peak_key
    from uol_core.odl.cost import peak_dtype

    why = explain_space(op, sizes, target, space.acg, cfg)
    lines = [f"{op.name} on {target.name} ({space.backend} backend), sizes "
             + ", ".join(f"{k}={v}" for k, v in sizes.items()),
             f"legal configs in the space: {why.legal_configs}"]
    if why.binding:
        lines.append("binding constraints:")
        lines.extend(f"  {line}" for line in why.binding)
    if why.violated:
        lines.append("violated (config given by hand):")
        lines.extend(f"  {line}" for line in why.violated)
    if space.notes:
        lines.append("model notes:")
        lines.extend(f"  {note}" for note in space.notes)
    roof = why.roofline
    peak = peak_key(target, peak_dtype(op))  # a bf16 GEMM is held to the bf16 peak
    if "intensity" in roof:
        lines.append(f"roofline: {roof['bound']}-bound, intensity {roof['intensity']:.2f} FLOP/B "
                     f"(ridge {roof['ridge_intensity']:.2f}), attainable "
                     f"{roof['attainable_gflops']:.1f} GFLOP/s ({roof['dtype']} peak), at best "
                     f"{roof['min_seconds'] * 1e6:.1f} us")
    else:
        lines.append(f"roofline: unavailable ({roof.get('bound', '')})")
    lines.append("HFL facts used:")
    for fname in (f"peak_gflops.{peak}", "mem_bandwidth_gbps", "l1d_bytes", "l2_bytes",
                  "vector_registers", "cores"):
        try:
            prov = target.provenance(fname)
        except KeyError:
            continue
        base, _, sub = fname.partition(".")
        value = getattr(target, base)
        lines.append(f"  {fname} = {value[sub] if sub else value}  [{prov}]")
    return "\n".join(lines)
