"""Number literals: read from the text, then checked against the type they are computed in.

An integer literal is emitted as a 64-bit integer (`INT64_C(...)`) and combined with its
partner's type (`X[i] + 7` adds in X's type), so it must fit int64 and that type: C would
wrap `18446744073709551621` to 0 while the reference evaluator raises, and an i8 tensor plus
300 overflows. Such literals are rejected with their line and column before any backend runs.
"""

from __future__ import annotations

from collections.abc import Callable

from uol_core.odl.errors import OdlError
from uol_core.odl.ir import (
    COMPARISONS,
    LOGICAL,
    Access,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    Reduce,
    Scan,
    Unary,
    children,
    promote,
)
from uol_core.odl.lexer import DIGITS

INT64_BOUND = 2**63
INT_RANGES = {DType.i8: (-128, 127), DType.i32: (-(2**31), 2**31 - 1)}
FLOAT_MAX = {DType.f16: 65504.0, DType.bf16: 3.3895313892515355e38,
             DType.f32: 3.4028234663852886e38, DType.f64: 1.7976931348623157e308}

DTypeOf = Callable[[Expr], "DType | None"]


def number_literal(text: str, line: int, column: int) -> Const:
    """The Const of a NUMBER token (ASCII digits, fraction, exponent). A float literal past
    the f64 range is infinity (the printer writes it as 1e999); integers must fit int64 and
    are held exactly (an f64 would round 4611686018427387903 up to 2**62)."""
    is_int = all(c in DIGITS for c in text)
    exact = is_int and len(text) <= 40  # longer ones are past int64 (and int() caps digits)
    const = Const(int(text) if exact else float(text), is_int, (line, column))
    _check_int64(const, text, line, column)
    return const


def _check_int64(const: Const, text: str, line: int, column: int) -> None:
    """Integers are computed in int64."""
    if const.is_int and abs(const.value) >= INT64_BOUND:
        raise OdlError(f"integer {text} is outside the 64-bit range ODL computes integers in",
                       line, column, "use an integer below 2**63 in magnitude, or a float "
                       "literal such as 1.8e19")


def check_literals(expr: Expr, result: DType, line: int, dtype_of: DTypeOf) -> None:
    """Reject integer literals and pad values outside the type they are computed in.

    `result` is the statement's element type (the type a lone literal is stored as);
    `dtype_of` gives an expression's type, or None when only literals and indices make it."""
    _visit(expr, result, line, dtype_of)


def _visit(expr: Expr, context: DType | None, line: int, dtype_of: DTypeOf) -> None:
    if isinstance(expr, Const):
        _check_const(expr, context, line)
        return
    if isinstance(expr, Access):
        return  # pad values: checked where the tensors' types are known (check_pad_value)
    if isinstance(expr, Binary) and expr.op in COMPARISONS:
        inner = _promoted([dtype_of(expr.lhs), dtype_of(expr.rhs)])
    elif (isinstance(expr, Binary) and expr.op in LOGICAL) or (
            isinstance(expr, Unary) and expr.op == "not") or isinstance(expr, Cast):
        inner = None  # truth values, or an explicit conversion the user asked for
    elif isinstance(expr, Call) and expr.fn == "where":
        _visit(expr.args[0], None, line, dtype_of)
        branch = dtype_of(expr) or context
        for arg in expr.args[1:]:
            _visit(arg, branch, line, dtype_of)
        return
    elif isinstance(expr, (Reduce, Scan)):
        inner = dtype_of(expr.body) or context
    else:  # arithmetic, negation, functions: computed in the expression's own type
        inner = dtype_of(expr) or context
    for child in children(expr):
        _visit(child, inner, line, dtype_of)


def _promoted(types: list[DType | None]) -> DType | None:
    found = [t for t in types if t is not None]
    if not found:
        return None
    out = found[0]
    for other in found[1:]:
        out = promote(out, other)
    return out


def _check_const(const: Const, context: DType | None, line: int) -> None:
    if not const.is_int:
        return
    where_line, column = const.loc if const.loc[0] else (line, 1)
    text = f"{int(const.value)}"
    _check_int64(const, text, where_line, column)
    if context in INT_RANGES:
        low, high = INT_RANGES[context]
        if not low <= const.value <= high:
            raise OdlError(f"integer {text} does not fit {context.value} (range [{low}, {high}])",
                           where_line, column, "cast the other operand to a wider type, e.g. f32(...)")
    elif context in FLOAT_MAX and abs(const.value) > FLOAT_MAX[context]:
        raise OdlError(f"integer {text} is beyond the largest {context.value} "
                       f"({FLOAT_MAX[context]:g})", where_line, column,
                       "use a wider element type or a smaller constant")


def check_pad_value(access: Access, dtype: DType, line: int) -> None:
    """An integer (or bool: 0, 1) tensor's pad value must fit its type (it is read as an
    element, and C writes it as an integer literal). Floats beyond
    the type's range become inf alike in every backend, as a float literal does."""
    if access.pad is None:
        return
    where_line, column = access.loc if access.loc[0] else (line, 1)
    ranges = {**INT_RANGES, DType.bool: (0, 1)}
    if dtype in ranges and not ranges[dtype][0] <= access.pad <= ranges[dtype][1]:
        low, high = ranges[dtype]
        raise OdlError(f"pad value {access.pad:g} does not fit {dtype.value} (range [{low}, "
                       f"{high}])", where_line, column, "pad with a value of the tensor's type")
