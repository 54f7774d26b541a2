"""The one search-space contract: named constraints over knobs, their domains, and a frozen Config.

Every space (the C GEMM's, the C patterns', the GPU tile space) is one `Space`: knobs with
domains, `Constraint`s (a name, the formula a person reads with the target's numbers filled
in, the knobs it reads, the test, and the HFL facts it uses), and the legal configs. The IDE's
knob panel, the tuner and the explanations read only this, whatever the backend or pattern.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any


class Config(dict):
    """One point of a space: knob name -> value, frozen and hashable, with a stable `key()`.

    A dict subclass so that it serialises as JSON and spreads with `**` like any mapping;
    every mutating method raises, so a config used as a set member or cache key stays put.
    """

    def key(self) -> str:
        """Stable text key (tuning database column, cache names): 'k=v,...' in knob order."""
        return ",".join(f"{k}={v}" for k, v in self.items())

    def to_dict(self) -> dict:
        return dict(self)

    def replace(self, **changes: Any) -> Config:
        return Config({**self, **changes})

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self.key())

    def _frozen(self, *_: Any, **__: Any):
        raise TypeError("a Config is frozen: use cfg.replace(knob=value)")

    __setitem__ = __delitem__ = _frozen  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]
    __ior__ = _frozen  # type: ignore[assignment]


def parse_key(text: str, kinds: Mapping[str, type] | None = None) -> Config:
    """'threads=2,chunk=0' -> Config; values are ints unless `kinds` names another type."""
    out = {}
    for part in (p for p in text.replace(" ", ",").split(",") if p):
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"bad config item '{part}': write key=value, e.g. chunk=4")
        kind = (kinds or {}).get(name.strip(), int)
        try:
            out[name.strip()] = kind(value)
        except ValueError:
            raise ValueError(f"config {name.strip()} must be {kind.__name__}, got '{value}'") \
                from None
    return Config(out)


def as_mapping(cfg: Any) -> Mapping[str, Any]:
    """A config's knob values: a mapping as is, a typed view (TileConfig) through to_dict()."""
    return cfg if isinstance(cfg, Mapping) else cfg.to_dict()


@dataclass(frozen=True)
class Constraint:
    """One named restriction of a space.

    `test` takes the values of `variables` by position; `formula` is what a person reads;
    `provenance` names the HFL fields whose numbers the formula uses; `when` limits the rule
    to configs with those knob values (the AVX2 register rule applies to AVX2 configs only);
    `removed` counts the assignments of the full product this rule alone rejects.
    """

    name: str
    formula: str
    variables: tuple[str, ...]
    test: Callable[..., bool] = field(compare=False, repr=False)
    provenance: tuple[str, ...] = ()
    when: tuple[tuple[str, Any], ...] = ()
    removed: int = 0

    def applies(self, cfg: Mapping[str, Any]) -> bool:
        return all(cfg.get(k, v) == v for k, v in self.when)

    def holds(self, cfg: Any) -> bool:
        """Whether `cfg` meets the rule (a rule about knobs the config lacks does not apply)."""
        values = as_mapping(cfg)
        if not self.applies(values) or any(v not in values for v in self.variables):
            return True
        return bool(self.test(*(values[v] for v in self.variables)))

    @property
    def scope(self) -> str:
        """The knob values the rule is limited to, as text ('' when it always applies)."""
        return ",".join(f"{k}={v}" for k, v in self.when)


def keyword_test(test: Callable[..., bool], names: Iterable[str]) -> Callable[..., bool]:
    """A positional test (what python-constraint2 and `Constraint` call) from a keyword one."""
    names = tuple(names)
    return lambda *values: test(**dict(zip(names, values)))


def count_removed(rule: Constraint, domains: Mapping[str, list]) -> Constraint:
    """`rule` with `removed` set: assignments of the full product it alone rejects."""
    own = [domains[v] for v in rule.variables]
    bad = sum(1 for values in product(*own) if not rule.test(*values))
    scale = math.prod(len(d) for d in domains.values()) // max(1, math.prod(len(d) for d in own))
    return replace(rule, removed=bad * scale)


@dataclass
class Space:
    """Knobs with domains, the named constraints, and the legal configs that meet them all.

    `derived` holds knobs that follow the others (not searched, no panel row), with the
    values they take across the legal configs, and `derive` computes them for one config;
    `notes` say what the space left out and why.
    """

    domains: dict[str, list]
    constraints: list[Constraint]
    configs: list = field(default_factory=list)
    derived: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # derived knob values of a config from its searched knobs (None: the space has none)
    derive: Callable[[Mapping[str, Any]], dict] | None = field(default=None, repr=False,
                                                               compare=False)
    # domains that depend on one knob's value (the GEMM's nr is counted in vector lanes, so
    # an AVX-512 config has other nr values than an AVX2 one): scope knob, value -> domains
    scope_knob: str = ""
    scoped: dict[Any, dict[str, list]] = field(default_factory=dict)
    # what the space was solved for: the family ('gemm', 'pattern', 'gpu'), the target, the
    # family's plan (the GEMM's GemmPlan) and its other facts (a pattern's op and sizes, the
    # GPU tile problem, the GEMM's solve time and latency rule: isa -> (asked, needed))
    family: str = ""
    target: Any = field(default=None, repr=False, compare=False)
    plan: Any = field(default=None, repr=False, compare=False)
    facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # knob values a config that leaves a knob out is checked with (the pattern kernels'
    # single-thread, unchunked, scalar, fused defaults)
    defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def product_size(self) -> int:
        return math.prod(len(d) for d in self.domains.values())

    def violated(self, cfg: Any) -> list[Constraint]:
        """Constraints a (user-given) config breaks."""
        values = {**self.defaults, **as_mapping(cfg)} if self.defaults else cfg
        return [c for c in self.constraints if not c.holds(values)]

    def explain(self, cfg: Any) -> list[str]:
        """'name: formula' of every constraint a config breaks (empty: legal)."""
        return [f"{c.name}: {c.formula}" for c in self.violated(cfg)]

    def domain(self, knob: str, given: Mapping[str, Any] | None = None) -> list:
        """The domain of `knob`, the one of `given`'s scope where that differs."""
        scope = self.scoped.get(dict(as_mapping(given or {})).get(self.scope_knob), {})
        return list(scope.get(knob, self.domains.get(knob, [])))

    def legal_values(self, knob: str, given: Mapping[str, Any] | None = None) -> list:
        """Values of `knob` that break no constraint with the other knobs as `given`
        (without `given`: the knob's whole domain, or a derived knob's legal values)."""
        if knob in self.derived:
            return list(self.derived[knob])
        domain = self.domain(knob, given)
        if given is None:
            return domain
        base = dict(as_mapping(given))
        return [v for v in domain if not self.violated({**base, knob: v})]

    def report(self) -> list[dict]:
        """One row per constraint: name, formula, scope, assignments removed (of the product)."""
        return [{"name": c.name, "formula": c.formula, "removed": c.removed,
                 "of": self.product_size, **({"scope": c.scope} if c.when else {})}
                for c in self.constraints]
