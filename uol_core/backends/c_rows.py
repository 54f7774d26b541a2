"""Row softmax and log-softmax template: three passes over a row that stays in L1/L2, explicit SIMD.

Recognised statements (any index names, any leading row indices P, X an f32 input):
    softmax:      mx[P] = max[c](X[P, c])
                  e[P, c] = exp(X[P, c] - mx[P])          (optionally * or / a constant or scalar)
                  Y[P, c] = e[P, c] / sum[c](e[P, c])
    log-softmax:  mx[P] = max[c](X[P, c])
                  lse[P] = log(sum[c](exp(X[P, c] - mx[P])))
                  Y[P, c] = X[P, c] - mx[P] - lse[P]
Pass 1 takes the row max with four accumulators; pass 2 computes exp and its sum in one loop
(softmax keeps e in a per-thread row buffer); pass 3 writes Y. Each row is read from memory once:
passes 2 and 3 hit the cache. When Y is larger than the last-level cache (an HFL fact), pass 3
uses non-temporal stores: they skip the read-for-ownership of Y's lines, a third of the traffic.
The generic path still compiles these ops on targets without a vector-math table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.acg.config import lanes, target_isas
from uol_core.backends.base import KernelSource
from uol_core.backends.c import CodeWriter, render_const
from uol_core.backends.c_expr import PRELUDE
from uol_core.backends.c_names import size_id, tensor_id
from uol_core.backends.c_platforms import has_vector_math, platform
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Binary, Call, Const, DType, Expr, Op, Reduce

GENERATOR = "uol-c-rows-1"


@dataclass(frozen=True)
class RowPlan:
    """A recognised row softmax or log-softmax."""

    kind: str  # "softmax" | "log_softmax"
    x: str
    out: str
    rows: tuple[str, ...]  # leading (row) indices of the output
    col: str
    scale: tuple[str, str] | None  # ("mul" | "div", C expression of the factor) or None


def _pure(e: Expr, names: tuple[str, ...], tensor: str | None = None) -> bool:
    return (isinstance(e, Access) and e.pad is None
            and tuple(f.pure_symbol for f in e.indices) == tuple(names)
            and (tensor is None or e.tensor == tensor))


def _row_max(op: Op) -> tuple[str, tuple[str, ...], str] | None:
    """(X, row indices, column index) of `mx[P] = max[c](X[P, c])` with X an input."""
    st = op.stmts[0]
    e = st.expr
    if not (isinstance(e, Reduce) and e.op == "max" and len(e.indices) == 1):
        return None
    col = e.indices[0]
    if not _pure(e.body, (*st.indices, col)) or e.body.tensor not in {d.name for d in op.inputs}:
        return None
    return e.body.tensor, st.indices, col


def _shifted(e: Expr, x: str, mx: str, rows: tuple[str, ...], col: str) -> bool:
    """`X[P, c] - mx[P]`."""
    return (isinstance(e, Binary) and e.op == "sub" and _pure(e.lhs, (*rows, col), x)
            and _pure(e.rhs, rows, mx))


def _scale(e: Expr, op: Op) -> tuple[str, str] | bool | None:
    """The factor applied to the shifted value: None (none), (op, C text), or False (no match)."""
    if not (isinstance(e, Binary) and e.op in ("mul", "div")):
        return None
    f = e.rhs
    if isinstance(f, Const):
        return e.op, render_const(f.value, f.is_int)
    scalars = {d.name for d in op.inputs if not d.shape and d.dtype == DType.f32}
    if isinstance(f, Access) and not f.indices and f.tensor in scalars:
        return e.op, f"{tensor_id(f.tensor)}[0]"
    return False


def row_plan(op: Op) -> RowPlan | None:
    """The plan when `op` is one of the row ops above in f32, else None."""
    if len(op.stmts) != 3 or len(op.outputs) != 1:
        return None
    if {d.dtype for d in op.inputs + op.outputs + op.locals} != {DType.f32}:
        return None
    head = _row_max(op)
    if head is None:
        return None
    x, rows, col = head
    mx, mid, out = op.stmts
    if out.target != op.outputs[0].name or tuple(out.indices) != (*rows, col):
        return None
    if mx.target in {d.name for d in op.outputs} or mid.target in {d.name for d in op.outputs}:
        return None
    # softmax: e = exp(scale(X - mx)); Y = e / sum(e)
    if isinstance(mid.expr, Call) and mid.expr.fn == "exp" and tuple(mid.indices) == (*rows, col):
        arg = mid.expr.args[0]
        scale = _scale(arg, op)
        inner = arg.lhs if scale else arg
        y = out.expr
        if (scale is not False and _shifted(inner, x, mx.target, rows, col)
                and isinstance(y, Binary) and y.op == "div" and _pure(y.lhs, (*rows, col), mid.target)
                and isinstance(y.rhs, Reduce) and y.rhs.op == "sum" and y.rhs.indices == (col,)
                and _pure(y.rhs.body, (*rows, col), mid.target)):
            return RowPlan("softmax", x, out.target, rows, col, scale or None)
    # log-softmax: lse = log(sum(exp(X - mx))); Y = X - mx - lse
    e = mid.expr
    if (tuple(mid.indices) == rows and isinstance(e, Call) and e.fn == "log"
            and isinstance(e.args[0], Reduce) and e.args[0].op == "sum" and e.args[0].indices == (col,)
            and isinstance(e.args[0].body, Call) and e.args[0].body.fn == "exp"
            and _shifted(e.args[0].body.args[0], x, mx.target, rows, col)):
        y = out.expr
        if (isinstance(y, Binary) and y.op == "sub" and _shifted(y.lhs, x, mx.target, rows, col)
                and _pure(y.rhs, rows, mid.target)):
            return RowPlan("log_softmax", x, out.target, rows, col, None)
    return None


def emit(op: Op, plan: RowPlan, sizes: Mapping[str, int], target=None,
         config: Mapping | None = None) -> KernelSource | None:
    """The row kernel, or None (the generic path runs) when the target has no vector-math table
    or the config asks for unfused statements (fuse=0)."""
    if not int((config or {}).get("fuse", 1)):
        return None
    isa = next((i for i in target_isas(target) if has_vector_math(i)), None) if target is not None else None
    if isa is None:
        return None
    cfg = {"threads": int(getattr(target, "cores", 0) or 1), **(config or {})}
    ext = stmt_extents(op, 2)
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    n_rows, n_cols = 1, free[plan.col]
    for r in plan.rows:
        n_rows *= free[r]
    lane = lanes(isa, target)
    llc = int(getattr(target, "l3_bytes", 0) or getattr(target, "l2_bytes", 0) or 0)
    out_bytes = 4 * n_rows * n_cols
    stream = "stream" not in cfg and llc > 0 and out_bytes > llc and n_cols % lane == 0
    stream = bool(cfg.get("stream", stream)) and bool(platform(isa).stream)
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    lines = [s.line for s in op.stmts]
    store_note = (f"non-temporal stores: Y ({out_bytes >> 20} MiB) exceeds the last-level cache "
                  f"({llc >> 20} MiB)" if stream else "ordinary stores")
    w.emit(f"/* {op.name}: row {plan.kind.replace('_', '-')} generated by UOL ({GENERATOR}); "
           f"{n_rows} rows x {n_cols} columns, {isa} ({lane} lanes), {cfg['threads']} threads.\n"
           f"   pass 1 max (line {lines[0]}), pass 2 exp and sum in one loop (line "
           f"{lines[1] if plan.kind == 'log_softmax' else f'{lines[1]}, sum of line {lines[2]}'}), pass 3 "
           f"{'Y = e / sum' if plan.kind == 'softmax' else 'Y = X - mx - lse'} (line {lines[2]}) "
           f"with {store_note}. */")
    w.emit("#include <stdint.h>\n#include <stdlib.h>\n#include <math.h>\n#include <omp.h>\n"
           + platform(isa).include + PRELUDE + platform(isa).vector_math(lane))
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit(f"\nvoid {entry}(void **args, const int64_t *strides)\n{{\n    (void)strides;")
    for n, name in enumerate(args):
        qual = "const " if n < len(op.inputs) else ""
        w.emit(f"    {qual}float *restrict {tensor_id(name)} = ({qual}float *)args[{n}];")
    _body(w, plan, isa, lane, n_rows, n_cols, stream, int(cfg["threads"]), lines)
    w.emit("}")
    meta = {"isa": isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": cfg["threads"],
            "generator": GENERATOR, "groups": 1, "reduction_length": n_cols,
            "fusion": f"row {plan.kind}: max, exp + sum and the output in one pass over memory "
                      f"({store_note})"}
    return w.source(entry, op.name, dict(cfg, stream=int(stream)), meta)


def _body(w: CodeWriter, plan: RowPlan, isa: str, lane: int, n_rows: int, n_cols: int,
          stream: bool, threads: int, lines: list[int]) -> None:
    P = platform(isa)
    vec = P.vec
    x, y = tensor_id(plan.x), tensor_id(plan.out)
    softmax = plan.kind == "softmax"
    # the exp argument: (x - mx), then the op's factor as written
    arg_v, arg_s = P.sub.format(P.loadu.format("xr + c"), "vm"), "(xr[c] - mx)"
    if plan.scale:
        how, factor = plan.scale
        arg_v = (P.mul if how == "mul" else P.div).format(arg_v, "vf")
        arg_s = f"({arg_s} {'*' if how == 'mul' else '/'} {factor})"
    L1, L2, L3 = lines
    ld, mx_, add = P.loadu.format, P.max.format, P.add.format
    w.emit(f"    #pragma omp parallel num_threads({threads})\n    {{", L1)
    if softmax:
        buf_bytes = -(-n_cols * 4 // 64) * 64
        w.emit(f"        float *restrict e = aligned_alloc(64, {buf_bytes});  /* this thread's row of e */",
               L2)
    w.emit(f"""        #pragma omp for schedule(static)
        for (int64_t row = 0; row < {n_rows}; ++row) {{
            const float *restrict xr = {x} + row * {n_cols};
            float *restrict yr = {y} + row * {n_cols};
            {vec} m0 = {P.bcast.format('-INFINITY')}, m1 = m0, m2 = m0, m3 = m0;
            int64_t c = 0;
            for (; c + {4 * lane} <= {n_cols}; c += {4 * lane}) {{
                m0 = {mx_('m0', ld('xr + c'))};
                m1 = {mx_('m1', ld(f'xr + c + {lane}'))};
                m2 = {mx_('m2', ld(f'xr + c + {2 * lane}'))};
                m3 = {mx_('m3', ld(f'xr + c + {3 * lane}'))};
            }}
            for (; c + {lane} <= {n_cols}; c += {lane}) m0 = {mx_('m0', ld('xr + c'))};
            float mx = {P.hmax.format(mx_(mx_('m0', 'm1'), mx_('m2', 'm3')))};
            for (; c < {n_cols}; ++c) mx = xr[c] > mx ? xr[c] : mx;""", L1)
    store = "e + c" if softmax else None
    keep_a = f"\n                {P.store.format(store, 'a')};" if softmax else ""
    keep_b = f"\n                {P.store.format(f'{store} + {lane}', 'b')};" if softmax else ""
    w.emit(f"""            const {vec} vm = {P.bcast.format('mx')};{'' if not plan.scale else f'''
            const {vec} vf = {P.bcast.format(plan.scale[1])};'''}
            {vec} s0 = {P.zero}, s1 = s0;
            for (c = 0; c + {2 * lane} <= {n_cols}; c += {2 * lane}) {{
                const {vec} a = uol_vexp({arg_v});
                const {vec} b = uol_vexp({arg_v.replace('xr + c', f'xr + c + {lane}')});{keep_a}{keep_b}
                s0 = {add('s0', 'a')};
                s1 = {add('s1', 'b')};
            }}
            for (; c + {lane} <= {n_cols}; c += {lane}) {{
                const {vec} a = uol_vexp({arg_v});{keep_a}
                s0 = {add('s0', 'a')};
            }}
            float s = {P.hsum.format(add('s0', 's1'))};
            for (; c < {n_cols}; ++c) {{
                const float v = uol_expf({arg_s});{'''
                e[c] = v;''' if softmax else ''}
                s += v;
            }}""", L2)
    if softmax:
        vector, scalar, head = P.mul.format(P.load.format("e + c"), "inv"), "e[c] * (1.0f / s)", \
            f"const {vec} inv = {P.bcast.format('1.0f / s')};"
    else:
        vector, scalar, head = (P.sub.format(P.sub.format(ld("xr + c"), "vm"), "vl"),
                                "xr[c] - mx - lse", f"const float lse = logf(s);\n"
                                f"            const {vec} vl = {P.bcast.format('lse')};")
    w.emit(f"            {head}\n            c = 0;", L3)
    if stream:  # a view that is not aligned for streaming falls back to ordinary stores
        w.emit(f"""            if (((uintptr_t)yr & {4 * lane - 1}) == 0)
                for (; c + {lane} <= {n_cols}; c += {lane}) {P.stream.format('yr + c', vector)};""", L3)
    w.emit(f"""            for (; c + {lane} <= {n_cols}; c += {lane}) {P.storeu.format('yr + c', vector)};
            for (; c < {n_cols}; ++c) yr[c] = {scalar};
        }}""", L3)
    if stream:  # each thread fences its own weakly ordered stores before the region's barrier
        w.emit(f"        {P.fence}", L3)
    if softmax:
        w.emit("        free(e);", L2)
    w.emit("    }", L1)
