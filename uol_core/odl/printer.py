"""IR -> ODL text: the inverse of the parser (parse(format_op(op)) == op)."""

from __future__ import annotations

from uol_core.odl.ir import (
    Access,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Op,
    Reduce,
    Scan,
    TensorDecl,
    Unary,
    Var,
)

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "and", "or": "or"}
# Binding strength, loosest first; must mirror the parser's grammar levels.
_LEVEL = {"or": 1, "and": 2, "not": 3, "lt": 4, "le": 4, "gt": 4, "ge": 4, "eq": 4, "ne": 4,
          "add": 5, "sub": 5, "mul": 6, "div": 6, "neg": 7}


def format_decl(decl: TensorDecl) -> str:
    """`A: f32[M, K]`, and `aliases X` after an output written over input X."""
    text = f"{decl.name}: {decl.dtype.value}[{', '.join(map(str, decl.shape))}]"
    return f"{text} aliases {decl.alias}" if decl.alias else text


def format_op(op: Op) -> str:
    """ODL text of an operator."""
    outs = ", ".join(format_decl(d) for d in op.outputs)
    if len(op.outputs) > 1:
        outs = f"({outs})"
    lines = [f"op {op.name}({', '.join(format_decl(d) for d in op.inputs)}) -> {outs}:"]
    for stmt in op.stmts:
        lhs = f"{stmt.target}[{_bindings(stmt.indices, stmt.extents)}]"
        lines.append(f"    {lhs} = {format_expr(stmt.expr)}")
    return "\n".join(lines) + "\n"


def format_expr(expr: Expr, level: int = 0) -> str:
    """ODL text of an expression, parenthesised only where the grammar needs it."""
    if isinstance(expr, Const):
        # an integer literal prints as all its digits (it fits int64), so it stays an integer
        text = str(int(expr.value)) if expr.is_int else _float(expr.value)
        return f"({text})" if text.startswith("-") and level > 0 else text
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Access):
        inner = f"{expr.tensor}[{', '.join(map(str, expr.indices))}]"
        return inner if expr.pad is None else f"pad({inner}, {_number(expr.pad)})"
    if isinstance(expr, Unary):
        own = _LEVEL[expr.op]
        text = ("-" if expr.op == "neg" else "not ") + format_expr(expr.operand, own)
        return f"({text})" if own < level else text
    if isinstance(expr, Binary):
        own = _LEVEL[expr.op]
        # Left-associative: the right operand needs parentheses at equal strength.
        text = f"{format_expr(expr.lhs, own)} {_INFIX[expr.op]} {format_expr(expr.rhs, own + 1)}"
        if own == 4:  # comparisons do not chain
            text = f"{format_expr(expr.lhs, 5)} {_INFIX[expr.op]} {format_expr(expr.rhs, 5)}"
        return f"({text})" if own < level else text
    if isinstance(expr, Call):
        return f"{expr.fn}({', '.join(format_expr(a) for a in expr.args)})"
    if isinstance(expr, Cast):
        return f"{expr.dtype.value}({format_expr(expr.operand)})"
    if isinstance(expr, Reduce):
        return f"{expr.op}[{_bindings(expr.indices, expr.extents)}]({format_expr(expr.body)})"
    if isinstance(expr, Scan):
        return f"{expr.op}[{expr.index}]({format_expr(expr.body)})"
    raise TypeError(type(expr).__name__)


def _bindings(names: tuple[str, ...], extents: tuple) -> str:
    written = dict(extents)
    return ", ".join(f"{n}: {written[n]}" if n in written else n for n in names)


def _float(value: float) -> str:
    if value != value:  # NaN has no literal; 0/0 would change the meaning of a kernel
        raise ValueError("NaN constant cannot be written in ODL")
    if value in (float("inf"), float("-inf")):
        return "1e999" if value > 0 else "-1e999"
    return repr(float(value))


def _number(value: float) -> str:
    if value in (float("inf"), float("-inf")) or value != value:
        return _float(value)
    return str(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)
