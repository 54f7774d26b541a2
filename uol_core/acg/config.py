"""TileConfig: one point of the GEMM search space, plus parsing `k=v,...` and resolving targets."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache

from uol_core.acg.space_core import Config
from uol_core.backends.c.platforms import PLATFORMS
from uol_core.hfl import load_target
from uol_core.hfl.sysinfo import isa_table

# The vector instruction sets the C backend has a platform file for, best first (the platform
# registry's order); "vecext" (GCC vector extensions) is the portable one.
ISA_ORDER = tuple(PLATFORMS)
# The HFL ISA flags a target must list for each explicit ISA, the first naming its isa.toml
# [[vector_isa]] entry (vector width and architectural registers). The portable path needs
# none: it takes the target's own vector width.
ISA_REQUIRES = {name: p.requires for name, p in PLATFORMS.items() if p.requires}
PORTABLE_ISAS = [name for name, p in PLATFORMS.items() if not p.requires]


@dataclass(frozen=True)
class TileConfig:
    """BLIS-style blocking of one GEMM: register tile MR x NR, cache blocks MC x KC x NC, and knobs."""

    isa: str = "avx2"
    mr: int = 6  # rows of the register tile
    nr: int = 16  # columns of the register tile (a multiple of the vector lanes)
    kc: int = 256  # depth of a packed panel (the k block)
    mc: int = 96  # rows of the packed A block (a multiple of mr)
    nc: int = 2048  # columns of the packed B block (a multiple of nr)
    ku: int = 4  # k-loop unroll of the micro-kernel
    pf: int = 0  # software prefetch distance in k steps (0: off)
    par: str = "jr"  # the OpenMP loop: jr (N micro-panels), ir (M micro-panels), batch, k (depth)
    threads: int = 1
    # packed: BLIS, A and B packed into panels; direct: A read in place, B packed only where a
    # panel is reused by several row strips or cannot be loaded as whole vectors (c_gemm_direct)
    path: str = "packed"

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in FIELD_NAMES}

    def key(self) -> str:
        """Stable text key (database column, cache names)."""
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items())

    def replace(self, **changes) -> TileConfig:
        data = self.to_dict()
        data.update(changes)
        return TileConfig(**data)

    def to_config(self):
        """The shared `Config` (acg.space_core) with the same knobs, in field order."""

        return Config(self.to_dict())

    @classmethod
    def from_config(cls, cfg) -> TileConfig:
        """The GEMM's typed view of a `Config` (or any mapping of its knobs); unknown keys raise."""
        return parse_config(dict(cfg), cls())


PARALLEL_LOOPS = ("jr", "ir", "batch", "k")
GEMM_PATHS = ("packed", "direct")
FIELD_NAMES = tuple(f.name for f in fields(TileConfig))
FIELD_TYPES = {f.name: (str if f.type in ("str", str) else int) for f in fields(TileConfig)}


def named_keys(text: str | dict) -> set[str]:
    """The keys a config request names ('mr=6,par=jr' -> {'mr', 'par'})."""
    if isinstance(text, dict):
        return {str(k).strip() for k in text}
    return {part.split("=", 1)[0].strip() for part in text.replace(" ", ",").split(",") if part}


def parse_config(text: str | dict, base: TileConfig) -> TileConfig:
    """Apply 'mr=6,nr=16' (or a dict) on top of `base`; unknown keys raise ValueError naming them."""
    items = text.items() if isinstance(text, dict) else (
        part.split("=", 1) for part in text.replace(" ", ",").split(",") if part)
    changes = {}
    for item in items:
        if len(item) != 2:
            raise ValueError(f"bad config item '{item[0]}': write key=value, e.g. mr=6")
        key, value = item
        key = str(key).strip()
        if key not in FIELD_TYPES:
            raise ValueError(f"unknown config key '{key}'; known: {', '.join(FIELD_TYPES)}")
        try:
            changes[key] = FIELD_TYPES[key](value)
        except ValueError:
            raise ValueError(f"config {key} must be an integer, got '{value}'") from None
    cfg = base.replace(**changes)
    for key, kind in FIELD_TYPES.items():
        value = getattr(cfg, key)
        if kind is int and (value < 0 or (value == 0 and key != "pf")):
            raise ValueError(f"config {key} must be a positive integer, got {value}")
    if cfg.isa not in ISA_ORDER:
        raise ValueError(f"config isa must be one of {', '.join(ISA_ORDER)}, got '{cfg.isa}'")
    if cfg.par not in PARALLEL_LOOPS:
        raise ValueError(f"config par must be one of {', '.join(PARALLEL_LOOPS)}, got '{cfg.par}'")
    if cfg.path not in GEMM_PATHS:
        raise ValueError(f"config path must be one of {', '.join(GEMM_PATHS)}, got '{cfg.path}'")
    if cfg.par == "k" and cfg.path != "direct":
        raise ValueError("config par=k (depth split with a reduction) needs path=direct")
    return cfg


def resolve_target(target):
    """An HFL Target object from a name ('host', 'amd-epyc-turin') or a Target itself."""
    if isinstance(target, str):
        return load_target(target)
    return target


def target_isas(target, vla: bool = False) -> list[str]:
    """The C backend's instruction sets usable on `target`, best first (from the HFL ISA list).

    Vector-length-agnostic ISAs (SVE) are listed only with `vla`: for the templates that step
    by a run-time lane count; register-tiled templates need a lane count fixed at generation."""
    isa = {name.lower() for name in (target.isa or [])}
    return [name for name, needs in ISA_REQUIRES.items()
            if set(needs) <= isa and (vla or not PLATFORMS[name].vla)] + PORTABLE_ISAS


@cache
def _vector_isa(isa: str) -> dict:
    """The isa.toml [[vector_isa]] entry of an explicit ISA (width, registers, sources)."""

    flag = ISA_REQUIRES[isa][0]
    return next(e for e in isa_table()["vector_isa"] if e["flag"] == flag)


def lanes(isa: str, target) -> int:
    """f32 lanes of one vector register for `isa` (isa.toml); vecext uses the target's vector
    width (NEON stays 4 lanes on a core whose SVE vectors are wider), and so does a
    length-agnostic ISA: the lanes it meets on that target's cores."""
    if isa not in ISA_REQUIRES or PLATFORMS[isa].vla:
        return (target.vector_bits or 128) // 32
    return int(_vector_isa(isa)["vector_bits"]) // 32


def parallel_fmas(target, isa: str) -> int:
    """Multiply-adds that keep the FMA units busy for one fork and join (HFL: its cycles, the
    units, the lanes): a thread's share below it costs more to hand out than to compute."""
    return int(target.fork_join_cycles * (target.fma_units or 1) * lanes(isa, target))


def threads_for_work(multiply_adds: int, target, isa: str) -> int:
    """Every core when each one's share of `multiply_adds` outlasts a fork and join, else one
    (the GEMM space's 'parallel work' rule, for the templates without a threads knob)."""
    cores = int(getattr(target, "cores", 0) or 1)
    return cores if multiply_adds >= cores * parallel_fmas(target, isa) else 1


def reduction_chains(target) -> int:
    """Independent partial sums that keep the FP adders busy (HFL: an FMA's latency in
    cycles times the FMA units): one accumulator waits that long for each add it chains."""
    return max(1, int(getattr(target, "fma_latency_cycles", 0) or 1)
               * int(getattr(target, "fma_units", 0) or 1))


def vector_registers(isa: str, target) -> int:
    """Architectural vector registers for `isa`: the target's, at most the ISA's (isa.toml), so
    AVX2 sees the lower 16 even on AVX-512 parts; a length-agnostic ISA (no isa.toml entry)
    has the target's own (SVE: 32 Z registers)."""
    regs = target.vector_registers
    if isa not in ISA_REQUIRES or PLATFORMS[isa].vla:
        return regs
    return min(regs or 1 << 30, int(_vector_isa(isa)["vector_registers"]))
