"""The GEMM search space as named constraints over tile variables, solved with python-constraint2.

Every hardware number comes from the HFL target; each constraint carries a formula a person
can read (with the numbers filled in) and how many assignments of the full product it removes.
Cache fit is a hard *capacity* limit here (a block that cannot fit at all); how well a block
fits is a soft term of the cost model.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import lru_cache

import constraint

from uol_core.acg.config import TileConfig, lanes, parallel_fmas, target_isas, vector_registers
from uol_core.acg.formula import compile_formula
from uol_core.acg.space_core import Constraint, Space, count_removed
from uol_core.acg.stores import last_level_cache
from uol_core.backends.c.platforms import PLATFORMS
from uol_core.plans.gemm import GemmPlan

F32 = 4  # bytes per element: the C GEMM path is f32 only (lower.py checks)
PREFETCH_SHARE = 4  # at most 1/PREFETCH_SHARE of L1 holds data prefetched ahead (a policy, not hw)
CHUNKS_PER_THREAD = 2  # NC chunks per thread for a jr split (dynamic balance vs. A re-packing)
UNROLL_FMAS = 256  # FMAs in one unrolled k-loop body: keeps the loop in the uop cache (a policy)
# The direct path (no A packing, B packed only where reused) is searched where a side of the
# product is at most this: a packed A panel is reused by N / NR column panels and a packed B
# panel by M / MR row strips, so with a side this small one of the two copies is reused by at
# most a handful of tiles and costs a pass over memory it never pays back (a policy).
DIRECT_MAX_EXTENT = 128
# The direct micro-kernel keeps one pointer per A row in a general-purpose register, next to
# the B pointer, strides and loop counters (x86-64 has 16): at most this many rows (a policy).
DIRECT_ROWS_MAX = 8


MR_MAX, NV_MAX = 16, 4  # the largest register tile searched (domains_for), in rows and vectors
MC_CANDIDATES = [24, 48, 72, 96, 120, 144, 192, 240, 288, 384]
VARIABLES = ("mr", "nr", "kc", "mc", "ku", "pf", "par", "threads", "path")


# HFL fields each GEMM rule reads (its provenance in explanations and the knob panel).
RULE_FACTS = {
    "register file": ("vector_registers", "isa"),
    "latency hiding": ("fma_units", "fma_latency_cycles"),
    "L1 capacity": ("l1d_bytes",),
    "L2 capacity": ("l2_bytes",),
    "parallel split": ("cores", "l2_bytes"),
    "parallel work": ("fork_join_cycles", "fma_units", "vector_bits"),
    "prefetch budget": ("l1d_bytes",),
}


def named_constraint(name: str, formula: str, isa: str = "", removed: int = 0) -> Constraint:
    """A GEMM rule as a `Constraint`: its variables are the tile knobs the formula names, its
    test the formula itself (parsed, never evaluated as Python), limited to configs of `isa`."""
    variables = _variables(formula)
    return Constraint(name, formula, variables, _compiled(formula, variables),
                      RULE_FACTS.get(name, ()), (("isa", isa),) if isa else (), removed)


@lru_cache(maxsize=4096)
def _variables(formula: str) -> tuple[str, ...]:
    return tuple(v for v in VARIABLES if re.search(rf"\b{v}\b", formula))


def _compiled(formula: str, variables: tuple[str, ...]) -> Callable[..., bool]:
    # The formula text is built by gemm_constraints from numbers; it is still never evaluated
    # as Python: formula.py walks its syntax tree.
    return compile_formula(formula, variables)


def _upto_first_cover(values: list[int], extent: int) -> list[int]:
    """Domain values up to the first one that covers `extent` (larger ones only add padding)."""
    kept = []
    for v in sorted(values):
        kept.append(v)
        if v >= extent:
            break
    return kept


def domains_for(plan: GemmPlan, target) -> dict[str, list]:
    """Candidate values per variable (the ISA is solved one problem per usable ISA)."""
    threads = target.cores or 1
    direct = direct_in_scope(plan)
    pars = ["jr", "ir"] + (["batch"] if plan.batch_count > 1 else []) + (["k"] if direct else [])
    return {
        "mr": list(range(1, MR_MAX + 1)),
        "nr": list(range(1, NV_MAX + 1)),  # in vectors; scaled by the ISA's lanes
        "kc": _upto_first_cover([64, 128, 192, 256, 320, 384, 512], plan.K),
        # M itself joins the candidates so that a small M gets one block of exactly M rows.
        "mc": sorted({plan.M} | set(_upto_first_cover(MC_CANDIDATES, plan.M))),
        "ku": [1, 4],
        "pf": [0, 8],
        "par": pars if threads > 1 else ["jr"],
        "threads": sorted({1, threads}),
        "path": ["packed", "direct"] if direct else ["packed"],
    }


def direct_in_scope(plan: GemmPlan) -> bool:
    """Whether the direct path is searched: a side of each product within DIRECT_MAX_EXTENT."""
    return min(plan.M, plan.N) <= DIRECT_MAX_EXTENT


def usable_isas(target) -> list[str]:
    """The ISAs searched: native vector ISAs of the target, else the portable path. A target
    with a length-agnostic ISA (SVE) searches it alone: its GEMM form (c_gemm_sve) reads the
    lanes at run time; the fixed-width ISAs stay available as overrides (target_isas)."""
    isas = target_isas(target, vla=True)
    if PLATFORMS[isas[0]].vla:
        return isas[:1]
    return isas[:-1] if len(isas) > 1 else isas


def fma_chains_needed(target) -> int:
    """Independent accumulator chains that hide the FMA latency: units x latency (HFL facts)."""
    return (target.fma_units or 1) * (target.fma_latency_cycles or 1)


def gemm_constraints(plan: GemmPlan, target, isa: str,
                     hide: int | None = None) -> list[Constraint]:
    """The named restrictions of the GEMM space on `target` for one ISA, numbers filled in
    (`hide`: the accumulator chains the latency rule asks for; default units x latency)."""
    regs, lane = vector_registers(isa, target), lanes(isa, target)
    l1, l2 = target.l1d_bytes, target.l2_bytes
    M, N, K, batch = plan.M, plan.N, plan.K, plan.batch_count
    nv = f"(nr // {lane})"
    mr_fit, nr_fit = max(M, 4), max(-(-N // lane) * lane, 2 * lane)
    hide = fma_chains_needed(target) if hide is None else hide
    streamed = PLATFORMS[isa].gemm.streamed_b_vectors
    rows = [
        ("register file", f"mr * {nv} + {nv} + 1 <= {regs}"),
        ("latency hiding", f"mr * {nv} >= {hide}"),
        ("problem fit", f"mr <= {mr_fit} and nr <= {nr_fit}"),
        ("divisibility", "(path == 'direct' or mc % mr == 0) and kc % ku == 0"),
        # a B panel streamed once (M <= MR on the direct path) is never re-read from L1, and
        # a wide one may stream from L2 where the ISA's GemmCosts measured it doing so
        ("L1 capacity", f"(path == 'direct' and mr >= {M}) or (mr + nr) * kc * {F32} <= {l1}"
                        + (f" or (path == 'packed' and nr >= {streamed * lane})"
                           if streamed else "")),
        ("L2 capacity", f"mc * kc * {F32} <= {l2}"),
        # direct: A is read in place, so its block is all M rows (mc == M); the split is over
        # batch slices, column panels, row strips (each thread packing the B panels it reads)
        # or the depth; a depth split keeps one M x N partial sum per thread, which must stay
        # in L2 for the reduction
        ("direct path", f"path == 'packed' or (mc == {M} and mr <= {DIRECT_ROWS_MAX} and "
                        f"{min(M, N)} <= {DIRECT_MAX_EXTENT})"),
        ("parallel split", f"(threads == 1 and par == 'jr') or (threads > 1 and ("
                           f"(par == 'jr' and ({N} + nr - 1) // nr >= 2 * threads) or "
                           f"(par == 'ir' and {M} // mr >= 2 * threads) or "
                           f"(par == 'batch' and {batch} >= threads) or "
                           f"(par == 'k' and path == 'direct' and ({K} + kc - 1) // kc >= "
                           f"threads and {M * N * F32} <= {l2})))"),
        # a split pays only when each thread's share of the FMAs outlasts the fork and join
        # (measured here: 37x45x29 and 32x128x32 ran 1.5x faster on one thread, 64^3 and
        # 128x10x256 faster on two)
        ("parallel work", f"threads == 1 or {M * N * K * batch} >= threads * {parallel_fmas(target, isa)}"),
        ("prefetch budget", f"pf * (mr + nr) * {F32} <= {l1 // PREFETCH_SHARE}"),
        ("unroll", f"ku <= {max(K, 1)} and ku * mr * {nv} <= {UNROLL_FMAS}"),
    ]
    return [named_constraint(name, formula, isa) for name, formula in rows]


def block_nc(plan: GemmPlan, target, kc: int, nr: int, par: str = "ir", threads: int = 1) -> int:
    """NC (derived, not searched): the B block kc x nc capped at half of L3 (BLIS rule); a jr
    split hands out NC-column chunks, CHUNKS_PER_THREAD per thread, to balance dynamically."""
    whole = -(-plan.N // nr) * nr
    l3 = last_level_cache(target)
    cap = max(nr, (l3 // 2) // (kc * F32) // nr * nr)
    if par == "jr" and threads > 1:
        chunk = -(-plan.N // (CHUNKS_PER_THREAD * threads))
        whole = -(-chunk // nr) * nr
    return min(whole, cap)


def build_space(plan: GemmPlan, target) -> Space:
    """Solve the GEMM space of `plan` on `target`: legal configs plus per-constraint statistics.

    The latency rule is the one rule a small problem cannot meet (too few rows or vectors of
    columns for units x latency accumulators): it is solved last, asking for the most chains
    any tile that meets every other rule holds, so every size has a legal config (at worst
    mr=1, one vector, which meets all the others) and the space's `facts["latency"]` (isa ->
    chains the rule asked for, chains units x latency would need) says when it was relaxed.
    Legal configs are `TileConfig`s (the GEMM's typed view; `to_config()` gives the `Config`).
    """
    start = time.perf_counter()
    configs: list[TileConfig] = []
    named: list[Constraint] = []
    domains: dict[str, list] = {}
    latency: dict[str, tuple[int, int]] = {}
    for isa in usable_isas(target):
        domains = domains_for(plan, target)
        if PLATFORMS[isa].vla:  # the length-agnostic GEMM is the packed one
            domains["path"] = ["packed"]
        lane = lanes(isa, target)
        domains["nr"] = [v * lane for v in domains["nr"]]
        rules = gemm_constraints(plan, target, isa)
        problem = constraint.Problem()
        for var, dom in domains.items():
            problem.addVariable(var, dom)
        for c in rules:
            if c.name != "latency hiding":
                problem.addConstraint(c.formula)
        solutions = problem.getSolutions()
        need = fma_chains_needed(target)
        hide = min(need, max((s["mr"] * (s["nr"] // lane) for s in solutions), default=1))
        latency[isa] = (hide, need)
        for c in gemm_constraints(plan, target, isa, hide):
            named.append(count_removed(c, domains))
        configs += [TileConfig(isa=isa, nc=block_nc(plan, target, s["kc"], s["nr"], s["par"],
                                                    s["threads"]), **s)
                    for s in solutions if s["mr"] * (s["nr"] // lane) >= hide]
    configs.sort(key=lambda c: (c.isa, c.mr, c.nr, c.kc, c.mc, c.ku, c.pf, c.par, c.threads,
                                c.path))
    domains["isa"] = usable_isas(target)
    derived = {"nc": sorted({c.nc for c in configs})}

    def derive(cfg) -> dict:  # nc follows kc, nr, par and threads (BLIS rule, block_nc)
        return {"nc": block_nc(plan, target, cfg["kc"], cfg["nr"], cfg["par"], cfg["threads"])}

    lane_counts = domains_for(plan, target)["nr"]
    scoped = {isa: {"nr": [n * lanes(isa, target) for n in lane_counts]}
              for isa in domains["isa"]}
    return Space(domains, named, configs, derived, derive=derive, scope_knob="isa",
                 scoped=scoped, family="gemm", plan=plan, target=target,
                 facts={"seconds": time.perf_counter() - start, "latency": latency})
