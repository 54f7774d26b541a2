"""Structural rewrites autodiff relies on: alpha-renaming, scans as guarded reductions,
equality up to reduction-index names, sub-expression search and replacement."""

from __future__ import annotations

from uol_core.odl.derivatives import rebuild, substitute
from uol_core.odl.ir import Access, Affine, Binary, Call, Const, Expr, Reduce, Scan, Var, walk
from uol_core.odl.simplify import ONE, ZERO


def contains(expr: Expr, key: Expr) -> bool:
    """Whether a sub-expression of `expr` equals `key` up to reduction-index names."""
    return any(alpha_normal(node) == key for node in walk(expr) if isinstance(node, Reduce))


def replace_subexpression(expr: Expr, key: Expr, by: Expr) -> Expr:
    if isinstance(expr, Reduce) and alpha_normal(expr) == key:
        return by
    return rebuild(expr, lambda child: replace_subexpression(child, key, by))


def alpha_normal(expr: Expr) -> Expr:
    """The expression with reduction indices renamed by position, for equality up to renaming."""
    counter = iter(range(1 << 30))

    def walk_(node: Expr) -> Expr:
        if isinstance(node, Reduce):
            mapping = {old: Affine.of(f"__{next(counter)}") for old in node.indices}
            body = substitute(node.body, mapping)
            names = tuple(m.pure_symbol for m in mapping.values())
            written = tuple((mapping[n].pure_symbol, e) for n, e in node.extents)
            return Reduce(node.op, names, walk_(body), (0, 0), written)
        return rebuild(node, walk_)

    return walk_(expr)


def factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "mul":
        return factors(expr.lhs) + factors(expr.rhs)
    return [expr]


_SCAN_AS_REDUCTION = {"cumsum": ("sum", ZERO), "cumprod": ("prod", ONE),
                      "cummax": ("max", Const(float("-inf")))}


class Renamer:
    """Give every reduction index a unique name and turn cumsum into a guarded sum."""

    def __init__(self, fresh, reductions: dict, extents: dict[str, Affine]) -> None:
        self.fresh = fresh
        self.reductions = reductions
        self.extents = extents

    def run(self, expr: Expr, env: dict[str, Affine] | None = None) -> Expr:
        env = env or {}
        if isinstance(expr, Reduce):
            inner = dict(env)
            names = []
            for old in expr.indices:
                new = self.fresh(old)
                self.extents[new] = self.reductions[expr][old]
                inner[old] = Affine.of(new)
                names.append(new)
            return Reduce(expr.op, tuple(names), self.run(expr.body, inner), expr.loc)
        if isinstance(expr, Scan):
            # A scan is a reduction over the prefix: cumsum[j](b) = sum[j2](where(j2 <= j, b(j2), 0)).
            reduction, neutral = _SCAN_AS_REDUCTION[expr.op]
            running = self.fresh(expr.index)
            self.extents[running] = self.extents[expr.index]
            inner = {**env, expr.index: Affine.of(running)}
            guard = Binary("le", Var(running), Var(expr.index))
            body = Call("where", (guard, self.run(expr.body, inner), neutral))
            return Reduce(reduction, (running,), body, (0, 0), ((running, self.extents[running]),))
        if isinstance(expr, (Access, Var)):
            return substitute(expr, env)
        return rebuild(expr, lambda child: self.run(child, env))


