"""Generic Triton kernels: blocks over a flat output space, reductions as tiled loops, fused maps."""

from __future__ import annotations

from dataclasses import dataclass, field

from uol_core.backends.triton.expr import (
    COMBINE,
    REDUCE_INIT,
    REDUCE_TILE,
    TL_DTYPES,
    Ctx,
    ExprEmitter,
    Writer,
    product_code,
    safe,
    scalar_loop_reduce,
)
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Affine, DType, Op, Reduce, Scan, children, walk


@dataclass
class KernelPart:
    """One @triton.jit kernel of an op and how the launcher calls it."""

    name: str
    tensors: list[str]  # pointer arguments in order
    consts: dict[str, str]  # constexpr name -> launcher code of its value
    grid: str  # launcher code of the grid tuple
    lines: list[str]
    odl: list[int | None]
    statements: list[int]
    kind: str
    zero_init: list[str] = field(default_factory=list)  # tensors that must start at zero
    launch_opts: dict[str, str] = field(default_factory=dict)  # num_warps, num_stages


def acc_dtype(op: Op) -> str:
    """The accumulation type: f64 when the op uses f64, else f32 (as the reference does)."""
    types = {d.dtype for d in op.inputs + op.outputs + op.locals}
    return "tl.float64" if DType.f64 in types else "tl.float32"


def store_dtype(op: Op, tensor: str) -> str:
    """Element type written to a tensor: declared for outputs, the compute type for float locals."""
    decl = op.tensor(tensor)
    if tensor in {d.name for d in op.outputs} or not decl.dtype.is_float:
        return TL_DTYPES[decl.dtype]
    return acc_dtype(op)


def tensors_of(op: Op, stmts: list[int]) -> list[str]:
    """Tensors a group of statements reads or writes, in order of first appearance."""
    names: list[str] = []
    for i in stmts:
        for node in walk(op.stmts[i].expr):
            if isinstance(node, Access) and node.tensor not in names:
                names.append(node.tensor)
        if op.stmts[i].target not in names:
            names.append(op.stmts[i].target)
    return names


def tiled_reduce(em: ExprEmitter, node: Reduce, ctx: Ctx) -> str:
    """A reduction in a 1-D context: loop over BLOCK_R-wide tiles of its flat index space."""
    if ctx.rank != 1 or node.op == "prod":
        return scalar_loop_reduce(em, node, ctx)
    extents = em.current_reduce_extents(node)
    total = product_code(extents)
    w, dt, init = em.w, em.acc_dtype, REDUCE_INIT[node.op]
    acc = w.fresh(f"{node.op}_acc")
    w.emit(f"{acc} = tl.full({ctx.shape()}, {init}, {dt})")
    start = w.fresh("r_start")
    w.emit(f"for {start} in range(0, {total}, BLOCK_R):")
    w.depth += 1
    flat, rmask = w.fresh("r_offs"), w.fresh("r_mask")
    w.emit(f"{flat} = {start} + tl.arange(0, BLOCK_R)")
    w.emit(f"{rmask} = {flat} < {total}")
    inner = ctx.child(blocks=[*ctx.blocks, "BLOCK_R"], masks=[*ctx.masks, (rmask, 1)])
    for name, var in zip(node.indices, em.decompose(flat, node.indices, extents)):
        inner.idx[name] = (var, 1)
    body = em.expr(node.body, inner)
    val = w.fresh("val")
    # Masked lanes hold the identity so they do not change the result.
    w.emit(f"{val} = tl.where({inner.mask()}, tl.zeros({inner.shape()}, {dt}) + {body}, {init})")
    w.emit(f"{acc} = " + COMBINE[node.op].format(acc, f"{REDUCE_TILE[node.op]}({val}, axis=1)"))
    w.depth -= 1
    return f"({acc} / ({total}))" if node.op == "mean" else acc


def register_reads_ok(op: Op, index: int, group_targets: set[str]) -> bool:
    """Statement `index` reads earlier group tensors only at its own free indices (no rebinding)."""
    stmt = op.stmts[index]
    own = tuple(Affine.of(i) for i in stmt.indices)

    def visit(expr, rebound: bool) -> bool:
        if isinstance(expr, Access) and expr.tensor in group_targets:
            return not rebound and expr.pad is None and expr.indices == own
        inner = rebound or isinstance(expr, (Reduce, Scan))

        return all(visit(c, inner) for c in children(expr))

    return visit(stmt.expr, False)


def generic_groups(op: Op, stmts: list[int]) -> list[list[int]]:
    """Consecutive statements over the same output space fuse into one kernel (fused maps)."""
    groups: list[list[int]] = []
    for i in stmts:
        ext = _free(op, i)
        if groups and groups[-1][-1] == i - 1 and _free(op, groups[-1][0]) == ext:
            targets = {op.stmts[j].target for j in groups[-1]}
            if register_reads_ok(op, i, targets):
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


def _free(op: Op, i: int) -> list[Affine]:
    ext = stmt_extents(op, i).free
    return [ext[n] for n in op.stmts[i].indices]


def emit_generic(op: Op, group: list[int], config: dict, keep: set[str]) -> KernelPart:
    """One kernel for a group of statements sharing an output space; `keep`: targets to store."""
    first = op.stmts[group[0]]
    name = f"{op.name}_{'_'.join(op.stmts[i].target for i in group)}"
    tensors = tensors_of(op, group)
    params = [f"{safe(t)}_ptr" for t in tensors] + [safe(d) for d in op.dims]
    w = Writer(set(params) | {"BLOCK", "BLOCK_R"})
    em = ExprEmitter(op, w, acc_dtype(op), tiled_reduce)
    total = product_code(_free(op, group[0]))
    w.odl_line = first.line
    pid, offs, mask = w.fresh("pid"), w.fresh("offs"), w.fresh("mask")
    w.emit("# each program computes BLOCK elements of the flattened output space")
    w.emit(f"{pid} = tl.program_id(0)")
    w.emit(f"{offs} = {pid} * BLOCK + tl.arange(0, BLOCK)")
    w.emit(f"{mask} = {offs} < {total}")
    ctx = Ctx(["BLOCK"], masks=[(mask, 0)])
    for i in group:
        stmt = op.stmts[i]
        em.stmt_index = i
        w.odl_line = stmt.line
        w.emit(f"# ODL line {stmt.line}: {stmt.target}[{', '.join(stmt.indices)}]")
        sub = ctx.child(regs=ctx.regs)
        for n, var in zip(stmt.indices, em.decompose(offs, stmt.indices, _free(op, i))):
            sub.idx[n] = (var, 0)
        value = em.expr(stmt.expr, sub)
        var = w.fresh(stmt.target.lower() if stmt.target.lower() != stmt.target else
                      stmt.target + "v")
        w.emit(f"{var} = tl.zeros([BLOCK], {acc_dtype(op)}) + {value}")
        ctx.regs[stmt.target] = var
        if stmt.target in keep:
            dtype = store_dtype(op, stmt.target)
            w.emit(f"tl.store({safe(stmt.target)}_ptr + {offs}, {var}.to({dtype}), mask={mask})")
    lines, odl = w.text()
    block = int(config.get("BLOCK", 128))
    return KernelPart(name, tensors, {"BLOCK": str(block), "BLOCK_R": str(config.get("BLOCK_R", 32))},
                      f"(triton.cdiv({total}, {block}),)", lines, odl, list(group),
                      "map" if len(group) > 1 else "generic",
                      launch_opts={"num_warps": str(config.get("num_warps", 4))})
