"""The C backend's ISA platform library: one file per instruction set.

A `Platform` names the vector operations the hand-written templates (GEMM, rows, flash
attention, convolution) are built from: load, store, broadcast, fma, arithmetic, horizontal
reductions, a vector exp, and the register tiles each named template was tuned with. The
templates format these C snippets ({0}, {1}, {2}: operands) and never spell an intrinsic, so an
ISA is one file here (`avx512.py`, `avx2.py`, `neon.py`, `vecext.py`) plus its name in
`_registry`.
Lane counts and register counts are not platform constants: they come from the HFL (the
isa.toml entry `requires` names, or the target's vector width for the portable path). The
registry's order is the order of preference: the ACG uses the first ISA a target has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Platform:
    """The C spelling of one ISA's f32 vector operations."""

    name: str
    # The HFL ISA flags a target lists when it has this ISA, the first naming its isa.toml
    # [[vector_isa]] entry (vector width, registers); empty: the portable path, on every target.
    requires: tuple[str, ...]
    include: str  # the header the intrinsics need ("" when none)
    vec: str  # the C type of one f32 vector
    zero: str
    load: str  # aligned load of {0}
    loadu: str  # unaligned load of {0}
    store: str  # aligned store of {1} to {0}
    storeu: str
    bcast: str  # every lane = {0}
    fma: str  # {0} * {1} + {2}
    add: str
    sub: str
    mul: str
    div: str
    max: str
    prefetch: str  # prefetch {0} into L1
    pin: str  # asm constraint that keeps a vector in a register ("" when not expressible)
    stream: str = ""  # non-temporal store of {1} to {0} ("" when the ISA has none)
    fence: str = ""  # orders this thread's non-temporal stores
    hmax: str = ""  # the max of {0}'s lanes as a float ("" without vector math)
    hsum: str = ""
    # Register tiles of the named templates, tuned on hardware of this ISA (see each file).
    tiles: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    typedefs: Callable[[int], str] = lambda lanes: ""  # C types the templates use, per lane count
    flash_prelude: Callable[[int], str] = lambda lanes: ""  # uol_v and its inline operations
    vector_math: Callable[[int], str] | None = None  # uol_vexp and horizontal helpers

    @property
    def has_vector_math(self) -> bool:
        """Whether this ISA has an explicit vector exp and horizontal reductions."""
        return self.vector_math is not None


def _registry() -> dict[str, Platform]:
    from uol_core.backends.c_platforms import avx2, avx512, neon, vecext

    return {p.name: p for p in (avx512.PLATFORM, avx2.PLATFORM, neon.PLATFORM, vecext.PLATFORM)}


PLATFORMS: dict[str, Platform] = _registry()


def platform(isa: str) -> Platform:
    """The platform of `isa`; a KeyError names the ISAs this backend can emit."""
    try:
        return PLATFORMS[isa]
    except KeyError:
        raise KeyError(f"the C backend has no platform file for ISA {isa!r}; "
                       f"known: {', '.join(PLATFORMS)}") from None


def has_vector_math(isa: str) -> bool:
    """Whether `isa` has a platform with explicit vector math (exp, horizontal max and sum)."""
    return isa in PLATFORMS and PLATFORMS[isa].has_vector_math
