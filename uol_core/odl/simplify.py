"""Algebraic clean-up of derived expressions: fold constants, drop zeros and ones."""

from __future__ import annotations

import operator
from collections.abc import Callable

from uol_core.odl.ir import Binary, Call, Cast, Const, Expr, Reduce, Scan, Unary

ZERO = Const(0.0, True)
ONE = Const(1.0, True)


def is_zero(expr: Expr) -> bool:
    return isinstance(expr, Const) and expr.value == 0


def is_one(expr: Expr) -> bool:
    return isinstance(expr, Const) and expr.value == 1


def const(value: float) -> Const:
    """A literal, marked integral when it is a whole number (prints without a decimal point)."""
    return Const(float(value), float(value).is_integer() and abs(value) < 2**31)


def simplify(expr: Expr) -> Expr:
    """Bottom-up rewrite: x*0 -> 0, x*1 -> x, x+0 -> x, where(c, a, a) -> a, constant folding."""
    if isinstance(expr, Binary):
        lhs, rhs = simplify(expr.lhs), simplify(expr.rhs)
        return _binary(expr.op, lhs, rhs)
    if isinstance(expr, Unary):
        inner = simplify(expr.operand)
        if expr.op == "neg":
            if isinstance(inner, Const):
                return const(-inner.value)
            if isinstance(inner, Unary) and inner.op == "neg":
                return inner.operand
        return Unary(expr.op, inner)
    if isinstance(expr, Call):
        args = tuple(simplify(a) for a in expr.args)
        if expr.fn == "where" and args[1] == args[2]:
            return args[1]
        if expr.fn == "where" and isinstance(args[0], Const):
            return args[1] if args[0].value else args[2]
        if expr.fn == "pow" and is_one(args[1]):
            return args[0]
        return Call(expr.fn, args)
    if isinstance(expr, Cast):
        return Cast(expr.dtype, simplify(expr.operand))
    if isinstance(expr, Reduce):
        body = simplify(expr.body)
        if is_zero(body) and expr.op in ("sum", "mean"):
            return ZERO
        return Reduce(expr.op, expr.indices, body, expr.loc)
    if isinstance(expr, Scan):
        body = simplify(expr.body)
        return ZERO if is_zero(body) else Scan(expr.op, expr.index, body, expr.loc)
    return expr


def _binary(op: str, lhs: Expr, rhs: Expr) -> Expr:
    fold = _FOLDABLE.get(op)
    if fold is not None and isinstance(lhs, Const) and isinstance(rhs, Const):
        return const(fold(lhs.value, rhs.value))
    identity = _IDENTITIES.get(op)
    shortcut = identity(lhs, rhs) if identity is not None else None
    return shortcut if shortcut is not None else Binary(op, lhs, rhs)


def _is_minus_one(expr: Expr) -> bool:
    return isinstance(expr, Const) and expr.value == -1


# Each identity returns the shorter form, or None when the operands allow no shortcut.
def _add_identity(lhs: Expr, rhs: Expr) -> Expr | None:
    if is_zero(lhs):
        return rhs
    if is_zero(rhs):
        return lhs
    if isinstance(rhs, Unary) and rhs.op == "neg":
        return _binary("sub", lhs, rhs.operand)
    return None


def _sub_identity(lhs: Expr, rhs: Expr) -> Expr | None:
    if is_zero(rhs):
        return lhs
    if is_zero(lhs):
        return simplify(Unary("neg", rhs))
    return None


def _mul_identity(lhs: Expr, rhs: Expr) -> Expr | None:
    if is_zero(lhs) or is_zero(rhs):
        return ZERO
    if is_one(lhs):
        return rhs
    if is_one(rhs):
        return lhs
    if _is_minus_one(lhs):
        return simplify(Unary("neg", rhs))
    if _is_minus_one(rhs):
        return simplify(Unary("neg", lhs))
    return None


def _div_identity(lhs: Expr, rhs: Expr) -> Expr | None:
    if is_zero(lhs):
        return ZERO
    if is_one(rhs):
        return lhs
    return None


_FOLDABLE: dict[str, Callable[[float, float], float]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul}
_IDENTITIES: dict[str, Callable[[Expr, Expr], Expr | None]] = {
    "add": _add_identity, "sub": _sub_identity, "mul": _mul_identity, "div": _div_identity}
