"""Matrix and dot-product units for narrow floats (AMX tiles, AVX512-BF16), read from isa.toml.

A target's `isa` list says which units it has; the numbers (tile count, palette geometry,
FLOP per cycle) and their sources live in isa.toml's [[matrix_isa]] entries, never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uol_core.hfl.sysinfo import isa_table


@dataclass(frozen=True)
class MatrixUnit:
    """One [[matrix_isa]] entry: the flag that names it, the flags it needs, its facts."""

    flag: str
    requires: tuple[str, ...]
    dtype: str
    facts: dict[str, Any]

    @property
    def source(self) -> str:
        return str(self.facts.get("source", ""))

    def fact(self, name: str) -> Any:
        """A number of the entry; KeyError names the entry when isa.toml lacks it."""
        if name not in self.facts:
            raise KeyError(f"isa.toml [[matrix_isa]] {self.flag} has no '{name}'")
        return self.facts[name]


def matrix_units(dtype: str = "bf16") -> list[MatrixUnit]:
    """Every matrix unit of isa.toml for `dtype`, in the table's order (preferred first)."""
    return [MatrixUnit(e["flag"], tuple(e.get("requires", [e["flag"]])), e["dtype"], dict(e))
            for e in isa_table().get("matrix_isa", []) if e.get("dtype") == dtype]


def unit_for(target: Any, dtype: str = "bf16") -> MatrixUnit | None:
    """The first unit of `dtype` whose required flags the target's ISA list (or the given list
    of flags) all has."""
    have = set(target) if isinstance(target, (list, tuple, set)) else set(
        getattr(target, "isa", []) or [])
    return next((u for u in matrix_units(dtype) if set(u.requires) <= have), None)


def peak_gflops(target: Any, unit: MatrixUnit) -> tuple[float, str]:
    """The documented peak of `unit` on `target` (cores x clock x FLOP per cycle) and how it was
    computed; a probe or benchmark measures the real one (a VM may run the unit slower)."""
    return peak_from(float(target.cores), float(target.clock_ghz),
                     float(getattr(target, "fma_units", 0) or 1), unit)


def peak_from(cores: float, clock_ghz: float, fma_units: float,
              unit: MatrixUnit) -> tuple[float, str]:
    """`peak_gflops` from the numbers themselves (the host probe has no Target yet)."""
    if "flop_per_cycle" in unit.facts:
        per_cycle = float(unit.fact("flop_per_cycle"))
        how = f"{unit.fact('flop_per_cycle')} FLOP/cycle/core"
    else:
        per_cycle = float(unit.fact("flop_per_instruction")) * fma_units
        how = f"{unit.fact('flop_per_instruction')} FLOP/instruction x {fma_units:g} units"
    return (cores * clock_ghz * per_cycle,
            f"computed: {cores:g} cores x {clock_ghz:g} GHz x {how} "
            f"({unit.facts.get('peak_source')})")
