"""The C backend's ISA platform library: one file per instruction set.

A `Platform` names the vector operations the hand-written templates (GEMM, rows, flash
attention, convolution) are built from: load, store, broadcast, fma, arithmetic, horizontal
reductions, a vector exp, and the register tiles each named template was tuned with. The
templates format these C snippets ({0}, {1}, {2}: operands) and never spell an intrinsic, so an
ISA is one file here (`avx512.py`, `avx2.py`, `sve.py`, `neon.py`, `vecext.py`), with the compiler
flags its intrinsics need, plus its name in `_registry`.
A vector-length-agnostic ISA (SVE) sets `vla_step`: its lane count is known only at run time,
so it has no register tiles fixed in lanes; templates that strip-mine a loop (rows, the generic
loop nests) step by `vla_step` under the predicate `vla_pred`, flash attention and convolution
and the packed GEMM count their tiles in vectors and use `vla_prelude`; the templates whose
tiles are fixed in lanes take the target's first fixed-width ISA (acg.config.target_isas).
Lane counts and register counts are not platform constants: they come from the HFL (the
isa.toml entry `requires` names, or the target's vector width for the portable path). The
registry's order is the order of preference: the ACG uses the first ISA a target has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GemmCosts:
    """What the GEMM cost model counts for cores of this ISA inside a whole GEMM (not in a
    micro-kernel run alone), measured on a host with the ISA; the defaults are what the model
    assumed before any measurement, and the calibration learns what they miss."""

    # Loads (B vectors and A broadcasts) the k loop sustains per cycle.
    loads_per_cycle: float = 2.0
    # B micro-panels at least this many vectors wide may exceed L1 and stream from L2 on every
    # row strip (0: B's micro-panel must stay in L1, the BLIS rule).
    streamed_b_vectors: int = 0
    # The k loop's efficiency with B streaming from L2 against B resident in L1.
    streamed_b_efficiency: float = 1.0
    # Cycles per accumulator vector to add a finished tile into C (store, reload, add, store),
    # with C's share per thread in L2 and beyond it.
    tile_update_cycles: float = 2.0
    tile_update_cycles_beyond_l2: float = 2.0


@dataclass(frozen=True)
class Platform:
    """The C spelling of one ISA's f32 vector operations."""

    name: str
    # The HFL ISA flags a target lists when it has this ISA, the first naming its isa.toml
    # [[vector_isa]] entry (vector width, registers); empty: the portable path, on every target.
    requires: tuple[str, ...]
    include: str  # the header the intrinsics need ("" when none)
    # The gcc flags the intrinsics need in a native build, beside -march=native (runtime.build
    # reads them; a cross build takes the target CPU's flags from its HFL record instead).
    # AdvSIMD is part of every AArch64 core: NEON needs none.
    compile_flags: tuple[str, ...]
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
    # Vector-length-agnostic ISAs only: the C expression of the lanes per vector at run time,
    # the predicate of the lanes [{0}, {1}) of a loop and its C type. Every operation reads the
    # predicate from `uol_pg` in the loop's scope.
    vla_step: str = ""
    vla_pred: str = ""
    vla_pred_type: str = ""
    # ... and the predicated vocabulary (uol_v, uol_p, uol_pwhile, uol_vld(pg, p), uol_vfmas,
    # uol_vsum, ...) the length-agnostic flash and conv templates are written in.
    vla_prelude: str = ""
    gemm: GemmCosts = GemmCosts()

    @property
    def vla(self) -> bool:
        """Whether the lane count is read at run time (no tiles fixed at generation)."""
        return bool(self.vla_step)

    @property
    def has_vector_math(self) -> bool:
        """Whether this ISA has an explicit vector exp and horizontal reductions."""
        return self.vector_math is not None


def _registry() -> dict[str, Platform]:
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.backends.c.platforms import avx2, avx512, neon, sve, vecext

    return {p.name: p for p in (avx512.PLATFORM, avx2.PLATFORM, sve.PLATFORM, neon.PLATFORM,
                                vecext.PLATFORM)}


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
