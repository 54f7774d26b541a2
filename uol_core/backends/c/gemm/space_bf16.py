"""Search space of the C backend's bf16 GEMM (backends/c/gemm/bf16.py): which micro-kernel runs
it (bf16_isa) and on how many threads, as named constraints over the HFL target.

The template reads only these two knobs, so the pattern space's chunk, vec and fuse are not
offered for it. Every kernel is in the domain: one the target cannot run is there to be seen
forbidden, with the rule naming the unit it lacks. The model's pick is the first unit the
HFL's isa.toml [[matrix_isa]] table lists for the target (AMX before AVX512-BF16), the
widened-f32 kernel where it has none.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.acg.space_core import Constraint, count_removed, keyword_test
from uol_core.backends.c.gemm.bf16 import ISA_OF_UNIT, KERNELS, match
from uol_core.hfl.matrix import matrix_units, peak_gflops
from uol_core.hfl.roofline import fork_join_seconds
from uol_core.odl.ir import DType, Op

KNOBS = ("threads", "bf16_isa")


def is_bf16_gemm(op: Op, sizes: Mapping[str, int]) -> bool:
    """Whether the C backend runs `op` as its bf16 GEMM (other bf16 ops, an elementwise map,
    go to the pattern templates and keep the pattern knobs)."""

    return any(d.dtype == DType.bf16 for d in op.inputs) and match(op, sizes) is not None


def kernels_for(target) -> tuple[list[str], list[str]]:
    """(every bf16 GEMM micro-kernel, the ones `target` runs, preferred first)."""

    have = set(getattr(target, "isa", []) or [])
    usable = [ISA_OF_UNIT[u.flag] for u in matrix_units("bf16")
              if u.flag in ISA_OF_UNIT and set(u.requires) <= have]
    return list(KERNELS), [*usable, "f32"]


def bf16_domains_and_rules(target) -> tuple[dict[str, list], list[Constraint]]:
    """The knobs' domains and the named rules (with the HFL facts each reads)."""
    cores = int(target.cores or 1)
    every, usable = kernels_for(target)
    domains = {"threads": sorted({1, cores}), "bf16_isa": every}
    rows = [
        ("cores", f"threads <= {cores}", lambda threads: threads <= cores, ("cores",)),
        ("matrix unit", f"bf16_isa in {usable}", lambda bf16_isa: bf16_isa in usable, ("isa",)),
    ]
    rules = [count_removed(Constraint(name, formula, tuple(v for v in KNOBS if v in formula),
                                      keyword_test(test, tuple(v for v in KNOBS if v in formula)),
                                      facts), domains)
             for name, formula, test, facts in rows]
    return domains, rules


def predict_bf16_seconds(flops: float, target, cfg: Mapping) -> float:
    """FLOPs over the peak of the chosen unit (HFL), scaled by the threads' share of cores."""

    unit = next((u for u in matrix_units("bf16")
                 if ISA_OF_UNIT.get(u.flag) == cfg.get("bf16_isa")), None)
    peak = peak_gflops(target, unit)[0] if unit is not None else \
        float(target.peak_gflops.get("fp32") or 1.0)
    threads = int(cfg.get("threads", 1))
    share = threads / max(1, int(target.cores or 1))
    return flops / (peak * 1e9 * share) + fork_join_seconds(target, threads)
