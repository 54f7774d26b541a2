"""Masks in ODL score expressions: the causal form `where(j <= i + c, value, const)`.

Attention templates (C and Triton, forward and backward) skip the key or query blocks such a
mask cuts off entirely; this finds c from the expression itself, so any spelling of the same
inequality (`j <= i`, `i >= j`, `j < i + 1`) is recognised.
"""

from __future__ import annotations

from uol_core.odl.ir import Binary, Call, Const, Var


def _linear(e) -> dict[str, int] | None:
    """An integer linear form over index names ('' for the constant), or None."""
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, Const) and float(e.value).is_integer():
        return {"": int(e.value)}
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = _linear(e.lhs), _linear(e.rhs)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None


def causal_offset(expr, i: str, j: str) -> int | None:
    """c when the score is where(j <= i + c, .., const) with c >= 0 (every row sees key 0)."""
    if not (isinstance(expr, Call) and expr.fn == "where" and isinstance(expr.args[2], Const)):
        return None
    cond = expr.args[0]
    if not (isinstance(cond, Binary) and cond.op in ("le", "lt", "ge", "gt")):
        return None
    lhs, rhs = (cond.lhs, cond.rhs) if cond.op in ("le", "lt") else (cond.rhs, cond.lhs)
    a, b = _linear(lhs), _linear(rhs)
    if a is None or b is None:
        return None
    diff = dict(a)  # lhs - rhs (<= or < 0)
    for k, v in b.items():
        diff[k] = diff.get(k, 0) - v
    diff = {k: v for k, v in diff.items() if v}
    const = diff.pop("", 0)
    if diff != {j: 1, i: -1}:
        return None
    c = -const - (1 if cond.op in ("lt", "gt") else 0)  # j <= i + c
    return c if c >= 0 else None
