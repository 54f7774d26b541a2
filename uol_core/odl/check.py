"""Semantic checks and shape inference: names resolve, indices are bounded, shapes agree."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from uol_core.odl.aliases import check_aliases
from uol_core.odl.errors import OdlError
from uol_core.odl.ir import (
    COMPARISONS,
    LOGICAL,
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
    children,
    promote,
    walk,
)
from uol_core.odl.literals import check_literals, check_pad_value


@dataclass
class StmtExtents:
    """Extents of a statement's free indices and of every reduction's indices."""

    free: dict[str, Affine]
    reductions: dict[Reduce, dict[str, Affine]]


def check_op(op: Op) -> Op:
    """Check an operator and return it with its intermediates' declarations filled in."""
    inputs = {d.name: d for d in op.inputs}
    outputs = {d.name: d for d in op.outputs}
    _check_declarations(op)
    dims = set(op.dims)
    known: dict[str, TensorDecl] = dict(inputs)
    local_decls: list[TensorDecl] = []
    for stmt in op.stmts:
        if stmt.target in inputs:
            raise OdlError(f"'{stmt.target}' is an input and cannot be assigned", stmt.line, 1,
                           "assign to an output or to a new intermediate name")
        if stmt.target in known:
            raise OdlError(f"'{stmt.target}' is assigned twice", stmt.line, 1,
                           "each tensor is defined by exactly one statement")
        if stmt.target in dims:
            raise OdlError(f"'{stmt.target}' is a dimension symbol, not a tensor", stmt.line, 1)
        if len(set(stmt.indices)) != len(stmt.indices):
            raise OdlError(f"repeated index on the left of '{stmt.target}'", stmt.line, 1)
        for name in stmt.indices:
            if name in dims or name in known or name in outputs:
                raise OdlError(f"index '{name}' clashes with a dimension or tensor name",
                               stmt.line, 1, "use lower-case index names such as i, j, k")
        declared = outputs.get(stmt.target)
        if declared is not None and len(declared.shape) != len(stmt.indices):
            raise OdlError(f"'{stmt.target}' has rank {len(declared.shape)} but is assigned with "
                           f"{len(stmt.indices)} indices", stmt.line, 1)
        extents = _infer(stmt, known, declared, dims)
        dtype = declared.dtype if declared else _dtype_of(stmt.expr, known)
        _check_numbers(stmt, known, dtype)
        decl = declared or TensorDecl(stmt.target, dtype,
                                      tuple(extents.free[i] for i in stmt.indices), stmt.line)
        known[stmt.target] = decl
        if declared is None:
            local_decls.append(decl)
    missing = [name for name in outputs if name not in known]
    if missing:
        raise OdlError(f"output '{missing[0]}' is never assigned", outputs[missing[0]].line, 1,
                       f"add a statement  {missing[0]}[...] = ...")
    checked = replace(op, locals=tuple(local_decls))
    check_aliases(checked)
    return checked


def _check_numbers(stmt: Stmt, known: dict[str, TensorDecl], dtype: DType) -> None:
    """Literals and pad values fit the types they are computed in (see literals.py); bool
    values take no part in arithmetic whose meaning differs between backends."""
    check_literals(stmt.expr, dtype, stmt.line, lambda e: _dtype_or_none(e, known))
    for node in walk(stmt.expr):
        if isinstance(node, Access):
            check_pad_value(node, known[node.tensor].dtype, stmt.line)
        bad = _bool_misuse(node, known)
        if bad is not None:
            line, col = _first_loc(node) or (stmt.line, 1)
            raise OdlError(bad, line, col,
                           "cast it first, e.g. f32(X[i] > 0), or choose with where(cond, a, b)")


def _bool_misuse(node: Expr, known: dict[str, TensorDecl]) -> str | None:
    """What is wrong when `node` does arithmetic on bools: negation and subtraction are not
    defined on them, arithmetic whose type stays bool (true + true, true + 2) is 1 in one
    backend and 2 or 3 in another, and the math functions take numbers. Multiplying a number
    by a bool (a mask) and where(...) stay allowed."""
    def is_bool(e: Expr) -> bool:
        return _dtype_or_none(e, known) == DType.bool

    if isinstance(node, Unary) and node.op == "neg" and is_bool(node.operand):
        return "negation of a bool value"
    if isinstance(node, Binary) and node.op == "sub" and (is_bool(node.lhs) or is_bool(node.rhs)):
        return "subtraction with a bool value"
    if isinstance(node, Binary) and node.op in ("add", "mul", "div") and is_bool(node):
        return f"{_ARITH_WORDS[node.op]} of bool values (its type would stay bool)"
    if isinstance(node, Call) and node.fn != "where" and any(is_bool(a) for a in node.args):
        return f"{node.fn}() of a bool value"
    return None


_ARITH_WORDS = {"add": "addition", "mul": "multiplication", "div": "division"}


def _first_loc(expr: Expr) -> tuple[int, int] | None:
    """Where the text wrote the first located part of an expression (for error positions)."""
    for node in walk(expr):
        loc = getattr(node, "loc", None)
        if isinstance(loc, tuple) and len(loc) == 2 and loc[0]:
            return loc
    return None


def _check_declarations(op: Op) -> None:
    seen: set[str] = set()
    for decl in op.inputs + op.outputs:
        if decl.name in seen:
            raise OdlError(f"tensor '{decl.name}' is declared twice", decl.line, 1)
        seen.add(decl.name)
    for decl in op.inputs + op.outputs:
        for extent in decl.shape:
            clash = seen.intersection(extent.symbols)
            if clash:
                raise OdlError(f"shape of '{decl.name}' uses tensor name '{clash.pop()}' as a dimension",
                               decl.line, 1)


@functools.lru_cache(maxsize=512)
def stmt_extents(op: Op, index: int) -> StmtExtents:
    """Extents (affine in dimension symbols) of the indices of statement `index` of a checked op."""
    stmt = op.stmts[index]
    known = {d.name: d for d in op.inputs + op.locals}
    known.update({d.name: d for d in op.outputs})
    outputs = {d.name: d for d in op.outputs}
    return _infer(stmt, known, outputs.get(stmt.target), set(op.dims))


def _infer(stmt: Stmt, known: dict[str, TensorDecl], declared: TensorDecl | None,
           dims: set[str]) -> StmtExtents:
    """Resolve names, infer index extents from pure uses, and check bounds."""
    free_candidates: dict[str, list[tuple[Affine, str]]] = {i: [] for i in stmt.indices}
    if declared is not None:
        for name, extent in zip(stmt.indices, declared.shape):
            free_candidates[name].append((extent, f"the shape of {declared.name}"))
    written = dict(stmt.extents)
    for name, extent in stmt.extents:
        if name not in free_candidates:
            raise OdlError(f"extent given for '{name}', which is not an index of the left side",
                           stmt.line, 1)
        free_candidates[name].insert(0, (extent, f"'{name}: {extent}'"))
    reductions: dict[Reduce, dict[str, Affine]] = {}
    walker = _Walker(stmt, known, dims, reductions)
    scope = {name: free_candidates[name] for name in stmt.indices}
    walker.visit(stmt.expr, scope, frozenset())
    free = {name: walker.resolve(name, cands, stmt.line,
                                 declared=declared is not None or name in written)
            for name, cands in free_candidates.items()}
    extents = StmtExtents(free, reductions)
    walker.check_bounds()
    return extents


class _Walker:
    """One pass over a statement: resolves names, gathers extent candidates per index binding."""

    def __init__(self, stmt: Stmt, known: dict[str, TensorDecl], dims: set[str],
                 reductions: dict[Reduce, dict[str, Affine]]) -> None:
        self.stmt = stmt
        self.known = known
        self.dims = dims
        self.reductions = reductions
        self.accesses: list[tuple[Access, dict[str, list]]] = []
        # Each index binding owns one candidate list; resolved extents are keyed by its identity,
        # because a reduction index may shadow a free index of the same name.
        self.resolved: dict[int, Affine] = {}

    def visit(self, expr: Expr, scope: dict[str, list], scans: frozenset[str]) -> None:
        line = self.stmt.line
        if isinstance(expr, Var):
            if expr.name not in scope and expr.name not in self.dims:
                kind = "a tensor and needs indices" if expr.name in self.known else "not defined"
                col = expr.loc[1]
                raise OdlError(f"'{expr.name}' is {kind}", expr.loc[0] or line, col,
                               "index names come from the left side or a reduction like sum[k](...)")
            return
        if isinstance(expr, Access):
            self._visit_access(expr, scope)
            return
        if isinstance(expr, Reduce):
            inner = dict(scope)
            bound: dict[str, list] = {}
            for name in expr.indices:
                if name in self.dims or name in self.known:
                    raise OdlError(f"reduction index '{name}' clashes with a dimension or tensor name",
                                   expr.loc[0] or line, expr.loc[1])
                if name in bound:
                    raise OdlError(f"index '{name}' repeated in {expr.op}[...]", expr.loc[0] or line,
                                   expr.loc[1])
                bound[name] = []
                inner[name] = bound[name]
            written = dict(expr.extents)
            for name, extent in expr.extents:
                if name not in bound:
                    raise OdlError(f"extent given for '{name}', which this reduction does not bind",
                                   expr.loc[0] or line, expr.loc[1])
                bound[name].append((extent, f"'{name}: {extent}'"))
            self.visit(expr.body, inner, scans)
            self.reductions[expr] = {n: self.resolve(n, c, expr.loc[0] or line, expr.loc[1],
                                                     declared=n in written,
                                                     binding=f"{expr.op}[{n}: ...](...)")
                                     for n, c in bound.items()}
            return
        if isinstance(expr, Scan):
            if expr.index not in self.stmt.indices or scope.get(expr.index) is None:
                raise OdlError(f"{expr.op} index '{expr.index}' must be an index of the left side",
                               expr.loc[0] or line, expr.loc[1])
            self.visit(expr.body, scope, scans | {expr.index})
            return
        for child in children(expr):
            self.visit(child, scope, scans)

    def _visit_access(self, expr: Access, scope: dict[str, list]) -> None:
        line, col = expr.loc[0] or self.stmt.line, expr.loc[1]
        decl = self.known.get(expr.tensor)
        if decl is None:
            hint = ("it is assigned later; define it before use" if expr.tensor == self.stmt.target
                    else "declare it as an input or assign it in an earlier statement")
            raise OdlError(f"tensor '{expr.tensor}' is not defined here", line, col, hint)
        if len(expr.indices) != len(decl.shape):
            raise OdlError(f"'{expr.tensor}' has rank {len(decl.shape)} but is indexed with "
                           f"{len(expr.indices)} indices", line, col)
        for position, form in enumerate(expr.indices):
            for name in form.symbols:
                if name not in scope and name not in self.dims:
                    raise OdlError(f"index '{name}' is not bound", line, col,
                                   "bind it on the left side or in a reduction like sum[k](...)")
            pure = form.pure_symbol
            # A padded read may leave its tensor, so it says nothing about an index's extent.
            if pure is not None and pure in scope and expr.pad is None:
                scope[pure].append((decl.shape[position], f"{expr.tensor} (axis {position})"))
        self.accesses.append((expr, dict(scope)))

    def resolve(self, name: str, candidates: list[tuple[Affine, str]], line: int,
                column: int = 1, declared: bool = False, binding: str = "") -> Affine:
        """The extent of an index binding; with `declared`, the first candidate is the output's
        declared extent and may be smaller than an axis it reads (Y: f32[N - 2] reading X[i]).
        Axes of different extents leave it undefined: an error asks for the extent in writing."""
        if not candidates:
            raise OdlError(f"cannot infer the extent of index '{name}'", line, column,
                           f"use '{name}' alone as an index of some tensor, e.g. X[{name}]")
        first, where = candidates[0]
        for extent, other in candidates[1:]:
            if declared and not _maybe_negative(extent - first):
                continue  # reads a prefix of a longer axis; check_bounds still applies
            if extent != first:
                raise OdlError(f"index '{name}' has extent {first} from {where} but {extent} "
                               f"from {other}", line, column,
                               self._which_extent(name, first, extent, binding) if not declared
                               else "use the same dimension symbol for both, or fix the shapes")
        self.resolved[id(candidates)] = first
        return first

    def _which_extent(self, name: str, first: Affine, other: Affine, binding: str) -> str:
        """The hint for an index whose axes disagree: write the extent meant (the smaller one
        reads a prefix of the longer axis)."""
        smaller = first if not _maybe_negative(other - first) else other
        written = (binding.replace("...", str(smaller), 1) if binding
                   else f"{self.stmt.target}[..., {name}: {smaller}] = ...")
        return (f"say which: write the extent where '{name}' is bound, e.g. {written} (a read "
                "may cover a prefix of a longer axis), or use one dimension symbol for both")

    def check_bounds(self) -> None:
        """Reject accesses that certainly leave their tensor; the rest is checked with sizes."""
        resolved = self.resolved
        for access, scope in self.accesses:
            if access.pad is not None:
                continue
            decl = self.known[access.tensor]
            env = {n: resolved[id(c)] for n, c in scope.items() if id(c) in resolved}
            for position, form in enumerate(access.indices):
                low, high = index_range(form, env)
                limit = decl.shape[position] - Affine.constant(1)
                for slack, side in ((low, "below 0"), (limit - high, f"past {decl.shape[position]}")):
                    if definitely_negative(slack):
                        line, col = access.loc[0] or self.stmt.line, access.loc[1]
                        raise OdlError(
                            f"{access.tensor}[{', '.join(map(str, access.indices))}] reads "
                            f"axis {position} {side}", line, col,
                            "shrink the output, shift the index, or read zeros outside with "
                            f"pad({access.tensor}[...], 0)")


def index_range(form: Affine, env: dict[str, Affine]) -> tuple[Affine, Affine]:
    """Smallest and largest value of an index form when each index i runs over [0, env[i])."""
    low = high = Affine.constant(form.const)
    for name, coeff in form.terms:
        if name in env:
            span = (env[name] - Affine.constant(1)).scale(coeff)
            if coeff > 0:
                high = high + span
            else:
                low = low + span
        else:  # a dimension symbol used as a value
            term = Affine(((name, coeff),), 0)
            low, high = low + term, high + term
    return low, high


def _maybe_negative(form: Affine) -> bool:
    """False when the form is >= 0 for every assignment of symbols >= 1."""
    if all(c >= 0 for _, c in form.terms):
        return form.const + sum(c for _, c in form.terms) < 0
    return True


def definitely_negative(form: Affine) -> bool:
    """True when the form is negative for every assignment of symbols >= 1."""
    if all(c <= 0 for _, c in form.terms):
        return form.const + sum(c for _, c in form.terms) < 0
    return False


def _dtype_of(expr: Expr, known: dict[str, TensorDecl]) -> DType:
    """Element type of an expression; literals and index values adapt to their partners."""
    found = _dtype_or_none(expr, known)
    return found or DType.f32


def _dtype_or_none(expr: Expr, known: dict[str, TensorDecl]) -> DType | None:
    if isinstance(expr, Access):
        return known[expr.tensor].dtype
    if isinstance(expr, (Const, Var)):
        return None
    if isinstance(expr, Cast):
        return expr.dtype
    if isinstance(expr, Binary) and expr.op in COMPARISONS + LOGICAL:
        return DType.bool
    if isinstance(expr, Unary) and expr.op == "not":
        return DType.bool
    if isinstance(expr, Call) and expr.fn == "where":
        parts = [_dtype_or_none(a, known) for a in expr.args[1:]]
    else:
        parts = [_dtype_or_none(c, known) for c in children(expr)]
    found = [p for p in parts if p is not None]
    if not found:
        return None
    result = found[0]
    for other in found[1:]:
        result = promote(result, other)
    floaty = isinstance(expr, Call) and expr.fn not in ("where", "max", "min", "abs", "relu")
    mean = isinstance(expr, Reduce) and expr.op == "mean"
    if (floaty or mean) and not result.is_float:
        return DType.f32
    return result
