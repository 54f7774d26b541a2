"""Attention as five (or six) ODL statements, recognised for the flash templates of every backend.

    s[P, i, j] = f(sum[d](Q[.. i, d ..] * K[.. j, d ..]))   mx[P, i] = max[j](s[P, i, j])
    p[P, i, j] = exp(s[P, i, j] - mx[P, i])                  l[P, i] = sum[j](p[P, i, j])
    O[P, i, e] = sum[j](p[P, i, j] * V[.. j, e ..]) / l[P, i]
or the split form (O = z / l with z[P, i, e] = sum[j](p * V) its own statement). mx and l (and
z in the split form) may be outputs: the kernel then writes them for the backward.
Any index names, any leading batch/head indices P, any float element type; `f` is any
expression around the Q.K sum (a scale, a `where` mask over index values, a bias).
The templates take their sizes from Q, K and V, so an op that reads part of an axis
(`Q: f32[S + 3, D]` beside `O: f32[S, D]`, a written `sum[d: D]`; odl/prefix_reads.py) is left
to the generic paths, which give each index the extent the language defines.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.odl.ir import (
    Access,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Op,
    Reduce,
    Scan,
    Stmt,
    Unary,
    Var,
    walk,
)
from uol_core.odl.masks import causal_offset
from uol_core.odl.prefix_reads import prefix_reads


@dataclass(frozen=True)
class AttentionPlan:
    """The recognised attention, with the facts templates decide on."""

    q: Access
    k: Access
    v: Access
    out: str
    prefix: tuple[str, ...]  # batch/head indices of the score statement
    i: str
    j: str
    d: str
    o_names: tuple[str, ...]  # indices of the statement that sums over keys (prefix', i', e)
    jj: str  # the key index of that sum
    reduce: Reduce  # the Q.K sum inside the score expression
    causal: int | None  # c of a `j <= i + c` mask (c >= 0)
    saves: tuple[str | None, str | None, str | None]  # mx, l, z when written as outputs
    split: bool  # the six-statement form O = z / l
    dtypes: frozenset[DType]  # element types of every tensor of the op
    score_elementwise: bool  # f reads only constants, index values and inputs at [P, i, j]
    canonical: bool  # Q[P, i, d] * K[P, j, d] and p[P, i, j] * V[P, j, e], in that order


def attention_plan(op: Op) -> AttentionPlan | None:
    """The plan when `op` is attention as above (float tensors, s and p never outputs)."""
    if len(op.stmts) not in (5, 6) or prefix_reads(op):
        return None
    dtypes = frozenset(d.dtype for d in op.inputs + op.outputs + op.locals)
    if not all(t.is_float for t in dtypes):
        return None
    split = len(op.stmts) == 6
    s, mx, p, lsum = op.stmts[:4]
    o = op.stmts[-1]
    outputs = {d.name for d in op.outputs}
    inputs = {d.name for d in op.inputs}
    if {s.target, p.target} & outputs or o.target not in outputs:
        return None
    score = _score_product(s, inputs)
    if score is None:
        return None
    prefix, i, j, d, red, qa, ka, score_canonical = score
    if not _online_softmax_ok(s, mx, p, lsum, len(prefix)):
        return None
    weighted = _weighted_values(op, p, lsum, inputs, len(prefix))
    if weighted is None:
        return None
    va, jj, names, value_canonical = weighted
    saves = (*(t if t in outputs else None for t in (mx.target, lsum.target)),
             op.stmts[4].target if split and op.stmts[4].target in outputs else None)
    elementwise = _score_ok(s.expr, red, set(s.indices) | set(op.dims), inputs)
    return AttentionPlan(qa, ka, va, o.target, tuple(prefix), i, j, d, names, jj, red,
                         causal_offset(s.expr, i, j), saves, split, dtypes, elementwise,
                         score_canonical and value_canonical)


def _pure(e, tensor: str | None, names) -> bool:
    return (isinstance(e, Access) and e.pad is None and (tensor is None or e.tensor == tensor)
            and tuple(f.pure_symbol for f in e.indices) == tuple(names))


def _uses(e, names: set[str]) -> bool:
    """Every index used by the operand is one of `names`, each once, none missing (any order)."""
    got = [f.pure_symbol for f in e.indices]
    return None not in got and len(set(got)) == len(got) and set(got) == names


def _score_product(s: Stmt, inputs: set[str]) -> tuple | None:
    """s[P, i, j] = f(sum[d](Q[.. i, d ..] * K[.. j, d ..])): (P, i, j, d, the sum, Q, K,
    whether Q and K are read in the canonical order and layout)."""
    if len(s.indices) < 2:
        return None
    *prefix, i, j = s.indices
    reds = [x for x in walk(s.expr) if isinstance(x, (Reduce, Scan))]
    if len(reds) != 1 or not isinstance(reds[0], Reduce) or reds[0].op != "sum" \
            or len(reds[0].indices) != 1:
        return None
    red, d = reds[0], reds[0].indices[0]
    body = red.body
    if not (isinstance(body, Binary) and body.op == "mul"):
        return None
    qa, ka = body.lhs, body.rhs
    if not (isinstance(qa, Access) and isinstance(ka, Access) and qa.tensor in inputs
            and ka.tensor in inputs and qa.pad is None and ka.pad is None):
        return None
    canonical = _pure(qa, None, (*prefix, i, d)) and _pure(ka, None, (*prefix, j, d))
    if not _uses(qa, {*prefix, i, d}):
        qa, ka = ka, qa
    if not (_uses(qa, {*prefix, i, d}) and _uses(ka, {*prefix, j, d})):
        return None
    return prefix, i, j, d, red, qa, ka, canonical


def _online_softmax_ok(s: Stmt, mx: Stmt, p: Stmt, lsum: Stmt, n: int) -> bool:
    """The row max, the shifted exponential and the row sum between the scores and the output."""
    # mx[P, i] = max[j](s[P, i, j])
    e = mx.expr
    if not (len(mx.indices) == n + 1 and isinstance(e, Reduce) and e.op == "max"
            and len(e.indices) == 1 and _pure(e.body, s.target, (*mx.indices, e.indices[0]))):
        return False
    # p[P, i, j] = exp(s[P, i, j] - mx[P, i])
    e = p.expr
    if not (len(p.indices) == n + 2 and isinstance(e, Call) and e.fn == "exp"
            and isinstance(e.args[0], Binary) and e.args[0].op == "sub"
            and _pure(e.args[0].lhs, s.target, p.indices)
            and _pure(e.args[0].rhs, mx.target, p.indices[:-1])):
        return False
    # l[P, i] = sum[j](p[P, i, j])
    e = lsum.expr
    return (len(lsum.indices) == n + 1 and isinstance(e, Reduce) and e.op == "sum"
            and len(e.indices) == 1 and _pure(e.body, p.target, (*lsum.indices, e.indices[0])))


def _weighted_values(op: Op, p: Stmt, lsum: Stmt, inputs: set[str], n: int) -> tuple | None:
    """O[P, i, e] = sum[j](p[P, i, j] * V[.., j, e ..]) / l[P, i], or that split into z and
    O = z / l: (V, the sum's key index, the summing statement's indices, canonical or not)."""
    o = op.stmts[-1]
    e = o.expr
    if not (len(o.indices) == n + 2 and isinstance(e, Binary) and e.op == "div"
            and _pure(e.rhs, lsum.target, o.indices[:-1])):
        return None
    total, names = e.lhs, o.indices
    if len(op.stmts) == 6:  # O = z / l with z[P, i, e] = sum[j](p * V) at the same positions
        z = op.stmts[4]
        if not (_pure(total, z.target, o.indices) and len(z.indices) == n + 2):
            return None
        total, names = z.expr, z.indices
    if not (isinstance(total, Reduce) and total.op == "sum" and len(total.indices) == 1):
        return None
    *pre, i2, ee = names
    jj = total.indices[0]
    b = total.body
    if not (isinstance(b, Binary) and b.op == "mul"):
        return None
    p_first = isinstance(b.lhs, Access) and b.lhs.tensor == p.target
    pa, va = (b.lhs, b.rhs) if p_first else (b.rhs, b.lhs)
    if not (_pure(pa, p.target, (*pre, i2, jj)) and isinstance(va, Access)
            and va.tensor in inputs and va.pad is None and _uses(va, {*pre, jj, ee})):
        return None
    return va, jj, tuple(names), p_first and _pure(va, None, (*pre, jj, ee))


def _score_ok(expr, red: Reduce, names: set[str], inputs: set[str]) -> bool:
    """The score expression is elementwise over [P, i, j]: constants, index values, inputs."""
    inside = {id(x) for x in walk(red.body)}
    for node in walk(expr):
        if node is red or id(node) in inside:
            continue
        if isinstance(node, Var) and node.name not in names:
            return False
        if isinstance(node, Access):
            syms = [f.pure_symbol for f in node.indices]
            if node.tensor not in inputs or node.pad is not None or None in syms \
                    or not set(syms) <= names:
                return False
        if not isinstance(node, (Access, Var, Const, Unary, Binary, Call, Cast, Reduce)):
            return False
    return True
