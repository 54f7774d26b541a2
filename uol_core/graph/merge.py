"""Merge graph nodes into ONE ODL op: members' statements renamed apart, intermediates in between.

The fused op is ordinary ODL (printable with format_op, parsed back to check it), so it compiles
and evaluates like any library op. Graph shapes are concrete: every extent becomes the symbol
`S<value>` when an input axis binds it, else the constant, so equal sizes share one symbol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from uol_core.graph.format import TensorSpec
from uol_core.odl import parse
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    Op,
    Reduce,
    Scan,
    Stmt,
    TensorDecl,
    Unary,
    Var,
)
from uol_core.odl.printer import format_op
from uol_core.odl.shapes import bind_sizes


@dataclass(frozen=True)
class Member:
    """One node to merge: its op and how its op tensors bind to graph tensors."""

    node: str
    op: Op
    inputs: dict[str, str]
    outputs: dict[str, str]


@dataclass(frozen=True)
class FusedOp:
    """The merged op and the binding of its inputs/outputs to graph tensors."""

    op: Op
    inputs: dict[str, str]
    outputs: dict[str, str]


def ident(text: str) -> str:
    """A safe ODL identifier from a graph name (`fc1.out` -> `fc1_out`)."""
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"n{name}"


def fresh_name(base: str, used: set[str]) -> str:
    """`ident(base)`, numbered `_2`, `_3`, ... until unused; the name is added to `used`."""
    name, i = ident(base), 1
    while name in used:
        i += 1
        name = f"{ident(base)}_{i}"
    used.add(name)
    return name


def merge(name: str, members: list[Member], shapes: dict[str, TensorSpec],
          keep: set[str], constants: bool = False) -> FusedOp:
    """One op computing every member; graph tensors in `keep` (read elsewhere) stay outputs.
    `constants` writes every extent as a number (no size symbols), so that an input's
    declared shape can be replaced without unbinding a symbol (view folding)."""
    produced = {t for m in members for t in m.outputs.values()}
    read = [t for m in members for t in m.inputs.values()]
    external = list(dict.fromkeys(t for t in read if t not in produced))
    names: dict[str, str] = {}
    for tensor in external + [t for m in members for t in m.outputs.values()]:
        names[tensor] = _fresh(f"t_{ident(tensor)}", set(names.values()))
    bound = set() if constants else {v for t in external for v in shapes[t].shape}

    def form(value: int) -> Affine:
        return Affine.of(f"S{value}") if value in bound else Affine.constant(value)

    stmts: list[Stmt] = []
    writer_indices: dict[str, tuple[str, ...]] = {}
    taken = set(names.values())
    for member in members:
        op = member.op
        sizes = bind_sizes(op, {k: shapes[v].shape for k, v in member.inputs.items()})
        rename = {k: names[v] for k, v in {**member.inputs, **member.outputs}.items()}
        for local in op.locals:
            rename[local.name] = _fresh(f"t_{ident(member.node)}_{local.name}", taken)
            taken.add(rename[local.name])
        sub = _Substitution(rename, sizes, form)
        for index, stmt in enumerate(op.stmts):
            new = replace(stmt, expr=sub.expr(stmt.expr),
                          extents=tuple((n, form(e.evaluate(sizes))) for n, e in stmt.extents))
            target = rename[stmt.target]
            if stmt.target in member.outputs and member.outputs[stmt.target] not in keep:
                free = stmt_extents(op, index).free  # an output becomes an intermediate: pin extents
                new = replace(new, extents=tuple((i, form(free[i].evaluate(sizes)))
                                                 for i in stmt.indices))
            new = replace(new, target=target)
            new = _align(new, writer_indices)
            writer_indices[target] = new.indices
            stmts.append(new)
    outs = [t for m in members for t in m.outputs.values() if t in keep]
    # the element types of the merged op's own tensors only: the graph may hold tensors ODL has
    # no type for (a lookup's int64 ids), which no ODL op reads
    dtype = {t: DType(shapes[t].dtype) for t in (*external, *outs)}
    inputs = tuple(TensorDecl(names[t], dtype[t], tuple(form(v) for v in shapes[t].shape))
                   for t in external)
    outputs = tuple(TensorDecl(names[t], dtype[t], tuple(form(v) for v in shapes[t].shape))
                    for t in outs)
    fused = Op(ident(name), inputs, outputs, tuple(stmts))
    checked = parse(format_op(fused), filename=f"{ident(name)}.odl")
    return FusedOp(checked, {names[t]: t for t in external}, {names[t]: t for t in outs})


def _fresh(base: str, taken: set[str]) -> str:
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}_{count}"
    return name


class _Substitution:
    """Renames tensors and replaces a member's dimension symbols by concrete sizes."""

    def __init__(self, rename: dict[str, str], sizes: dict[str, int], form) -> None:
        self.rename, self.sizes, self.form = rename, sizes, form

    def affine(self, a: Affine) -> Affine:
        out = Affine.constant(a.const)
        for name, coeff in a.terms:
            term = Affine.constant(self.sizes[name]) if name in self.sizes else Affine.of(name)
            out = out + term.scale(coeff)
        return out

    def expr(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return Const(float(self.sizes[e.name]), True) if e.name in self.sizes else e
        if isinstance(e, Access):
            return replace(e, tensor=self.rename[e.tensor],
                           indices=tuple(self.affine(f) for f in e.indices))
        if isinstance(e, (Unary, Cast)):
            return replace(e, operand=self.expr(e.operand))
        if isinstance(e, Binary):
            return replace(e, lhs=self.expr(e.lhs), rhs=self.expr(e.rhs))
        if isinstance(e, Call):
            return replace(e, args=tuple(self.expr(a) for a in e.args))
        if isinstance(e, Reduce):
            extents = tuple((n, self.form(x.evaluate(self.sizes))) for n, x in e.extents)
            return replace(e, body=self.expr(e.body), extents=extents)
        if isinstance(e, Scan):
            return replace(e, body=self.expr(e.body))
        return e


def _align(stmt: Stmt, writers: dict[str, tuple[str, ...]]) -> Stmt:
    """Rename a consumer's free indices to its producer's (so a map reads `h[m, n]` where the
    contraction wrote `h[m, n]`): backends fuse an epilogue only over the same index names."""
    mapping: dict[str, str] = {}
    for node in _accesses(stmt.expr):
        if node.tensor not in writers or mapping:
            continue
        pures = [f.pure_symbol for f in node.indices]
        if None in pures or len(set(pures)) != len(pures) or not set(pures) <= set(stmt.indices):
            continue
        mapping = dict(zip(pures, writers[node.tensor]))
    mapping = {k: v for k, v in mapping.items() if k != v}
    targets = set(mapping.values())
    if not mapping or targets & (set(stmt.indices) - set(mapping)):
        return stmt
    return replace(stmt, indices=tuple(mapping.get(i, i) for i in stmt.indices),
                   extents=tuple((mapping.get(n, n), x) for n, x in stmt.extents),
                   expr=_rename_indices(stmt.expr, mapping))


def _accesses(e: Expr):
    if isinstance(e, Access):
        yield e
    for child in _children(e):
        yield from _accesses(child)


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Unary, Cast)):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, (Reduce, Scan)):
        return (e.body,)
    return ()


def _rename_indices(e: Expr, mapping: dict[str, str]) -> Expr:
    """Rename index names; a reduction that rebinds a name shadows it, one that would capture a
    new name is renamed apart first."""
    def aff(a: Affine) -> Affine:
        out = Affine.constant(a.const)
        for name, coeff in a.terms:
            out = out + Affine.of(mapping.get(name, name)).scale(coeff)
        return out

    if isinstance(e, Var):
        return replace(e, name=mapping.get(e.name, e.name))
    if isinstance(e, Access):
        return replace(e, indices=tuple(aff(f) for f in e.indices))
    if isinstance(e, Reduce):
        inner = dict(mapping)
        new_indices = []
        for idx in e.indices:
            new = f"{idx}_r" if idx in mapping.values() else idx
            inner[idx] = new
            new_indices.append(new)
        return replace(e, indices=tuple(new_indices), body=_rename_indices(e.body, inner),
                       extents=tuple((inner.get(n, n), x) for n, x in e.extents))
    if isinstance(e, Scan):
        return replace(e, index=mapping.get(e.index, e.index), body=_rename_indices(e.body, mapping))
    if isinstance(e, (Unary, Cast)):
        return replace(e, operand=_rename_indices(e.operand, mapping))
    if isinstance(e, Binary):
        return replace(e, lhs=_rename_indices(e.lhs, mapping), rhs=_rename_indices(e.rhs, mapping))
    if isinstance(e, Call):
        return replace(e, args=tuple(_rename_indices(a, mapping) for a in e.args))
    return e
