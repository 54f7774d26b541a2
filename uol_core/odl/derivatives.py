"""Symbolic partial derivatives of ODL expressions with respect to one tensor element."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from uol_core.odl.errors import OdlError
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Reduce,
    Scan,
    Unary,
    Var,
)
from uol_core.odl.simplify import ONE, ZERO, const

# x / sqrt(2) as a product: a division per element is a vector divide in the kernel
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
GELU_TANH_K, GELU_TANH_A = 2.0 * math.sqrt(2.0 / math.pi), 0.044715  # gelu_tanh = x sigmoid(K u)


def affine_expr(form: Affine) -> Expr:
    """An affine form as an arithmetic expression over index values."""
    expr: Expr | None = None
    for name, coeff in form.terms:
        term: Expr = Var(name) if coeff == 1 else Binary("mul", const(coeff), Var(name))
        expr = term if expr is None else Binary("add", expr, term)
    if expr is None:
        return const(form.const)
    return Binary("add", expr, const(form.const)) if form.const else expr


def substitute_affine(form: Affine, mapping: Mapping[str, Affine]) -> Affine:
    """Replace symbols of a form by other forms."""
    out = Affine.constant(form.const)
    for name, coeff in form.terms:
        out = out + (mapping[name].scale(coeff) if name in mapping else Affine(((name, coeff),)))
    return out


def substitute(expr: Expr, mapping: Mapping[str, Affine], pad_changed: bool = False) -> Expr:
    """Replace index names by affine forms everywhere; optionally pad the accesses that changed."""
    if isinstance(expr, Var):
        return affine_expr(mapping[expr.name]) if expr.name in mapping else expr
    if isinstance(expr, Access):
        new = tuple(substitute_affine(f, mapping) for f in expr.indices)
        if new == expr.indices:
            return expr
        pad = expr.pad if expr.pad is not None or not pad_changed else 0.0
        return Access(expr.tensor, new, pad, expr.loc)
    if isinstance(expr, Reduce) and set(expr.indices) & set(mapping):
        # A reduction binds its own indices: occurrences inside it are not the free ones.
        inner = {k: v for k, v in mapping.items() if k not in expr.indices}
        return Reduce(expr.op, expr.indices, substitute(expr.body, inner, pad_changed), expr.loc)
    return rebuild(expr, lambda child: substitute(child, mapping, pad_changed))


def rebuild(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """The same node with `fn` applied to each direct child."""
    if isinstance(expr, Unary):
        return Unary(expr.op, fn(expr.operand))
    if isinstance(expr, Binary):
        return Binary(expr.op, fn(expr.lhs), fn(expr.rhs))
    if isinstance(expr, Call):
        return Call(expr.fn, tuple(fn(a) for a in expr.args))
    if isinstance(expr, Cast):
        return Cast(expr.dtype, fn(expr.operand))
    if isinstance(expr, Reduce):
        return Reduce(expr.op, expr.indices, fn(expr.body), expr.loc)
    if isinstance(expr, Scan):
        return Scan(expr.op, expr.index, fn(expr.body), expr.loc)
    return expr


def access_symbols(access: Access) -> set[str]:
    return {name for form in access.indices for name in form.symbols}


class Differentiator:
    """d(expr)/d(symbol) where symbol is one element read; reductions over the symbol's own
    indices are 'stripped' (those indices join the caller's summation instead)."""

    def __init__(self, symbol: Access, fresh: Callable[[str], str],
                 extents: Mapping[str, Affine]) -> None:
        self.symbol = symbol
        self.vars = access_symbols(symbol)
        self.fresh = fresh
        self.extents = extents
        self.stripped: list[str] = []

    def d(self, expr: Expr) -> Expr:
        if isinstance(expr, Access):
            return ONE if expr == self.symbol else ZERO
        if isinstance(expr, (Const, Var)):
            return ZERO
        if isinstance(expr, Unary):
            return ZERO if expr.op == "not" else Unary("neg", self.d(expr.operand))
        if isinstance(expr, Cast):
            return self.d(expr.operand) if expr.dtype.is_float else ZERO
        if isinstance(expr, Binary):
            return self.binary(expr)
        if isinstance(expr, Call):
            return self.call(expr)
        if isinstance(expr, Reduce):
            return self.reduce(expr)
        raise OdlError(f"cannot differentiate {type(expr).__name__} nodes")

    def binary(self, e: Binary) -> Expr:
        a, b = e.lhs, e.rhs
        if e.op in ("add", "sub"):
            return Binary(e.op, self.d(a), self.d(b))
        if e.op == "mul":
            return Binary("add", Binary("mul", self.d(a), b), Binary("mul", a, self.d(b)))
        if e.op == "div":
            da, db = self.d(a), self.d(b)
            return Binary("sub", Binary("div", da, b), Binary("div", Binary("mul", a, db),
                                                              Binary("mul", b, b)))
        return ZERO  # comparisons and logic are piecewise constant

    def call(self, e: Call) -> Expr:
        if e.fn == "where":
            cond, a, b = e.args
            return Call("where", (cond, self.d(a), self.d(b)))
        if e.fn in ("max", "min"):
            a, b = e.args
            da, db = self.d(a), self.d(b)
            wins = "gt" if e.fn == "max" else "lt"
            loses = "lt" if e.fn == "max" else "gt"
            # torch splits the gradient evenly between tied arguments.
            tie = Binary("mul", const(0.5), Binary("add", da, db))
            return Call("where", (Binary(wins, a, b), da,
                                  Call("where", (Binary(loses, a, b), db, tie))))
        if e.fn == "pow":
            base, exponent = e.args
            dbase = Binary("mul", Binary("mul", exponent,
                                         Call("pow", (base, Binary("sub", exponent, ONE)))),
                           self.d(base))
            dexp = self.d(exponent)
            if dexp == ZERO:
                return dbase
            return Binary("add", dbase, Binary("mul", Binary("mul", e, Call("log", (base,))), dexp))
        (x,) = e.args
        return Binary("mul", self.local_slope(e.fn, x, e), self.d(x))

    @staticmethod
    def local_slope(fn: str, x: Expr, fx: Expr) -> Expr:
        """f'(x) for the one-argument functions, written in ODL."""
        sig = Call("sigmoid", (x,))
        table: dict[str, Callable[[], Expr]] = {
            "exp": lambda: fx,
            "log": lambda: Binary("div", ONE, x),
            "sqrt": lambda: Binary("div", const(0.5), fx),
            "rsqrt": lambda: Binary("mul", const(-0.5), Binary("div", fx, x)),
            "tanh": lambda: Binary("sub", ONE, Binary("mul", fx, fx)),
            "sigmoid": lambda: Binary("mul", fx, Binary("sub", ONE, fx)),
            "relu": lambda: Call("where", (Binary("gt", x, ZERO), ONE, ZERO)),
            "gelu": lambda: Binary("add", Binary("mul", const(0.5), Binary(
                "add", ONE, Call("erf", (Binary("mul", x, const(INV_SQRT_2)),)))), Binary(
                "mul", Binary("mul", x, const(INV_SQRT_2PI)),
                Call("exp", (Binary("mul", const(-0.5), Binary("mul", x, x)),)))),
            "gelu_tanh": lambda: _gelu_tanh_slope(x),
            "silu": lambda: Binary("mul", sig, Binary("add", ONE, Binary(
                "mul", x, Binary("sub", ONE, sig)))),
            "abs": lambda: Call("where", (Binary("gt", x, ZERO), ONE, Call(
                "where", (Binary("lt", x, ZERO), const(-1), ZERO)))),
            "erf": lambda: Binary("mul", const(TWO_OVER_SQRT_PI),
                                  Call("exp", (Unary("neg", Binary("mul", x, x)),))),
            "sin": lambda: Call("cos", (x,)),
            "cos": lambda: Unary("neg", Call("sin", (x,))),
            "floor": lambda: ZERO,
            "ceil": lambda: ZERO,
        }
        if fn not in table:
            raise OdlError(f"no derivative rule for '{fn}'")
        return table[fn]()

    def reduce(self, e: Reduce) -> Expr:
        own = [name for name in e.indices if name in self.vars]
        rest = tuple(name for name in e.indices if name not in self.vars)
        self.stripped.extend(own)
        dbody = self.d(e.body)

        def summed(body: Expr) -> Expr:
            return Reduce("sum", rest, body) if rest else body

        if e.op == "sum":
            return summed(dbody)
        if e.op == "mean":
            count: Expr = ONE
            for name in e.indices:
                count = Binary("mul", count, affine_expr(self.extents[name]))
            return Binary("div", summed(dbody), count)
        if e.op in ("max", "min"):
            # Ties share the gradient evenly, as torch.amax / amin do.
            hit = Call("where", (Binary("eq", e.body, e), ONE, ZERO))
            renamed = {n: Affine.of(self.fresh(n)) for n in e.indices}
            for old, new in renamed.items():
                self.extents = {**self.extents, new.pure_symbol: self.extents[old]}
            body2 = substitute(e.body, renamed)
            count = Reduce("sum", tuple(f.pure_symbol for f in renamed.values()),
                           Call("where", (Binary("eq", body2, e), ONE, ZERO)))
            return Binary("div", summed(Binary("mul", hit, dbody)), count)
        if e.op == "prod":
            return summed(Binary("mul", Binary("div", e, e.body), dbody))
        raise OdlError(f"no derivative rule for reduction '{e.op}'")


def _gelu_tanh_slope(x: Expr) -> Expr:
    """d/dx of x s with s = sigmoid(K (x + A x^3)): s + x s (1 - s) K (1 + 3 A x^2)."""
    cube = Binary("mul", x, Binary("mul", x, x))
    s = Call("sigmoid", (Binary("mul", const(GELU_TANH_K), Binary(
        "add", x, Binary("mul", const(GELU_TANH_A), cube))),))
    inner_slope = Binary("mul", const(GELU_TANH_K), Binary(
        "add", ONE, Binary("mul", const(3.0 * GELU_TANH_A), Binary("mul", x, x))))
    return Binary("add", s, Binary("mul", Binary("mul", x, Binary("mul", s, Binary("sub", ONE, s))),
                                   inner_slope))
