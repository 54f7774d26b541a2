"""The C GEMM's explanation of a chosen config: the constraints that bind it, its roofline
bound and the cost model's prediction, model vs measured rank, the HFL facts used (with
provenance), and a picture of the tiles."""

from __future__ import annotations

from uol_core.acg.config import TileConfig, lanes, vector_registers
from uol_core.acg.explain import Explanation
from uol_core.acg.space_core import Space
from uol_core.acg.stores import last_level_cache
from uol_core.backends.c.gemm.cost_model import (
    F32,
    CostModel,
    b_streams,
    c_beyond_l2,
    k_step_loads,
    loads_per_cycle,
    pass_depth,
    roofline_gflops,
)
from uol_core.backends.c.gemm.space import DIRECT_MAX_EXTENT
from uol_core.backends.c.platforms import PLATFORMS

HFL_FIELDS = ("isa", "vector_bits", "vector_registers", "fma_units", "fma_latency_cycles",
              "cores", "clock_ghz", "l1d_bytes", "l2_bytes", "l3_bytes", "peak_gflops.fp32",
              "mem_bandwidth_gbps")


def _latency_line(space: Space, cfg: TileConfig, nv: int) -> str:
    """How many FMA chains the tile keeps in flight, and whether the rule had to be relaxed."""
    t, plan = space.target, space.plan
    need = t.fma_units * t.fma_latency_cycles
    hide, need = space.facts.get("latency", {}).get(cfg.isa, (need, need))
    line = (f"latency hiding: {cfg.mr * nv} independent FMA chains for "
            f"{t.fma_units} units x {t.fma_latency_cycles} cycles = {need}")
    if hide < need:
        line += (f" (relaxed to {hide}: at M={plan.M}, N={plan.N} no legal register tile holds "
                 f"{need} accumulators, so this small problem runs latency-bound; a fallback "
                 "tile is always legal)")
    return line


def _load_line(space: Space, cfg: TileConfig, nv: int) -> str:
    """Loads per k step against the FMA cycles they feed (the ISA's GemmCosts)."""

    per_cycle = loads_per_cycle(cfg.isa)
    cycles = cfg.mr * nv / (space.target.fma_units or 1)
    loads = k_step_loads(cfg, nv)
    return (f"loads: {nv} B vectors + {cfg.mr} A broadcasts{' + 2 prefetches' if cfg.pf else ''} "
            f"= {loads} per k step for {cycles:g} FMA cycles; {per_cycle:g} load(s) per cycle "
            f"({cfg.isa}) {'keep up' if loads <= per_cycle * cycles else 'bound the k loop'}")


def _path_line(cfg: TileConfig, plan) -> str:
    """Which operands are packed, and the rule ('direct path', DIRECT_MAX_EXTENT) behind it."""

    if cfg.path == "packed":
        return ("path packed: A blocks MC x KC and B blocks KC x NC are packed (BLIS); the direct "
                f"path is searched only where min(M, N) <= {DIRECT_MAX_EXTENT}")
    strips = -(-plan.M // cfg.mr)
    b_rule = (f"B panels KC x NR packed, each reused by {strips} row strips of MR" if strips > 1
              else "B streamed from memory (M <= MR: each element used once), software "
                   f"prefetch {cfg.pf} rows ahead" if cfg.pf else
              "B streamed from memory (M <= MR) without prefetch")
    depth = (f"; depth split: one {plan.M} x {plan.N} partial sum per thread "
             f"({plan.M * plan.N * F32 // 1024} KiB, must fit L2), added after a barrier"
             if cfg.par == "k" and cfg.threads > 1 else "")
    return (f"path direct (min(M, N) = {min(plan.M, plan.N)} <= {DIRECT_MAX_EXTENT}): A read in "
            f"place, {b_rule}; edge and strided B panels packed{depth}")


def _l1_line(space: Space, cfg: TileConfig, est) -> str:
    """Where B's micro-panel lives: resident in L1, or streamed from L2 on every row strip
    (the ISA's GemmCosts), and whether C's tiles come from beyond L2 (a dearer update)."""
    t, costs = space.target, PLATFORMS[cfg.isa].gemm
    panel = f"B micro-panel {cfg.kc} x {cfg.nr} x 4 B = {cfg.nr * cfg.kc * F32 // 1024} KiB"
    if b_streams(cfg, t):
        where = (f"L1: {panel}, more than L1d holds with A's micro-panel: it streams from L2 on "
                 f"every {cfg.mr}-row strip ({cfg.nr // lanes(cfg.isa, t)} vectors wide; "
                 f"{cfg.isa} streams >= {costs.streamed_b_vectors} at "
                 f"{costs.streamed_b_efficiency:.2f}x, measured)")
    else:
        where = (f"L1: {panel} = {100 * est.terms['l1_use']:.0f}% of L1d stays resident while "
                 f"A's {cfg.mr}-row micro-panels stream through")
    K = space.plan.K
    passes = -(-K // cfg.kc)
    if c_beyond_l2(space.plan, cfg, t):
        where += (f"; C's share per thread is beyond L2, so each of the {passes} passes over k "
                  f"updates C at {costs.tile_update_cycles_beyond_l2:g} cycles per accumulator "
                  "vector")
    if passes > 1 and K % cfg.kc:
        where += (f"; K = {K} in blocks of {cfg.kc}: {passes} passes of {pass_depth(K, cfg.kc):.0f} "
                  f"k steps on average (the last {K - (passes - 1) * cfg.kc}), each with a "
                  "tile update")
    return where


def explain(space: Space, model: CostModel, cfg: TileConfig, measured: dict | None = None,
            measured_rank: int | None = None) -> Explanation:
    """The explanation of `cfg` in `space` under `model` (with a measurement when there is one)."""
    plan, t = space.plan, space.target
    est = model.estimate(cfg)
    nv = cfg.nr // lanes(cfg.isa, t)
    regs = cfg.mr * nv + nv + 1
    binding = [
        f"register file: {regs} of {vector_registers(cfg.isa, t)} vector registers "
        f"({cfg.mr}x{nv} accumulators + {nv} B vectors + 1 broadcast)",
        _latency_line(space, cfg, nv),
        _load_line(space, cfg, nv),
        _l1_line(space, cfg, est),
        f"L2: A block {cfg.mc} x {cfg.kc} x 4 B = {cfg.mc * cfg.kc * F32 // 1024} KiB = "
        f"{100 * est.terms['l2_use']:.0f}% of L2",
        f"L3: B block {cfg.kc} x {cfg.nc} x 4 B = {cfg.kc * cfg.nc * F32 // 1024} KiB = "
        f"{100 * cfg.kc * cfg.nc * F32 / last_level_cache(t):.0f}% of L3 (nc derived)",
        f"parallel split over {cfg.par} with {cfg.threads} threads: balance "
        f"{100 * est.terms['balance']:.0f}%",
        _path_line(cfg, plan),
    ]
    rows = [c for c in space.constraints if c.applies({"isa": cfg.isa})]
    violated = [f"{c.name}: {c.formula}" for c in rows if not c.holds(cfg)]
    bytes_min = F32 * plan.batch_count * (plan.M * plan.K + plan.K * plan.N + plan.M * plan.N)
    attainable, bound = roofline_gflops(plan.flops, bytes_min, t)
    roof = {"attainable_gflops": attainable, "bound": bound, "flops": plan.flops,
            "min_bytes": bytes_min, "predicted_gflops": est.gflops, "terms": est.terms}
    meas = {}
    if measured and measured.get("gflops"):
        meas = {"gflops": measured["gflops"], "median_s": measured.get("median_s"),
                "fraction_of_roofline": measured["gflops"] / attainable}
        if measured_rank is not None:
            meas["measured_rank"] = measured_rank
    ranked = model.rank(space.configs)
    rank = next((i + 1 for i, (c, _) in enumerate(ranked) if c == cfg), None)
    facts = []
    for name in HFL_FIELDS:
        base, _, sub = name.partition(".")
        value = getattr(t, base, None)
        value = value.get(sub) if sub and isinstance(value, dict) else value
        try:
            prov = str(t.provenance(name))
        except KeyError:
            prov = "absent"
        facts.append({"field": name, "value": value, "provenance": prov})
    return Explanation(plan.op.name, dict(plan.sizes), cfg.to_dict(), binding, violated, roof,
                       rank, len(space.configs), meas, facts,
                       [{"name": c.name, "formula": c.formula, "removed": c.removed}
                        for c in rows], tile_picture(cfg, plan))


def tile_picture(cfg: TileConfig, plan) -> str:
    """ASCII picture of the tile hierarchy: C blocks, the packed panels, the register tile."""
    if cfg.path == "direct":
        return "\n".join([
            "tile hierarchy (C = A x B), direct path:",
            f"  C {plan.M} x {plan.N}" + (f"  (x{plan.batch_count} batch)"
                                          if plan.batch_count > 1 else ""),
            f"  +-- pc: KC={cfg.kc} deep" + ("  (threads split the depth, then add)"
                                            if cfg.par == "k" else ""),
            f"      +-- jr: NR={cfg.nr} column panels   (B panel packed only if reused)",
            f"          +-- ir: MR={cfg.mr} row strips  (A rows read in place)",
            f"              +-- micro-tile {cfg.mr} x {cfg.nr}  (registers, {cfg.isa})",
            f"  split over {cfg.par} across {cfg.threads} thread(s)",
        ])
    return "\n".join([
        "tile hierarchy (C = A x B):",
        f"  C {plan.M} x {plan.N}" + (f"  (x{plan.batch_count} batch)" if plan.batch_count > 1
                                      else ""),
        f"  +-- jc block: all rows x NC={cfg.nc} cols   (B block KC x NC packed, L3)",
        f"  |   +-- pc: KC={cfg.kc} deep",
        f"  |       +-- ic block: MC={cfg.mc} rows      (A block MC x KC packed, L2)",
        f"  |           +-- micro-tile MR x NR = {cfg.mr} x {cfg.nr}  (registers, {cfg.isa})",
        "  |",
        "  micro-tile:  " + " ".join(["[" + "#" * max(1, cfg.nr // 8) + "]"] * 1),
        *["               " + "#" * (cfg.nr // 2) for _ in range(min(cfg.mr, 8))],
        f"  split over {cfg.par} across {cfg.threads} thread(s)",
    ])
