"""Flash-style fused attention kernel (online softmax) recognised from multi-statement ODL.

Recognised statements (any index names, any leading batch/head indices P, any element layout of
Q, K, V, and any elementwise score expression around the Q.K sum: a scale, a `where` mask over
index values, an additive bias read at [P, i, j]):
    s[P, i, j] = f(sum[d](Q[.. i, d ..] * K[.. j, d ..]))   mx[P, i] = max[j](s[P, i, j])
    p[P, i, j] = exp(s[P, i, j] - mx[P, i])                  l[P, i] = sum[j](p[P, i, j])
    O[P, i, e] = sum[j](p[P, i, j] * V[.. j, e ..]) / l[P, i]
One program per (P, BLOCK_M query rows): the Q tile is loaded once, BLOCK_N key blocks stream
through with an online softmax (running max m, running sum l, rescaled accumulator), so the score
matrix is never written. A causal mask `where(j <= i + c, ..)` (c >= 0) ends the key loop at the
block's last visible key: fully masked blocks are skipped.
"""

from __future__ import annotations

from uol_core.backends.triton.expr import TL_DTYPES, Ctx, ExprEmitter, Writer, extent_code, safe
from uol_core.backends.triton.generic import KernelPart, acc_dtype, store_dtype
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import (
    Access,
    Affine,
    DType,
    Op,
    walk,
)
from uol_core.plans import AttentionPlan, attention_plan

HALF = (DType.f16, DType.bf16)


# The Triton template renders the shared plan (plans/attention.py).
FlashPlan = AttentionPlan


def flash_plan(op: Op) -> FlashPlan | None:
    """The shared attention plan when this template takes it: the five-statement form (no
    saves) with an elementwise score expression; any float type and operand layout."""
    plan = attention_plan(op)
    if plan is None or plan.split or any(plan.saves) or not plan.score_elementwise:
        return None
    return plan


def emit_flash(op: Op, plan: FlashPlan, cfg: dict) -> KernelPart:
    """The fused kernel: Q tile once, online softmax over key blocks, one store of O."""
    s, mx, p, lsum, o = op.stmts
    ext_s, ext_o = stmt_extents(op, 0), stmt_extents(op, 4)
    free = ext_s.free
    pre_ext = [free[x] for x in plan.prefix]
    S, T = extent_code(free[plan.i]), extent_code(free[plan.j])
    D = extent_code(ext_s.reductions[plan.reduce][plan.d])
    E = extent_code(ext_o.free[plan.o_names[-1]])
    bias = [x.tensor for x in walk(s.expr) if isinstance(x, Access)
            and x.tensor not in (plan.q.tensor, plan.k.tensor)]
    tensors = list(dict.fromkeys([plan.q.tensor, plan.k.tensor, plan.v.tensor, *bias, plan.out]))
    params = [f"{safe(t)}_ptr" for t in tensors] + [safe(x) for x in op.dims]
    consts = ["BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_E"]
    w = Writer(set(params) | set(consts))
    dt = acc_dtype(op)
    em = ExprEmitter(op, w, dt)
    em.stmt_index = 0
    e = w.emit
    types = {op.tensor(x).dtype for x in (plan.q.tensor, plan.k.tensor, plan.v.tensor)}
    half = TL_DTYPES[next(iter(types))] if len(types) == 1 and types <= set(HALF) else None
    prec = cfg.get("input_precision", "ieee")

    def dot(a: str, b: str) -> str:
        if dt == "tl.float64":  # tl.dot has no f64: a broadcast product summed over k
            return f"tl.sum({a}[:, :, None] * {b}[None, :, :], axis=1)"
        if half:
            return f"tl.dot({a}, {b})"
        return f'tl.dot({a}, {b}, input_precision="{prec}")'

    def load(acc: Access, ctx: Ctx, base: str) -> str:
        off, _ = em.offset(acc.tensor, acc.indices, ctx)
        var = w.fresh(base)
        conv = "" if half or op.tensor(acc.tensor).dtype not in HALF else ".to(tl.float32)"
        e(f"{var} = tl.load({safe(acc.tensor)}_ptr + {off}, mask={ctx.mask()}, other=0.0){conv}")
        return var

    w.odl_line = s.line
    e("# one program per (batch/head, BLOCK_M query rows); keys stream in BLOCK_N blocks")
    pid_m, pid_b = w.fresh("pid_m"), w.fresh("pid_bh")
    e(f"{pid_m} = tl.program_id(0)")
    e(f"{pid_b} = tl.program_id(1)")
    pre_vars = em.decompose(pid_b, plan.prefix, pre_ext) if plan.prefix else []
    om, od, oe = w.fresh("offs_m"), w.fresh("offs_d"), w.fresh("offs_e")
    mm, md, me = w.fresh("mask_m"), w.fresh("mask_d"), w.fresh("mask_e")
    e(f"{om} = {pid_m} * BLOCK_M + tl.arange(0, BLOCK_M)")
    e(f"{od} = tl.arange(0, BLOCK_D)")
    e(f"{oe} = tl.arange(0, BLOCK_E)")
    e(f"{mm} = {om} < {S}")
    e(f"{md} = {od} < {D}")
    e(f"{me} = {oe} < {E}")
    base = dict(zip(plan.prefix, ((v, None) for v in pre_vars)))
    q_ctx = Ctx(["BLOCK_M", "BLOCK_D"], {**base, plan.i: (om, 0), plan.d: (od, 1)},
                [(mm, 0), (md, 1)])
    e(f"# ODL line {s.line}: the {plan.q.tensor} tile is loaded once and reused for every key block")
    q = load(plan.q, q_ctx, "q")
    w.odl_line = mx.line
    e(f"# ODL lines {mx.line}-{lsum.line}: online softmax state (running max, running sum)")
    m_i, l_i = w.fresh("m_i"), w.fresh("l_i")
    e(f"{m_i} = tl.full([BLOCK_M], float(\"-inf\"), {dt})")
    e(f"{l_i} = tl.zeros([BLOCK_M], {dt})")
    w.odl_line = o.line
    acc = w.fresh("acc")
    e(f"{acc} = tl.zeros([BLOCK_M, BLOCK_E], {dt})")
    w.odl_line = s.line
    hi = w.fresh("hi")
    if plan.causal is not None:
        e(f"# causal mask (j <= i + {plan.causal}): key blocks past this block's diagonal are "
          "fully masked, skipped")
        plus = f" + {plan.causal}" if plan.causal else ""
        e(f"{hi} = tl.minimum({T}, ({pid_m} + 1) * BLOCK_M{plus})")
    else:
        e(f"{hi} = {T}")
    start = w.fresh("start_n")
    e(f"for {start} in range(0, {hi}, BLOCK_N):")
    w.depth += 1
    on, mn = w.fresh("offs_n"), w.fresh("mask_n")
    e(f"{on} = {start} + tl.arange(0, BLOCK_N)")
    e(f"{mn} = {on} < {T}")
    e(f"# ODL line {s.line}: scores of this key block, in registers only")
    k_ctx = Ctx(["BLOCK_D", "BLOCK_N"], {**base, plan.d: (od, 0), plan.j: (on, 1)},
                [(md, 0), (mn, 1)])
    kt = load(plan.k, k_ctx, "kt")
    qk = w.fresh("qk")
    e(f"{qk} = {dot(q, kt)}")
    em.overrides[id(plan.reduce)] = qk
    s_ctx = Ctx(["BLOCK_M", "BLOCK_N"], {**base, plan.i: (om, 0), plan.j: (on, 1)},
                [(mm, 0), (mn, 1)])
    value = em.expr(s.expr, s_ctx)
    sv = w.fresh("s")
    e(f"{sv} = tl.zeros([BLOCK_M, BLOCK_N], {dt}) + {value}")
    e(f"{sv} = tl.where({mn}[None, :], {sv}, float(\"-inf\"))  # keys past the end count nothing")
    w.odl_line = mx.line
    e(f"# ODL line {mx.line}: running row max")
    m_new = w.fresh("m_new")
    e(f"{m_new} = tl.maximum({m_i}, tl.max({sv}, axis=1))")
    w.odl_line = p.line
    e(f"# ODL line {p.line}: exp(s - max); alpha rescales what was summed under the old max")
    alpha, pv = w.fresh("alpha"), w.fresh("p")
    e(f"{alpha} = tl.exp({m_i} - {m_new})")
    e(f"{pv} = tl.exp({sv} - {m_new}[:, None])")
    w.odl_line = lsum.line
    e(f"# ODL line {lsum.line}: running row sum")
    e(f"{l_i} = {l_i} * {alpha} + tl.sum({pv}, axis=1)")
    w.odl_line = o.line
    e(f"# ODL line {o.line}: rescaled accumulator of p @ {plan.v.tensor}")
    pre_o = dict(zip(plan.o_names[:-2], ((v, None) for v in pre_vars)))
    v_ctx = Ctx(["BLOCK_N", "BLOCK_E"], {**pre_o, plan.jj: (on, 0), plan.o_names[-1]: (oe, 1)},
                [(mn, 0), (me, 1)])
    vv = load(plan.v, v_ctx, "v")
    pcast = f"{pv}.to({half})" if half else pv
    e(f"{acc} = {acc} * {alpha}[:, None] + {dot(pcast, vv)}")
    w.odl_line = mx.line
    e(f"{m_i} = {m_new}")
    w.depth -= 1
    w.odl_line = o.line
    e(f"# ODL line {o.line}: divide by the row sum and store")
    out = w.fresh("out")
    e(f"{out} = {acc} / {l_i}[:, None]")
    o_ctx = Ctx(["BLOCK_M", "BLOCK_E"], {**pre_o, plan.o_names[-2]: (om, 0),
                                          plan.o_names[-1]: (oe, 1)}, [(mm, 0), (me, 1)])
    off, _ = em.offset(plan.out, tuple(Affine.of(x) for x in plan.o_names), o_ctx)
    e(f"tl.store({safe(plan.out)}_ptr + {off}, {out}.to({store_dtype(op, plan.out)}), "
      f"mask={o_ctx.mask()})")
    lines, odl = w.text()
    bm, bn = int(cfg.get("BLOCK_M", 32)), int(cfg.get("BLOCK_N", 32))
    values = {"BLOCK_M": str(bm), "BLOCK_N": str(bn),
              "BLOCK_D": f"max(16, triton.next_power_of_2({D}))",
              "BLOCK_E": f"max(16, triton.next_power_of_2({E}))"}
    batch = " * ".join(extent_code(x) for x in pre_ext) or "1"
    grid = f"(triton.cdiv({S}, {bm}), {batch})"
    return KernelPart(f"{op.name}_flash", tensors, values, grid, lines, odl, [0, 1, 2, 3, 4],
                      "flash", launch_opts={"num_warps": str(cfg.get("num_warps", 4)),
                                            "num_stages": str(cfg.get("num_stages", 2))})
