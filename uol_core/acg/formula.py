"""Constraint formulas as functions, without eval: arithmetic, comparisons and logic only.

The ACG writes its constraints as text a person reads (`mr * (nr // 8) + 1 <= 16`); this
module turns that text into a Python function by walking its syntax tree, accepting only
numbers, strings, the named variables and the operators below — anything else is an error.
"""

from __future__ import annotations

import ast
import operator
import threading
from collections.abc import Callable
from functools import lru_cache

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}

Env = dict
Node = Callable[[Env], object]
# ast.parse counts its recursion depth in state the interpreter's threads share (CPython
# gh-106905): two threads parsing at once (two tuners, two IDE requests) can fail with
# "SystemError: AST constructor recursion depth mismatch". One parse at a time.
_PARSE = threading.Lock()


@lru_cache(maxsize=4096)
def compile_formula(formula: str, variables: tuple[str, ...]) -> Callable[..., bool]:
    """`f(*values)` in the order of `variables`: whether the formula holds."""
    with _PARSE:
        tree = ast.parse(formula, mode="eval")
    node = _compile(tree.body, set(variables))

    def predicate(*values: object) -> bool:
        return bool(node(dict(zip(variables, values))))

    return predicate


def _compile(tree: ast.AST, names: set[str]) -> Node:
    if isinstance(tree, ast.Constant) and isinstance(tree.value, (int, float, str)):
        value = tree.value
        return lambda env: value
    if isinstance(tree, ast.Name) and tree.id in names:
        name = tree.id
        return lambda env: env[name]
    if isinstance(tree, ast.BinOp) and type(tree.op) in _BINARY:
        fn, lhs, rhs = _BINARY[type(tree.op)], _compile(tree.left, names), _compile(tree.right, names)
        return lambda env: fn(lhs(env), rhs(env))
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, (ast.USub, ast.Not)):
        inner = _compile(tree.operand, names)
        if isinstance(tree.op, ast.USub):
            return lambda env: -inner(env)
        return lambda env: not inner(env)
    if isinstance(tree, ast.BoolOp):
        parts = [_compile(v, names) for v in tree.values]
        if isinstance(tree.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(tree, ast.Compare) and all(type(op) in _COMPARE for op in tree.ops):
        first = _compile(tree.left, names)
        rest = [(_COMPARE[type(op)], _compile(c, names)) for op, c in zip(tree.ops, tree.comparators)]

        def compare(env: Env) -> bool:
            left = first(env)
            for fn, right_node in rest:
                right = right_node(env)
                if not fn(left, right):
                    return False
                left = right
            return True

        return compare
    raise ValueError(f"unsupported element in a constraint formula: {ast.dump(tree)[:60]}")
