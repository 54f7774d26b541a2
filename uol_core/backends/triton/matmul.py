"""Tiled Triton matmul for contraction statements: GROUP_M swizzle, split-K, fused epilogue.

Batched matmul puts the batch indices on grid axis 2; a windowed contraction (convolution) is an
implicit GEMM: the operand tiles are gathered through the affine indices (h + r, w + s).
"""

from __future__ import annotations

from uol_core.backends.triton.expr import Ctx, ExprEmitter, Writer, product_code, safe
from uol_core.backends.triton.generic import (
    KernelPart,
    acc_dtype,
    store_dtype,
    tensors_of,
    tiled_reduce,
)
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Affine, DType, Op
from uol_core.plans.gemm import MatmulPlan


def emit_matmul(op: Op, index: int, plan: MatmulPlan, cfg: dict) -> KernelPart:
    """One kernel: a [BLOCK_M, BLOCK_N] output tile per program, K loop of tl.dot, epilogue, store."""
    stmt = op.stmts[index]
    ext = stmt_extents(op, index)
    free = ext.free
    kext = [ext.reductions[plan.node][k] for k in plan.k]
    mtot = product_code([free[i] for i in plan.m])
    ntot = product_code([free[i] for i in plan.n])
    ktot = product_code(kext)
    btot = product_code([free[i] for i in plan.batch])
    split = int(cfg.get("SPLIT_K", 1))
    if plan.epilogue or op.tensor(stmt.target).dtype not in (DType.f32, DType.f16):
        split = 1  # atomics add raw partial sums: only a bare GEMM into f32/f16 may split K
    tensors = tensors_of(op, [index])
    params = [f"{safe(t)}_ptr" for t in tensors] + [safe(d) for d in op.dims]
    consts = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "BLOCK_R"]
    w = Writer(set(params) | set(consts))
    em = ExprEmitter(op, w, acc_dtype(op), tiled_reduce)
    em.stmt_index = index
    w.odl_line = stmt.line
    e = w.emit
    pid, pid_k, pid_b = w.fresh("pid"), w.fresh("pid_k"), w.fresh("pid_b")
    e(f"{pid} = tl.program_id(0)")
    e(f"{pid_k} = tl.program_id(1)")
    e(f"{pid_b} = tl.program_id(2)")
    npm, npn = w.fresh("num_pid_m"), w.fresh("num_pid_n")
    e(f"{npm} = tl.cdiv({mtot}, BLOCK_M)")
    e(f"{npn} = tl.cdiv({ntot}, BLOCK_N)")
    e("# GROUP_M swizzle: GROUP_M row-tiles run together so their B tiles stay in L2")
    grp, gid, first, gsize = (w.fresh(x) for x in ("group_size", "group_id", "first_m", "rows"))
    e(f"{grp} = GROUP_M * {npn}")
    e(f"{gid} = {pid} // {grp}")
    e(f"{first} = {gid} * GROUP_M")
    e(f"{gsize} = tl.minimum({npm} - {first}, GROUP_M)")
    pm, pn = w.fresh("pid_m"), w.fresh("pid_n")
    e(f"{pm} = {first} + ({pid} % {grp}) % {gsize}")
    e(f"{pn} = ({pid} % {grp}) // {gsize}")
    om, on = w.fresh("offs_m"), w.fresh("offs_n")
    e(f"{om} = {pm} * BLOCK_M + tl.arange(0, BLOCK_M)")
    e(f"{on} = {pn} * BLOCK_N + tl.arange(0, BLOCK_N)")
    mm, nm = w.fresh("mask_m"), w.fresh("mask_n")
    e(f"{mm} = {om} < {mtot}")
    e(f"{nm} = {on} < {ntot}")
    ctx = Ctx(["BLOCK_M", "BLOCK_N"], masks=[(mm, 0), (nm, 1)])
    for name, var in zip(plan.m, em.decompose(om, plan.m, [free[i] for i in plan.m])):
        ctx.idx[name] = (var, 0)
    for name, var in zip(plan.n, em.decompose(on, plan.n, [free[i] for i in plan.n])):
        ctx.idx[name] = (var, 1)
    for name, var in zip(plan.batch, em.decompose(pid_b, plan.batch,
                                                   [free[i] for i in plan.batch])):
        ctx.idx[name] = (var, None)
    acc = w.fresh("acc")
    e(f"{acc} = tl.zeros([BLOCK_M, BLOCK_N], dtype={em.acc_dtype})")
    k0 = w.fresh("k_start")
    e("# split-K: program pid_k takes every SPLIT_K-th BLOCK_K slice of the reduction")
    e(f"for {k0} in range({pid_k} * BLOCK_K, {ktot}, BLOCK_K * SPLIT_K):")
    w.depth += 1
    ok_, km = w.fresh("offs_k"), w.fresh("mask_k")
    e(f"{ok_} = {k0} + tl.arange(0, BLOCK_K)")
    e(f"{km} = {ok_} < {ktot}")
    kvars = em.decompose(ok_, plan.k, kext)
    a_ctx = Ctx(["BLOCK_M", "BLOCK_K"], dict(ctx.idx), [(mm, 0), (km, 1)])
    b_ctx = Ctx(["BLOCK_K", "BLOCK_N"], dict(ctx.idx), [(km, 0), (nm, 1)])
    for name, var in zip(plan.k, kvars):
        a_ctx.idx[name] = (var, 1)
        b_ctx.idx[name] = (var, 0)
    for name in plan.n:  # rhs tile: n indices along axis 1
        b_ctx.idx[name] = (ctx.idx[name][0], 1)
    a = em.load(plan.lhs, a_ctx)
    b = em.load(plan.rhs, b_ctx)
    halves = {op.tensor(plan.lhs.tensor).dtype, op.tensor(plan.rhs.tensor).dtype}
    if len(halves) == 1 and halves <= {DType.f16, DType.bf16}:
        e(f"{acc} = tl.dot({a}.to({_tl(halves)}), {b}.to({_tl(halves)}), {acc})")
    else:
        e(f"{acc} = tl.dot({a}, {b}, {acc}, input_precision=\"{cfg.get('input_precision', 'ieee')}\")")
    w.depth -= 1
    value = acc if plan.scale == 1.0 else f"({acc} * {plan.scale!r})"
    em.overrides[id(plan.node)] = value
    if plan.epilogue:
        e(f"# fused epilogue of ODL line {stmt.line}")
    out = em.expr(stmt.expr, ctx)
    target = Access(stmt.target, tuple(Affine.of(i) for i in stmt.indices))
    off, _ = em.offset(stmt.target, target.indices, ctx)
    res = w.fresh("result")
    e(f"{res} = ({out}).to({store_dtype(op, stmt.target)})")
    store = "tl.atomic_add" if split > 1 else "tl.store"
    ptrs = f"{safe(stmt.target)}_ptr + {off}"
    if not (plan.m and plan.n):  # a GEMV or dot: the output pointer lacks a tile axis
        ptrs = f"tl.broadcast_to({ptrs}, [BLOCK_M, BLOCK_N])"
    e(f"{store}({ptrs}, {res}, mask={ctx.mask()})")
    lines, odl = w.text()
    bm, bn, bk, gm = (int(cfg[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
    grid = f"(triton.cdiv({mtot}, {bm}) * triton.cdiv({ntot}, {bn}), {split}, {btot})"
    values = {"BLOCK_M": str(bm), "BLOCK_N": str(bn), "BLOCK_K": str(bk), "GROUP_M": str(gm),
              "SPLIT_K": str(split), "BLOCK_R": str(cfg.get("BLOCK_R", 32))}
    kind = "implicit-gemm" if any(f.pure_symbol is None for f in plan.lhs.indices
                                  + plan.rhs.indices) else ("bmm" if plan.batch else "matmul")
    return KernelPart(f"{op.name}_{stmt.target}", tensors, values, grid, lines, odl, [index],
                      kind, zero_init=[stmt.target] if split > 1 else [],
                      launch_opts={"num_warps": str(cfg.get("num_warps", 4)),
                                   "num_stages": str(cfg.get("num_stages", 2))})


def _tl(types: set[DType]) -> str:
    return "tl.float16" if DType.f16 in types else "tl.bfloat16"
