"""GPU (Triton) tile space: variables, named hard constraints from the HFL target, cost ranking.

Constraints follow Triton's and Inductor's pruning (shared memory, registers, warps per tile,
problem fit) plus MMA divisibility from the target's MMA shapes; the cost model is a roofline
with wave quantisation. Every assignment a constraint removes is counted under its name.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import constraint

from uol_core.acg.space_core import Config, Constraint, Space, count_removed
from uol_core.backends.triton.attention import flash_plan
from uol_core.backends.triton.row import row_block_limit
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Op
from uol_core.odl.patterns import classify
from uol_core.plans.gemm import matmul_plan
from uol_core.plans.rows import row_split

HFL_DTYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "i8": "int8"}
GEMM_DOMAINS = {
    "BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256],
    "BLOCK_K": [16, 32, 64, 128], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2, 3, 4, 5],
    "GROUP_M": [1, 4, 8, 16], "SPLIT_K": [1, 2, 4, 8],
}
FLASH_DOMAINS = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128],
                 "num_warps": [1, 2, 4, 8], "num_stages": [1, 2, 3, 4]}
GENERIC_DOMAINS = {"BLOCK": [64, 128, 256, 512, 1024], "BLOCK_R": [16, 32, 64, 128],
                   "num_warps": [1, 2, 4, 8]}


def gpu_rule(name: str, variables: tuple[str, ...], test: Callable[..., bool], why: str,
         facts: tuple[str, ...] = ()) -> Constraint:
    """A named hard constraint over some variables, with the reason shown to the user
    (the `Constraint`'s formula) and the HFL fields it reads."""
    return Constraint(name, why, variables, test, facts)


def first_rejections(space: Space) -> dict[str, int]:
    """Rule name -> assignments of the full product it was the first (in rule order) to reject.
    Counted on request (a fallback's reason): enumerating the full product costs more than
    solving it."""
    names = list(space.domains)
    removed = {r.name: 0 for r in space.constraints}
    for values in itertools.product(*space.domains.values()):
        cfg = dict(zip(names, values))
        for rule in space.constraints:
            if not rule.test(*(cfg[v] for v in rule.variables)):
                removed[rule.name] += 1
                break
    return removed


SMEM_FACTS = ("smem_per_block_optin_bytes", "smem_per_block_bytes")


def _shared_memory(smem: int | None, rule: Constraint) -> list[Constraint]:
    """The shared-memory rule, or none for a target without shared memory (a CPU target, where
    Triton runs interpreted and no tile can overflow a GPU's shared memory)."""
    return [rule] if smem else []


def gemm_problem(op: Op, sizes: dict[str, int]) -> dict[str, Any]:
    """M, N, K, batch and element type of the op's main contraction (or None fields)."""
    pattern = classify(op)
    main = pattern.main_statement
    if pattern.kind != "contraction" or main.contraction is None:
        return {}
    ext = stmt_extents(op, main.index)
    roles = main.contraction

    def prod(names, table) -> int:
        return math.prod(table[n].evaluate(sizes) for n in names)

    red = next(v for v in ext.reductions.values() if set(v) == set(roles.k))
    dtype = op.tensor(roles.lhs).dtype.value
    return {"M": prod(roles.m, ext.free), "N": prod(roles.n, ext.free), "K": prod(roles.k, red),
            "batch": prod(roles.batch, ext.free), "dtype": dtype,
            "epilogue": bool(main.epilogue) or len(op.stmts) > 1,
            "bytes": op.tensor(roles.lhs).dtype.itemsize}


def gemm_rules(p: dict[str, Any], target: Any) -> list[Constraint]:
    """The hard constraints of a Triton GEMM tile on `target` (attribute names of the HFL)."""
    b = p["bytes"]
    smem = target.smem_per_block_optin_bytes or target.smem_per_block_bytes
    regs_max = target.registers_per_thread_max or 255
    warp = target.warp_size or 32
    mma = (target.mma_shapes or {}).get(HFL_DTYPES.get(p["dtype"], "fp32")) or \
        (target.mma_shapes or {}).get("tf32") or [[16, 8, 8]]
    mm, mn, mk = min(s[0] for s in mma), min(s[1] for s in mma), min(s[2] for s in mma)

    def fits(block: int, dim: int) -> bool:
        return block <= max(16, 1 << max(dim - 1, 0).bit_length())

    return [
        *_shared_memory(smem, gpu_rule(
            "shared_memory", ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"),
            lambda bm, bn, bk, s: b * (bm * bk + bk * bn) * s <= smem,
            f"{b} B x (BM*BK + BK*BN) x num_stages must fit {smem} B of shared memory per block",
            SMEM_FACTS)),
        gpu_rule("registers", ("BLOCK_M", "BLOCK_N", "num_warps"),
             lambda bm, bn, w: math.ceil(bm * bn / (warp * w)) + 32 <= regs_max,
             f"fp32 accumulators per thread + 32 must stay within {regs_max} registers"),
        gpu_rule("warps_per_tile", ("BLOCK_M", "BLOCK_N", "num_warps"),
             lambda bm, bn, w: w <= max(1, bm * bn // 256) and
             warp * w <= (target.max_threads_per_block or 1024),
             "each warp needs at least a 16x16 piece of the tile; threads <= max per block"),
        gpu_rule("mma_divisibility", ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
             lambda bm, bn, bk: bm % mm == 0 and bn % mn == 0 and bk % mk == 0,
             f"tiles must be multiples of the {p['dtype']} MMA shape {mm}x{mn}x{mk}"),
        gpu_rule("problem_fit", ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
             lambda bm, bn, bk: fits(bm, p["M"]) and fits(bn, p["N"]) and fits(bk, p["K"]),
             f"a tile no larger than the next power of two of M={p['M']}, N={p['N']}, K={p['K']}"),
        gpu_rule("split_k", ("SPLIT_K", "BLOCK_K"),
             lambda sk, bk: sk == 1 or (not p["epilogue"] and p["dtype"] in ("f16", "f32")
                                        and sk <= math.ceil(p["K"] / bk)),
             "split-K adds partial sums atomically: a bare f16/f32 GEMM with K/BLOCK_K >= SPLIT_K"),
        gpu_rule("group_m", ("GROUP_M", "BLOCK_M"),
             lambda g, bm: g == 1 or math.ceil(p["M"] / bm) > 1,
             "row grouping only matters with more than one row of tiles"),
    ]


def flash_problem(op: Op, sizes: dict[str, int]) -> dict[str, Any]:
    """S, T, D, E, batch and element type when the op is the flash attention structure."""

    plan = flash_plan(op)
    if plan is None:
        return {}
    ext, ext_o = stmt_extents(op, 0), stmt_extents(op, len(op.stmts) - 1)
    dtype = op.tensor(plan.q.tensor).dtype
    return {"flash": True, "S": ext.free[plan.i].evaluate(sizes),
            "T": ext.free[plan.j].evaluate(sizes),
            "D": ext.reductions[plan.reduce][plan.d].evaluate(sizes),
            "E": ext_o.free[plan.o_names[-1]].evaluate(sizes),
            "batch": math.prod(ext.free[x].evaluate(sizes) for x in plan.prefix),
            "dtype": dtype.value, "bytes": dtype.itemsize, "causal": plan.causal is not None}


def flash_rules(p: dict[str, Any], target: Any) -> list[Constraint]:
    """Constraints of the flash kernel: K/V blocks in shared memory, S and O tiles in registers."""
    b = p["bytes"]
    smem = target.smem_per_block_optin_bytes or target.smem_per_block_bytes
    regs_max = target.registers_per_thread_max or 255
    warp = target.warp_size or 32
    d = max(16, 1 << max(p["D"] - 1, 0).bit_length())
    e = max(16, 1 << max(p["E"] - 1, 0).bit_length())

    def fits(block: int, dim: int) -> bool:
        return block <= max(16, 1 << max(dim - 1, 0).bit_length())

    return [
        *_shared_memory(smem, gpu_rule(
            "shared_memory", ("BLOCK_M", "BLOCK_N", "num_stages"),
            lambda bm, bn, s: b * (bm * d + s * bn * (d + e)) <= smem,
            f"{b} B x (BM*D + num_stages*BN*(D+E)) must fit {smem} B of shared memory",
            SMEM_FACTS)),
        gpu_rule("registers", ("BLOCK_M", "BLOCK_N", "num_warps"),
             lambda bm, bn, w: math.ceil(bm * (bn + e) / (warp * w)) + 32 <= regs_max,
             f"score and accumulator tiles per thread + 32 within {regs_max} registers"),
        *([] if b <= 2 else [gpu_rule(
            "fma_operand_registers", ("BLOCK_M", "BLOCK_N", "num_warps"),
            lambda bm, bn, w: math.ceil((bm * d + d * bn + bn * e + bm * bn + bm * e) /
                                        (warp * w)) <= regs_max // 2,
            f"{p['dtype']} dots without tensor cores hold Q, K, V, S and O tiles in registers: "
            f"at most half of {regs_max} per thread (64x64 blocks spilled: 8.6 ms vs 0.34 ms "
            "for 16x64 on an H200, S=4096 D=64)")]),
        gpu_rule("warps_per_tile", ("BLOCK_M", "BLOCK_N", "num_warps"),
             lambda bm, bn, w: w <= max(1, bm * bn // 256) and
             warp * w <= (target.max_threads_per_block or 1024),
             "each warp needs at least a 16x16 piece of the score tile"),
        gpu_rule("problem_fit", ("BLOCK_M", "BLOCK_N"),
             lambda bm, bn: fits(bm, p["S"]) and fits(bn, p["T"]),
             f"blocks no larger than the next power of two of S={p['S']}, T={p['T']}"),
    ]


ROW_DOMAINS = {"num_warps": [1, 2, 4, 8]}  # a row kernel sizes its tile from the row itself


def row_problem(op: Op, sizes: dict[str, int]) -> dict[str, Any]:
    """Rows and columns when the Triton emitter makes one fused row kernel of the op (no GEMM
    statement, every reduction over the whole row: softmax, layernorm, ...), else {}."""

    if any(matmul_plan(op, i) is not None for i in range(len(op.stmts))):
        return {}
    split = row_split(op)
    if split is None or not set(op.dims) <= set(sizes):
        return {}
    dtype = max((d.dtype for d in op.inputs + op.outputs), key=lambda t: t.itemsize)
    return {"rows": True, "R": math.prod(e.evaluate(sizes) for e in split.rows),
            "C": math.prod(e.evaluate(sizes) for e in split.cols),
            "dtype": dtype.value, "bytes": dtype.itemsize,
            "tensors": len(op.inputs) + len(op.outputs)}


def row_block(problem: dict[str, Any], num_warps: int, target: Any) -> int:
    """The BLOCK_C the row kernel launches with at `num_warps`: the row's next power of two,
    capped by what one program keeps in registers (longer rows loop over chunks of it)."""

    whole = 1 << max(problem["C"] - 1, 0).bit_length()
    return min(whole, row_block_limit(target, num_warps))


def row_rules(p: dict[str, Any], target: Any) -> list[Constraint]:
    """Constraints of the fused row kernel over the block it really uses (BLOCK_C from the row)."""
    warp = target.warp_size or 32
    blocks = {w: row_block(p, w, target) for w in ROW_DOMAINS["num_warps"]}
    shown = (f"{blocks[1]}" if len(set(blocks.values())) == 1 else
             ", ".join(f"{b} at {w} warps" for w, b in blocks.items()))
    return [gpu_rule("threads_per_block", ("num_warps",),
                     lambda w: warp * w <= (target.max_threads_per_block or 1024),
                     "threads per block within the target's limit"),
            gpu_rule("elements_per_thread", ("num_warps",),
                     lambda w: w == 1 or blocks[w] >= warp * w,
                     f"every thread owns at least one element of the row tile BLOCK_C "
                     f"(C={p['C']}: BLOCK_C={shown}) >= {warp} x num_warps",
                     ("warp_size", "registers_per_thread_max"))]


def generic_rules(target: Any) -> list[Constraint]:
    """Constraints of the blocked map/reduce kernels."""
    warp = target.warp_size or 32
    return [gpu_rule("threads_per_block", ("num_warps",),
                 lambda w: warp * w <= (target.max_threads_per_block or 1024),
                 "threads per block within the target's limit"),
            gpu_rule("elements_per_thread", ("BLOCK", "num_warps"), lambda bl, w: bl >= warp * w,
                 "every thread owns at least one element of the block")]


def gpu_space(op: Op, sizes: dict[str, int], target: Any) -> Space:
    """Enumerate the legal configs with python-constraint2 and count what each rule removed
    (alone, of the full product: `Constraint.removed`); the tile problem is `facts["problem"]`.

    Every op has a legal config at every size: when no flash or GEMM tile fits (a head dim
    too wide for shared memory, say), the statements fall back to the generic blocked
    kernels, whose rules any target meets, and the problem records why.
    """
    problem = flash_problem(op, sizes) or gemm_problem(op, sizes) or row_problem(op, sizes)
    if problem.get("flash"):
        domains, rules = FLASH_DOMAINS, flash_rules(problem, target)
    elif problem.get("rows"):
        domains, rules = ROW_DOMAINS, row_rules(problem, target)
    else:
        domains = GEMM_DOMAINS if problem else GENERIC_DOMAINS
        rules = gemm_rules(problem, target) if problem else generic_rules(target)
    space = _solve(domains, rules, problem, target)
    if space.configs or not problem:
        return space
    fallback = _solve(GENERIC_DOMAINS, generic_rules(target),
                      {**problem, "fallback": "no " + ("flash" if problem.get("flash") else "GEMM")
                       + " tile fits this target (bound by " + ", ".join(_binding(space))
                       + "): the statements run as generic blocked kernels"}, target)
    fallback.configs = [c.replace(force_generic=1) for c in fallback.configs]
    return fallback


def _binding(space: Space) -> list[str]:
    """The rules that alone reject every tile, else every rule that rejected some."""
    alone = [c.name for c in space.constraints if c.removed == space.product_size]
    return alone or [k for k, v in first_rejections(space).items() if v]


def _solve(domains: dict[str, list], rules: list[Constraint], problem: dict[str, Any],
           target: Any) -> Space:
    csp = constraint.Problem()
    for name, values in domains.items():
        csp.addVariable(name, values)
    for rule in rules:
        csp.addConstraint(rule.test, rule.variables)
    configs = sorted((Config({k: c[k] for k in domains}) for c in csp.getSolutions()),
                     key=lambda c: tuple(c[k] for k in domains))
    return Space(dict(domains), [count_removed(r, domains) for r in rules], configs,
                 family="gpu", target=target, facts={"problem": problem})


def predict(config: dict, problem: dict, target: Any) -> dict[str, float]:
    """Roofline time with wave quantisation for a GEMM (or flash) config (seconds) and its parts."""
    if problem.get("flash"):
        return _predict_flash(config, problem, target)
    if problem.get("rows"):
        return _predict_rows(problem, target)
    m, n, k, batch, b = (problem[x] for x in ("M", "N", "K", "batch", "bytes"))
    peak = (target.peak_gflops or {}).get(HFL_DTYPES.get(problem["dtype"], "fp32"), 1.0) * 1e9
    bw = (target.mem_bandwidth_gbps or 1.0) * 1e9
    bm, bn, sk = config["BLOCK_M"], config["BLOCK_N"], config.get("SPLIT_K", 1)
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * sk * batch
    sms = target.cores or 1
    waves = math.ceil(tiles / sms)
    efficiency = tiles / (sms * waves)  # wave quantisation: the last wave may run part-empty
    flops = 2.0 * m * n * k * batch
    traffic = b * batch * (m * k * math.ceil(n / bn) + k * n * math.ceil(m / bm)) + 4 * m * n * sk
    compute = flops / (peak * efficiency)
    memory = traffic / bw
    return {"time_s": max(compute, memory), "compute_s": compute, "memory_s": memory,
            "wave_efficiency": efficiency, "tiles": tiles, "waves": waves}


def rank(space: Space, target: Any, top: int | None = None) -> list[tuple[dict, dict]]:
    """Configs ordered by predicted time, with the prediction.

    Ties (the roofline cannot see latency hiding) go to GROUP_M 8, then to more bytes in flight
    per operand (BLOCK_K x num_stages, the pipeline depth), then to the larger BLOCK_K.
    """
    problem = space.facts.get("problem")
    if not problem or problem.get("fallback"):
        return [(c, {}) for c in space.configs][:top]
    scored = [(c, predict(c, problem, target)) for c in space.configs]
    if problem.get("rows"):  # one memory-bound time for every config: the warps heuristic
        best = row_warps(row_block(problem, 4, target))
        scored.sort(key=lambda cp: abs(math.log2(cp[0]["num_warps"] / best)))
        return scored[:top] if top else scored
    scored.sort(key=lambda cp: (cp[1]["time_s"], abs(cp[0].get("GROUP_M", 8) - 8),
                                -cp[0].get("BLOCK_K", 1) * cp[0]["num_stages"],
                                -cp[0].get("BLOCK_K", 1)))
    return scored[:top] if top else scored


def _predict_flash(config: dict, problem: dict, target: Any) -> dict[str, float]:
    """Flash attention: Q.K and P.V flops (halved when causal); K and V read once per row block."""
    s, t, d, e, batch, b = (problem[x] for x in ("S", "T", "D", "E", "batch", "bytes"))
    peak = (target.peak_gflops or {}).get(HFL_DTYPES.get(problem["dtype"], "fp32"), 1.0) * 1e9
    bw = (target.mem_bandwidth_gbps or 1.0) * 1e9
    row_blocks = math.ceil(s / config["BLOCK_M"])
    tiles = row_blocks * batch
    sms = target.cores or 1
    waves = math.ceil(tiles / sms)
    efficiency = tiles / (sms * waves)
    part = 0.5 if problem.get("causal") else 1.0
    flops = 2.0 * batch * s * t * (d + e) * part
    traffic = b * batch * (s * d + part * row_blocks * t * (d + e) + s * e)
    compute = flops / (peak * efficiency)
    memory = traffic / bw
    return {"time_s": max(compute, memory), "compute_s": compute, "memory_s": memory,
            "wave_efficiency": efficiency, "tiles": tiles, "waves": waves}


def row_warps(block: int) -> int:
    """Warps per row program by its tile: 4, 8 from 2048 elements, 16 from 4096 (the Triton
    fused-softmax tutorial's rule), within the space's 1 to 8."""
    return 4 if block < 2048 else 8


def _predict_rows(problem: dict, target: Any) -> dict[str, float]:
    """A row kernel reads its inputs and writes its outputs once: the memory roof's time."""
    bw = (target.mem_bandwidth_gbps or 1.0) * 1e9
    traffic = problem["bytes"] * problem["R"] * problem["C"] * problem["tensors"]
    memory = traffic / bw
    return {"time_s": memory, "compute_s": 0.0, "memory_s": memory, "wave_efficiency": 1.0,
            "tiles": problem["R"], "waves": math.ceil(problem["R"] / (target.cores or 1))}
