"""Outputs written over inputs (`Y: f32[N] aliases X`): the rules that make it safe (entry
point `check_aliases`).

An aliased output lets a kernel update a tensor in place (an optimizer's parameters and its
moments) instead of writing a copy beside it. The op keeps its value semantics: `Y` is a new
value, `X` the old one. A backend may run it in place because every element of `X` is read
only while computing the same element of the statements up to `Y`'s, before `Y` replaces it.
The checker proves that from the text, so no loop order, fusion or vector width a backend
picks can read an element already overwritten:

1. `X` is an input of `Y`'s type and shape, and no other output aliases it.
2. `Y`'s statement writes all of `Y` (no written extents).
3. Every read of `X` is `X[i, j, ...]` with exactly the reading statement's own free indices,
   in order, outside any reduction or scan, in a statement whose index extents are `X`'s shape.
4. No statement after `Y`'s reads `X`, or an intermediate that was computed from `X`
   (a backend may recompute an intermediate where it is read). Outputs computed from `X`
   are stored values, so later statements may read them.
"""

from __future__ import annotations

from uol_core.odl.errors import OdlError
from uol_core.odl.ir import Access, Op, Reduce, Scan, Stmt, children


def check_aliases(op: Op) -> None:
    """Raise OdlError (line, column, what to change) unless every `aliases` is safe in place."""
    if not op.aliases:
        return
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.odl.check import stmt_extents

    inputs = {d.name: d for d in op.inputs}
    seen: dict[str, str] = {}
    writer = {s.target: i for i, s in enumerate(op.stmts)}
    for out in op.outputs:
        if not out.alias:
            continue
        source = inputs.get(out.alias)
        if source is None:
            raise OdlError(f"output '{out.name}' aliases '{out.alias}', which is not an input",
                           out.line, 1, "name one of the op's inputs after 'aliases'")
        if out.alias in seen:
            raise OdlError(f"outputs '{seen[out.alias]}' and '{out.name}' both alias input "
                           f"'{out.alias}'", out.line, 1, "an input can be written over once")
        seen[out.alias] = out.name
        if source.dtype != out.dtype or source.shape != out.shape:
            raise OdlError(f"output '{out.name}' ({_type(out)}) aliases '{out.alias}' "
                           f"({_type(source)}): an output written over an input needs its "
                           f"type and shape", out.line, 1)
        at = writer[out.name]
        if op.stmts[at].extents:
            raise OdlError(f"'{out.name}' aliases '{out.alias}' but its statement writes only "
                           "part of it", op.stmts[at].line, 1, "write every element")
        tainted = {out.alias}  # tensors whose values were computed from the aliased input
        for i, stmt in enumerate(op.stmts):
            reads = list(_reads(stmt.expr, frozenset()))
            for access, rebound in reads:
                if access.tensor != out.alias:
                    continue
                if i > at:
                    raise _error(access, stmt, f"'{out.alias}' is read after '{out.name}' "
                                 f"(line {op.stmts[at].line}) was written over it",
                                 f"read '{out.name}' instead, or compute this before line "
                                 f"{op.stmts[at].line}")
                _check_own_position(op, i, stmt, access, rebound, out.name,
                                    tuple(stmt_extents(op, i).free[n] for n in stmt.indices))
            if i < at and any(a.tensor in tainted for a, _ in reads):
                tainted.add(stmt.target)
            elif i > at:
                late = next((a for a, _ in reads if a.tensor in tainted - {out.alias}
                             and a.tensor not in {d.name for d in op.outputs}), None)
                if late is not None:
                    raise _error(late, stmt, f"'{late.tensor}' was computed from "
                                 f"'{out.alias}', which '{out.name}' (line "
                                 f"{op.stmts[at].line}) has written over",
                                 f"make '{late.tensor}' an output, or read it before line "
                                 f"{op.stmts[at].line}")


def _check_own_position(op: Op, i: int, stmt: Stmt, access: Access, rebound: frozenset,
                        output: str, extents: tuple) -> None:
    """Rule 3: the aliased input is read at the reading statement's own element."""
    source = op.tensor(access.tensor)
    own = tuple(f.pure_symbol for f in access.indices)
    where = f"'{output}' is written over '{access.tensor}'"
    if rebound:
        raise _error(access, stmt, f"{where}, so it can be read only element by element, "
                     "not inside a reduction or scan", f"reduce over a copy of "
                     f"'{access.tensor}' passed as another input")
    if access.pad is not None or own != stmt.indices:
        raise _error(access, stmt, f"{where}, so it must be read as {access.tensor}"
                     f"[{', '.join(stmt.indices)}] (the element this statement writes)",
                     "an element read elsewhere may already be overwritten")
    if extents != source.shape:
        raise _error(access, stmt, f"{where}, so the statement reading it must cover its "
                     f"shape [{', '.join(map(str, source.shape))}]")


def _reads(expr, rebound: frozenset):
    """(access, indices rebound by enclosing reductions and scans) for every tensor read."""
    if isinstance(expr, Access):
        yield expr, rebound
    if isinstance(expr, Reduce):
        rebound = rebound | set(expr.indices)
    elif isinstance(expr, Scan):
        rebound = rebound | {expr.index}
    for child in children(expr):
        yield from _reads(child, rebound)


def _type(decl) -> str:
    return f"{decl.dtype.value}[{', '.join(map(str, decl.shape))}]"


def _error(access: Access, stmt: Stmt, message: str, hint: str = "") -> OdlError:
    line, column = access.loc if access.loc != (0, 0) else (stmt.line, 1)
    return OdlError(message, line, column, hint)
