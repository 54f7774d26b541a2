"""Analytical cost model for GEMM configs: roofline bound from the HFL, times micro-kernel,
packing, cache-fit and parallel-balance terms; a per-target correction learned from measurements.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from uol_core.acg.config import TileConfig, lanes, parse_config, target_isas
from uol_core.acg.tuning_models import TuningModel
from uol_core.backends.c.platforms import PLATFORMS
from uol_core.hfl.roofline import fork_join_seconds, roofline
from uol_core.plans.gemm import GemmPlan

F32 = 4
# Modelling constants (not hardware facts): the calibration below learns what they miss.
LOOP_OVERHEAD_CYCLES = 1.0  # pointer bumps and branch per (unrolled) k step
# The B micro-panel (kc x nr) stays in L1 across the ir loop while A's micro-panels stream
# through; it may fill this share of L1 before the streaming A evicts it (BLIS's analytical
# model keeps it in the ways that A's stream leaves alone; Zen's 6x16 at kc=256 uses 2/3).
L1_SHARE = 0.75
# A B panel streamed from memory row by row (direct path, M <= MR) touches a new page every k
# step, where the hardware prefetchers stop; without software prefetch each row waits for
# memory, and this share of the bandwidth is what is left (order of magnitude; the
# calibration learns the rest).
UNPREFETCHED_STREAM_SHARE = 0.5
# Both paths broadcast A from beyond L1 (the packed path's loop order keeps B's micro-panel in
# L1 and streams A's micro-panels from L2; the direct path reads A's rows in place), so each FMA chain also waits on a load: it takes this
# many times the units x latency chains to keep the FMA units busy. Measured on an AVX-512 host (2 FMA units, latency 4): the 8-chain 8x16
# tile ran 0.70-0.73x torch where the 12-chain 6x32 ran 0.81-0.98x (1024^3, 2048^3), and on
# the direct path 6 x 4 and 8 x 2 vector tiles beat 4 x 2 by 5-10%.
BROADCAST_CHAIN_SLACK = 1.5
# The loads the k loop sustains per cycle, and the cycles to add a finished tile into C (what
# makes a short kc cost), are the ISA's GemmCosts (backends/c/platforms), measured where
# the ISA was.


def k_step_loads(cfg: TileConfig, nv: int) -> int:
    """Loads the micro-kernel issues per k step: nv B vectors, mr A broadcasts, and with
    prefetching one line of A and one of B."""
    return cfg.mr + nv + (2 if cfg.pf else 0)


def loads_per_cycle(isa: str) -> float:
    """Loads per cycle the model lets the k loop sustain for `isa` (its GemmCosts)."""
    return PLATFORMS[isa].gemm.loads_per_cycle


def b_streams(cfg: TileConfig, target) -> bool:
    """Whether B's micro-panel streams from L2 on every row strip: wider than L1 holds it,
    and at least as wide as the ISA's GemmCosts measured streaming well (else the space's L1
    rule has removed the config)."""
    min_vectors = PLATFORMS[cfg.isa].gemm.streamed_b_vectors
    return (cfg.path == "packed" and min_vectors > 0
            and cfg.nr // lanes(cfg.isa, target) >= min_vectors
            and (cfg.mr + cfg.nr) * cfg.kc * F32 > target.l1d_bytes)


def pass_depth(K: int, kc: int) -> float:
    """The mean depth of a pass over k: K = 513 in blocks of kc = 512 is two passes of 256.5
    on average (the second one k step deep, with a whole tile update to pay for it)."""
    return K / max(1, math.ceil(K / kc))


def c_beyond_l2(plan: GemmPlan, cfg: TileConfig, target) -> bool:
    """Whether each thread's share of C outgrows L2, so every pass over k fetches C's tiles
    from beyond it."""
    return F32 * plan.batch_count * plan.M * plan.N / max(1, cfg.threads) > target.l2_bytes


def roofline_gflops(flops: float, bytes_moved: float, target) -> tuple[float, str]:
    """Attainable GFLOP/s and the bound ('compute' or 'memory'), from the HFL roofline."""
    try:
        r = roofline(flops, bytes_moved, target, dtype="fp32")
        return r.attainable_gflops, r.bound
    except ImportError:  # the HFL roofline module not there yet: the same formula
        peak, bw = target.peak_gflops["fp32"], target.mem_bandwidth_gbps
        mem = bw * flops / max(bytes_moved, 1.0)
        return (peak, "compute") if peak <= mem else (mem, "memory")


@dataclass(frozen=True)
class Estimate:
    """Predicted performance of one config, with the factors that produced it."""

    gflops: float
    seconds: float
    terms: dict[str, float] = field(default_factory=dict)


@dataclass
class CostModel:
    """Ranks legal configs; `calibrate` fits a correction per register tile from measurements."""

    plan: GemmPlan
    target: object
    correction: dict[str, float] = field(default_factory=dict)

    def estimate(self, cfg: TileConfig) -> Estimate:
        """Predicted GFLOP/s of `cfg` (higher is better)."""
        p, t = self.plan, self.target
        M, N, K, B = p.M, p.N, p.K, p.batch_count
        flops = p.flops
        min_bytes = F32 * B * (M * K + K * N + M * N)
        bound, _ = roofline_gflops(flops, min_bytes, t)
        cores = t.cores or 1
        per_thread = bound / cores
        nv = cfg.nr // lanes(cfg.isa, t)
        fma_units, latency = t.fma_units or 1, t.fma_latency_cycles or 1
        # Micro-kernel: FMA cycles per k step vs. accumulators needed to hide FMA latency.
        fma_cycles = cfg.mr * nv / fma_units
        chains = fma_units * latency * BROADCAST_CHAIN_SLACK
        latency_eff = min(1.0, cfg.mr * nv / chains)
        loop_eff = fma_cycles / (fma_cycles + LOOP_OVERHEAD_CYCLES / cfg.ku)
        call_eff = self._call_efficiency(cfg, nv, fma_cycles)
        load_eff = min(1.0, loads_per_cycle(cfg.isa) * fma_cycles / k_step_loads(cfg, nv))
        # The HFL peak is for the widest vector ISA a GEMM is emitted with; a narrower one
        # reaches its share of it. Only explicit ISAs count: the portable path's lanes are the
        # target's vector width (SVE's 256 bits on Neoverse V1), which no GEMM is emitted at;
        # counting it halved every NEON prediction there, where four 128-bit NEON FMA pipes
        # reach the same peak as two 256-bit SVE ones.
        isas = target_isas(t)
        widest = max(lanes(isa, t) for isa in (isas[:-1] or isas))
        width = min(1.0, lanes(cfg.isa, t) / widest)
        micro = latency_eff * loop_eff * load_eff * width * call_eff
        # Edge waste: padded tiles compute zeros.
        edge = (M * N) / (math.ceil(M / cfg.mr) * cfg.mr * math.ceil(N / cfg.nr) * cfg.nr)
        # Cache fit (soft): B's micro-panel resident in L1 (A's stream through it), A's block
        # in L2. A small A block costs nothing here: packing is the same total work at any mc,
        # and B's panel, re-read from L2/L3 once per block, brings mc/2 FLOPs per byte.
        # A B micro-panel that streams from L2 (b_streams) runs at its measured efficiency.
        l1_use = cfg.nr * cfg.kc * F32 / t.l1d_bytes
        l2_use = cfg.mc * cfg.kc * F32 / t.l2_bytes
        l1_fit = PLATFORMS[cfg.isa].gemm.streamed_b_efficiency if b_streams(cfg, t) \
            else 1.0 / (1.0 + max(0.0, l1_use - L1_SHARE))
        l2_fit = 1.0 / (1.0 + max(0.0, l2_use - 0.6))
        # Parallel balance: each thread owns a contiguous share of the split loop's panels.
        threads = cfg.threads
        direct = cfg.path == "direct"
        units = {"batch": B, "ir": math.ceil(M / cfg.mr), "k": math.ceil(K / cfg.kc)}.get(
            cfg.par, math.ceil(N / (cfg.nr if direct else cfg.nc)))
        balance = (units / threads) / math.ceil(units / threads)
        compute_s = flops / (per_thread * threads * 1e9 * micro * edge * l1_fit * l2_fit
                             * balance)
        # Packing at memory bandwidth, before the FMAs that use it. Threads pack privately (no
        # barriers), so the operand they share is packed once per thread: B for an ir split, A
        # for jr. C is read and written once per kc pass, a tile at a time between k loops:
        # the hardware overlaps that stream with the FMAs, so only what exceeds them costs.
        bw = t.mem_bandwidth_gbps * 1e9
        c_s = 2 * F32 * B * M * N * math.ceil(K / cfg.kc) / bw / threads
        barriers = 1 if threads > 1 else 0
        if direct:
            memory_s, extra_barriers = self._direct_memory(cfg, bw)
            barriers += extra_barriers
        else:
            a_packs = math.ceil(N / cfg.nc)  # A is packed once per NC chunk
            b_packs = threads if cfg.par == "ir" else 1
            memory_s = 2 * F32 * B * (M * K * a_packs + K * N * b_packs) / bw / threads
        memory_s += max(0.0, c_s - compute_s)
        sync_s = barriers * fork_join_seconds(t, threads)
        seconds = compute_s + memory_s + sync_s
        gflops = flops / seconds / 1e9 * self.correction.get(_group(cfg),
                                                             self.correction.get("*", 1.0))
        terms = {"roofline_gflops": bound, "micro_kernel": micro, "call_overhead": call_eff, "vector_width": width, "edge": edge,
                 "l1_use": l1_use, "l2_use": l2_use, "l1_fit": l1_fit, "l2_fit": l2_fit,
                 "balance": balance, "compute_s": compute_s, "memory_s": memory_s,
                 "sync_s": sync_s}
        return Estimate(gflops, seconds, terms)

    def _call_efficiency(self, cfg: TileConfig, nv: int, fma_cycles: float) -> float:
        """Share of a micro-kernel call spent on FMAs: each call also sends its tile to C, and
        each B micro-panel is refilled into L1 (a line per cycle from L2) once per A block,
        shared by the block's mc/mr row strips (the direct path's block is all M rows; with one
        strip there its B panel streams from memory, which _direct_memory charges; one that
        streams from L2 comes from beyond it once per A block too, and from L2 on the other
        strips: its loads). The tile update costs more once C's share per thread outgrows L2.
        A call's k loop is a pass's mean depth (pass_depth), not kc: a shallow last pass pays
        a whole tile update for a few k steps."""
        direct = cfg.path == "direct"
        strips = max(1, math.ceil((self.plan.M if direct else cfg.mc) / cfg.mr))
        line = self.target.line_bytes or 64
        depth = pass_depth(self.plan.K, cfg.kc)
        refill = 0.0 if direct and strips == 1 else depth * cfg.nr * F32 / line / strips
        costs = PLATFORMS[cfg.isa].gemm
        update = costs.tile_update_cycles_beyond_l2 if c_beyond_l2(self.plan, cfg, self.target) \
            else costs.tile_update_cycles
        k_loop = depth * fma_cycles
        return k_loop / (k_loop + update * cfg.mr * nv + refill)

    def _direct_memory(self, cfg: TileConfig, bw: float) -> tuple[float, int]:
        """Seconds of memory traffic beyond the roofline's minimum on the direct path, and the
        barriers it adds: B panels packed where reused by several row strips (M > MR), else
        streamed (at a share of the bandwidth without prefetch); a row split packs every panel
        in each thread; a depth split writes and reads one M x N partial sum per thread around
        two barriers."""
        p = self.plan
        M, N, K, B = p.M, p.N, p.K, p.batch_count
        if cfg.mr < M:
            packers = 1 if cfg.par == "ir" else cfg.threads  # threads sharing the packing
            seconds = 2 * F32 * B * K * N / bw / packers
        else:
            share = 1.0 if cfg.pf else UNPREFETCHED_STREAM_SHARE
            seconds = F32 * B * K * N * (1 / share - 1) / bw / cfg.threads
        if cfg.par == "k" and cfg.threads > 1:
            return seconds + 2 * F32 * B * M * N * cfg.threads / bw / cfg.threads, 2
        return seconds, 0

    def rank(self, configs: list[TileConfig]) -> list[tuple[TileConfig, float]]:
        """Configs with predicted GFLOP/s, best first."""
        scored = [(c, self.estimate(c).gflops) for c in configs]
        scored.sort(key=lambda cs: -cs[1])
        return scored

    def calibrate(self, measured: list[tuple[TileConfig, float]]) -> None:
        """Learn measured/predicted ratios: per register tile and overall (median)."""
        self.correction = {}
        ratios: dict[str, list[float]] = {}
        for cfg, gflops in measured:
            if gflops and gflops > 0:
                ratio = gflops / self.estimate(cfg).gflops
                ratios.setdefault(_group(cfg), []).append(ratio)
                ratios.setdefault("*", []).append(ratio)
        self.correction = {k: statistics.median(v) for k, v in ratios.items()}


def _group(cfg: TileConfig) -> str:
    return f"{cfg.isa}:{cfg.mr}x{cfg.nr}"


class GemmModel(TuningModel):
    """The GEMM cost model above as a tuning session's ranking: rank, predict, calibrate by
    register tile."""

    defaults = (12, 4, 4)
    learns = True

    def __init__(self, plan: Any, target: Any) -> None:
        self.cost = CostModel(plan, target)

    def rank(self, configs: list) -> list[tuple[Any, float]]:
        return self.cost.rank(configs)

    def estimate(self, cfg: Any) -> float:
        return self.cost.estimate(cfg).gflops

    def learn(self, measured: list[tuple[Any, float]]) -> None:
        self.cost.calibrate(measured)

    def parse(self, text: str) -> Any:
        return parse_config(text, TileConfig())

    def identity(self, cfg: Any) -> Hashable:
        # nc is derived from kc, nr, par and threads (space.block_nc): a step in one searched
        # knob lands on the legal config whatever nc it carried
        return (cfg.isa, cfg.mr, cfg.nr, cfg.kc, cfg.mc, cfg.ku, cfg.pf, cfg.par, cfg.threads,
                cfg.path)

    @staticmethod
    def family(cfg: Any) -> tuple:
        """What the first measurements spread over: the register tile and its path."""
        return cfg.isa, cfg.mr, cfg.nr, cfg.path
