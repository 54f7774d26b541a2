"""Flash-attention backward in C: the derived gradient of naive attention as one kernel.

Recognised: the op `derive_grad` returns for a forward that c_attention.flash_plan takes. The
plan rebuilds that forward from the gradient's recomputed score and probability statements and
its saved tensors, derives it again and compares statement by statement (up to index names):
the kernel then computes exactly what the ODL says, and any other op gets None (generic path).

With P = exp(s - mx) / l recomputed from Q, K and the saved row statistics (mx, l), per slice
(the batch indices) and block of BK keys, looping over blocks of BQ queries:
    Di = rowsum(dO * O)     dP^T = V dO^T      dS^T = P^T (dP^T - Di) f'(q.k)
    dV += P^T dO          dK += dS^T Q          dQ += dS K (a per-thread partial, summed at the end)
f' is the slope of the score expression in the Q.K sum (the scale; 0 where a mask cuts). dK and
dV of a key block stay in per-task buffers, so tasks never write the same rows. dQ: where the
slices split evenly over the threads, each thread takes whole slices and sums a slice's dQ in
one buffer, written once; else each thread adds into its own dQ partial of every slice, summed
at the end (static schedule either way: the sums are deterministic). Q and dO rows are read in
place unless the tiles need them zero-padded; Q^T and dO^T are packed per query block. The derived op's
d_mx term (the gradient through the row max) is left out: d_mx = -sum_j d_p p =
-(dO . O) - d_l l = 0 exactly, the softmax does not depend on its shift (torch's SDPA
backward leaves it out for the same reason); so are z_mx and the where(s == mx) it feeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from uol_core.backends.base import KernelSource
from uol_core.backends.c.attention import backward_sve as c_attention_bwd_sve
from uol_core.backends.c.attention import forward_sve as c_attention_sve
from uol_core.backends.c.attention.backward_body import body, owns_slices
from uol_core.backends.c.attention.forward import MAX_HEAD, _addr, flash_plan, whole_tiles
from uol_core.backends.c.attention.tiles import Tiles, acc_kernel, choose_tiles, score_kernel
from uol_core.backends.c.text.expr import PRELUDE, ExprContext, render
from uol_core.backends.c.text.frame import includes, open_entry
from uol_core.backends.c.text.names import index_id, size_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.check import check_op
from uol_core.odl.derivatives import Differentiator, substitute
from uol_core.odl.errors import OdlError
from uol_core.odl.grad import derive_grad
from uol_core.odl.grad_rewrite import alpha_normal, replace_subexpression
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    DType,
    Expr,
    Op,
    Reduce,
    Stmt,
    TensorDecl,
    walk,
)
from uol_core.odl.masks import causal_offset
from uol_core.odl.simplify import simplify

GENERATOR = "uol-c-flash-bwd-1"
# The blocks a config asks for when it names none (backends/c/attention/space.py offers others).
BACKWARD_BLOCKS = {"bq": 64, "bk": 64}


@dataclass(frozen=True)
class FlashGradPlan:
    """Tensors and indices of a recognised attention gradient."""

    q: str
    k: str
    v: str
    mx: str
    l: str  # noqa: E741 (the row sum's name in the ODL)
    o: str  # the output O = sum[j](p * V) / l, kept for Di = dO . O
    do: str
    dq: str
    dk: str
    dv: str
    prefix: tuple[str, ...]
    i: str
    j: str
    score: Stmt  # s[P, i, j] = f(sum[d](Q * K)), recomputed
    reduce: Reduce  # the Q.K sum inside it
    slope: Expr  # f' over i, j and constants
    causal: int | None = None  # c of a `j <= i + c` mask: query blocks wholly before it skipped


def flash_grad_plan(op: Op) -> FlashGradPlan | None:
    """The plan when `op` is the derived gradient of a flash-recognised attention, else None."""

    if not op.name.endswith("_grad") or len(op.inputs) != 7 or len(op.outputs) != 3 or \
            len(op.stmts) < 2 or {d.dtype for d in op.inputs + op.outputs + op.locals} != {DType.f32}:
        return None
    forward = _forward_of(op)
    if forward is None or flash_plan(forward) is None:
        return None
    try:
        grad = derive_grad(forward, recompute_wide=True)
    except OdlError:
        return None
    if (grad.op.inputs, grad.op.outputs) != (op.inputs, op.outputs) or \
            [_canonical(s) for s in grad.op.stmts] != [_canonical(s) for s in op.stmts]:
        return None
    score = op.stmts[0]
    reduce = next(n for n in walk(score.expr) if isinstance(n, Reduce))
    slope = _slope(score, reduce)
    if slope is None:
        return None
    q, k, v, o, mx, lsum, do = (d.name for d in op.inputs)
    dq, dk, dv = (grad.grad_of_input[n] for n in (q, k, v))
    *prefix, i, j = score.indices
    return FlashGradPlan(q, k, v, mx, lsum, o, do, dq, dk, dv, tuple(prefix), i, j, score,
                         reduce, slope, causal_offset(score.expr, i, j))


def _forward_of(op: Op) -> Op | None:
    """The attention forward whose gradient `op` would be, from its first two statements
    (s and p, recomputed) and its inputs (Q, K, V, then the saved O, mx and l, and dO)."""

    s, p = op.stmts[:2]
    q, k, v, o, mx, lsum, do = op.inputs
    e = p.expr
    if not (isinstance(e, Call) and e.fn == "exp" and isinstance(e.args[0], Binary)
            and isinstance(e.args[0].rhs, Access) and e.args[0].rhs.tensor == mx.name
            and do.name == f"d{o.name}" and len(s.indices) >= 2):
        return None
    *pre, i, _ = s.indices
    taken = set(op.dims) | {x for st in (s, p) for x in st.indices} | {
        x for st in (s, p) for n in walk(st.expr) if isinstance(n, Reduce) for x in n.indices}
    jj, ee = (next(f"{b}{n}" for n in range(1, 99) if f"{b}{n}" not in taken) for b in ("j", "e"))

    def at(tensor: str, *names: str) -> Access:
        return Access(tensor, tuple(Affine.of(x) for x in names))

    out = do.name[1:]
    stmts = (s, Stmt(mx.name, (*pre, i), Reduce("max", (jj,), at(s.target, *pre, i, jj))), p,
             Stmt(lsum.name, (*pre, i), Reduce("sum", (jj,), at(p.target, *pre, i, jj))),
             Stmt(out, (*pre, i, ee), Binary("div", Reduce("sum", (jj,), Binary(
                 "mul", at(p.target, *pre, i, jj), at(v.name, *pre, jj, ee))), at(lsum.name, *pre, i))))
    try:
        return check_op(Op(op.name[:-len("_grad")], (q, k, v), (TensorDecl(out, do.dtype, do.shape),),
                           stmts))
    except OdlError:
        return None


def _canonical(stmt: Stmt) -> tuple:
    """A statement with its own and its reductions' index names replaced by position."""

    names = {x: Affine.of(f"__s{n}") for n, x in enumerate(stmt.indices)}
    extents = tuple((names[x].pure_symbol, f) for x, f in stmt.extents)
    return stmt.target, len(stmt.indices), extents, alpha_normal(substitute(stmt.expr, names))


def _slope(score: Stmt, reduce: Reduce) -> Expr | None:
    """d f / d (Q.K sum) of the score expression, when it reads no tensor (a scale, a mask)."""

    *_, i, j = score.indices
    z = Access("__qk", (Affine.of(i), Affine.of(j)))
    expr = replace_subexpression(score.expr, alpha_normal(reduce), z)
    slope = simplify(Differentiator(z, lambda b: f"__{b}", {}).d(expr))
    return None if any(isinstance(n, (Access, Reduce)) for n in walk(slope)) else slope


def emit(op: Op, plan: FlashGradPlan, sizes: Mapping[str, int], target=None,
         config: Mapping | None = None) -> KernelSource | None:
    """The flash backward kernel, or None when head sizes exceed the stack buffers."""
    cfg = {**BACKWARD_BLOCKS, "threads": int(getattr(target, "cores", 0) or 1), **(config or {})}
    S, T, D, E, NB = grad_extents(op, plan, sizes)
    if D > MAX_HEAD or E > MAX_HEAD:
        return None

    vla = c_attention_sve.vla_isa(target)
    if vla is not None:  # a length-agnostic ISA (SVE): the head dimension on the lanes
        return c_attention_bwd_sve.emit(op, plan, sizes, target, config, vla)
    t = choose_tiles(target)
    n = _blocks(t, S, T, D, E, cfg, int(getattr(target, "l2_bytes", 0) or 1 << 20))
    threads = int(cfg["threads"])
    dq_text = ("the thread's buffer of its slice (slices split evenly over the threads)"
               if owns_slices(NB, threads) else
               "the thread's own partial (summed at the end, in thread order)")
    rem = T % t.mr
    keys_text = (f"The last keys take tiles of {rem} row{'s' if rem > 1 else ''}: no padding "
                 "key is ever computed." if rem else "The keys fill whole register tiles.")
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"""/* {op.name}: flash-attention backward generated by UOL ({GENERATOR}); S={S} T={T} D={D}
   E={E}, {NB} slices, BQ={n['BQ']} BK={n['BK']}, {t.mr}x{t.qt} register tiles ({t.isa}), {threads} threads.
   The S x T matrices (s, p, d_p, d_s) are never stored: per slice and block of BK keys (one
   task), for every block of BQ queries, S^T = K Q^T and dP^T = V dO^T in register tiles, then
   P^T = exp(s - mx) / l and dS^T = P^T (dP^T - Di) f', then dV += P^T dO and dK += dS^T Q into
   the task's own BK-row buffers and dQ += dS K into {dq_text}. Q^T and dO^T (query on the
   lanes) and Di are packed once in a first pass, and Q, dO and K rows (head dimension on the
   lanes) too where they need padding to whole tiles. {keys_text}
   Left out: d_mx and z_mx (the gradient through the row max is exactly zero). */""")
    w.emit(includes("stdint.h", "stdlib.h", "string.h", "math.h", "omp.h") + PRELUDE)
    w.emit(t.prelude())
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit("")
    line = op.stmts[0].line
    # key tiles of MR rows, and one of T % MR rows for the last keys (no padding keys computed)
    for rows in sorted({t.mr, T % t.mr} - {0}, reverse=True):
        w.emit(score_kernel(t, D, n["BQ"], n["BQ"], f"uol_qk_tile{rows}", rows), line)
        w.emit(score_kernel(t, E, n["BQ"], n["BQ"], f"uol_vdo_tile{rows}", rows), line)
        w.emit(acc_kernel(t, "uol_dk_tile", rows, n["BQ"], 1, n["DP"], n["DP"]), line)
        w.emit(acc_kernel(t, "uol_dv_tile", rows, n["BQ"], 1, n["EP"], n["EP"]), line)
    for rows in sorted({t.mr, n["BQ"] % t.mr} - {0}, reverse=True):
        w.emit(acc_kernel(t, "uol_dq_tile", rows, 1, n["BQ"], n["DP"], n["DP"]), line)
    open_entry(w, entry, args, len(op.inputs))

    body(w, op, plan, dict(n, S=S, T=T, D=D, E=E, NB=NB, THREADS=threads), t,
         _renderer(op, plan, sizes),
         [f.evaluate(dict(sizes)) for f in op.tensor(plan.q).shape[:len(plan.prefix)]])
    meta = {"isa": t.isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": threads,
            "generator": GENERATOR, "groups": 1, "reduction_length": max(S, T, D, E),
            "fusion": "flash backward: s, p, d_p, d_s recomputed per tile (never stored); "
                      "dQ, dK, dV in one kernel"}
    return w.source(entry, op.name, dict(cfg), meta)


def grad_extents(op: Op, plan: FlashGradPlan, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """(S, T, D, E, slices) of a recognised attention gradient."""
    shape = {d.name: [f.evaluate(dict(sizes)) for f in d.shape] for d in op.inputs}
    n_pre = len(plan.prefix)
    S, D = shape[plan.q][n_pre:]
    T, E = shape[plan.v][n_pre:]
    return S, T, D, E, math.prod(shape[plan.q][:n_pre])


def task_bytes(bq: int, bk: int, D: int, E: int, t: Tiles) -> int:
    """A task's working set (st, dt, dK, dV; Q, dO both ways, dQ; the K block), which the
    emitter keeps within half of L2."""
    DP, EP = (-(-x // t.qt) * t.qt for x in (D, E))
    return 4 * (2 * bk * bq + bk * (DP + EP) + bq * (D + E + 2 * DP + EP) + bk * DP)


def shrink_blocks(bq: int, bk: int, q_unit: int, k_unit: int,
                  fits: Callable[[int, int], bool]) -> tuple[int, int]:
    """Halve the larger block that can still shrink (whole units) until `fits(bq, bk)`
    or both are one unit."""
    while not fits(bq, bk) and (bq > q_unit or bk > k_unit):
        if bk <= k_unit or (bq >= bk and bq > q_unit):
            bq = max(q_unit, bq // 2 // q_unit * q_unit)
        else:
            bk = max(k_unit, bk // 2 // k_unit * k_unit)
    return bq, bk


def backward_fits_l2(bq: int, bk: int, D: int, E: int, target) -> bool:
    """Whether a task of bq queries x bk keys stays within half of the target's L2, the bound
    this emitter (or the SVE one) shrinks its blocks to."""

    half = int(getattr(target, "l2_bytes", 0) or 1 << 20) // 2
    if c_attention_sve.vla_isa(target) is not None:
        return c_attention_bwd_sve.task_bytes(bq, bk, D + E) <= half
    return task_bytes(bq, bk, D, E, choose_tiles(target)) <= half


def _blocks(t: Tiles, S: int, T: int, D: int, E: int, cfg: Mapping, l2: int) -> dict[str, int]:
    """Block sizes: BQ whole query tiles, BK whole key tiles, the task's working set within
    half the target's L2 (an HFL fact) so every re-read of a block hits the cache."""
    DP, EP = (-(-x // t.qt) * t.qt for x in (D, E))

    bq, bk = whole_tiles(cfg["bq"], t.qt, S), whole_tiles(cfg["bk"], t.mr, T)

    bq, bk = shrink_blocks(bq, bk, t.qt, t.mr,
                           lambda bq, bk: task_bytes(bq, bk, D, E, t) <= l2 // 2)
    return {"BQ": bq, "BK": bk, "DP": DP, "EP": EP, "SP": -(-S // bq) * bq,
            "KB": -(-T // bk)}


def _renderer(op: Op, plan: FlashGradPlan, sizes: Mapping[str, int]):
    """C text of the score expression (sum in st[jj][ii]) and of its slope f'."""
    ctx = ExprContext("float", {x: op.tensor(x).dtype for x in op.tensors}, _addr(op, sizes),
                      lambda a: "1", {}, set(op.dims))
    ctx.cache[id(plan.reduce)] = "st[jj][ii]"
    return render(plan.score.expr, ctx), render(plan.slope, ctx)


def uses_index(text: str, name: str) -> bool:
    """Whether rendered C reads index variable `name` (so the kernel must define it)."""
    return index_id(name) in text
