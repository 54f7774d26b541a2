"""A Python builder that mirrors ODL text: build the same checked IR without writing text.

    >>> from uol_core.odl.builder import OpBuilder, sum_
    >>> b = OpBuilder("matmul")
    >>> A = b.input("A", "f32", "M", "K"); B = b.input("B", "f32", "K", "N")
    >>> C = b.output("C", "f32", "M", "N")
    >>> m, n, k = b.indices("m n k")
    >>> _ = b.assign(C[m, n], sum_([k], A[m, k] * B[k, n]))
    >>> print(b.build().name)
    matmul
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.odl.check import check_op
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
from uol_core.odl.lexer import tokenize
from uol_core.odl.parser import _Parser


def _expr(value: object) -> Expr:
    if isinstance(value, E):
        return value.node
    if isinstance(value, Index):
        return Var(value.name)
    if isinstance(value, bool):
        raise TypeError("use where(...) or comparisons, not Python booleans")
    if isinstance(value, int):
        return Const(float(value), True)
    if isinstance(value, float):
        return Const(value)
    raise TypeError(f"cannot use {type(value).__name__} in an ODL expression")


class E:
    """An expression under construction; Python operators build IR nodes."""

    def __init__(self, node: Expr) -> None:
        self.node = node

    def _bin(self, op: str, other: object, swap: bool = False) -> E:
        a, b = _expr(self), _expr(other)
        return E(Binary(op, b, a) if swap else Binary(op, a, b))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __neg__(self): return E(Unary("neg", self.node))
    def __pow__(self, o): return E(Call("pow", (self.node, _expr(o))))


@dataclass(frozen=True)
class Index:
    """An index name; arithmetic on it builds affine index forms."""

    name: str

    def affine(self) -> Affine:
        return Affine.of(self.name)

    def __add__(self, o: object) -> _Form: return _Form(self.affine()) + o
    def __sub__(self, o: object) -> _Form: return _Form(self.affine()) - o
    def __rmul__(self, o: int) -> _Form: return _Form(self.affine().scale(o))
    def __le__(self, o: object) -> E: return E(Var(self.name)) <= o
    def __lt__(self, o: object) -> E: return E(Var(self.name)) < o
    def __ge__(self, o: object) -> E: return E(Var(self.name)) >= o
    def __gt__(self, o: object) -> E: return E(Var(self.name)) > o


@dataclass(frozen=True)
class _Form:
    form: Affine

    def __add__(self, o: object) -> _Form: return _Form(self.form + _affine(o))
    def __sub__(self, o: object) -> _Form: return _Form(self.form - _affine(o))


def _affine(value: object) -> Affine:
    if isinstance(value, Index):
        return value.affine()
    if isinstance(value, _Form):
        return value.form
    if isinstance(value, int):
        return Affine.constant(value)
    if isinstance(value, str):
        return Affine.of(value)
    raise TypeError(f"index expressions are affine: got {type(value).__name__}")


class TensorRef:
    """A declared tensor; indexing it with indices builds an access."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, idx: object) -> E:
        items = idx if isinstance(idx, tuple) else (idx,)
        return E(Access(self.name, tuple(_affine(i) for i in items)))


def _shape(dims: tuple[object, ...]) -> tuple[Affine, ...]:
    out = []
    for d in dims:
        if isinstance(d, str):
            out.append(Affine.of(d) if d.isidentifier() else _parse_shape(d))
        else:
            out.append(_affine(d))
    return tuple(out)


def _parse_shape(text: str) -> Affine:
    return _Parser(tokenize(text), text).affine("a shape expression")


class OpBuilder:
    """Collects declarations and statements, then checks them like parsed text."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[TensorDecl] = []
        self.outputs: list[TensorDecl] = []
        self.stmts: list[Stmt] = []

    def input(self, name: str, dtype: str, *dims: object) -> TensorRef:
        self.inputs.append(TensorDecl(name, DType(dtype), _shape(dims)))
        return TensorRef(name)

    def output(self, name: str, dtype: str, *dims: object, aliases: str | None = None) -> TensorRef:
        """An output; `aliases` names the input it is written over (ODL's `aliases X`)."""
        self.outputs.append(TensorDecl(name, DType(dtype), _shape(dims), alias=aliases))
        return TensorRef(name)

    def indices(self, names: str) -> tuple[Index, ...]:
        return tuple(Index(n) for n in names.split())

    def assign(self, target: E | TensorRef, value: object) -> TensorRef:
        """`target[i, j] = value`; an unseen target name becomes an intermediate."""
        access = target.node if isinstance(target, E) else None
        if not isinstance(access, Access) or any(f.pure_symbol is None for f in access.indices):
            raise TypeError("assign to a tensor indexed by plain indices, e.g. Y[i, j]")
        self.stmts.append(Stmt(access.tensor, tuple(f.pure_symbol for f in access.indices),
                               _expr(value), len(self.stmts) + 2))
        return TensorRef(access.tensor)

    def tensor(self, name: str) -> TensorRef:
        """A reference to an intermediate by name, for use on the left of `assign`."""
        return TensorRef(name)

    def build(self) -> Op:
        return check_op(Op(self.name, tuple(self.inputs), tuple(self.outputs), tuple(self.stmts)))


def sum_(indices: list[Index], body: object) -> E:
    return E(Reduce("sum", tuple(i.name for i in indices), _expr(body)))


def max_(indices: list[Index], body: object) -> E:
    return E(Reduce("max", tuple(i.name for i in indices), _expr(body)))


def mean(indices: list[Index], body: object) -> E:
    return E(Reduce("mean", tuple(i.name for i in indices), _expr(body)))


def cumsum(index: Index, body: object) -> E:
    return E(Scan("cumsum", index.name, _expr(body)))


def call(fn: str, *args: object) -> E:
    """A named function: call('exp', x), call('where', cond, a, b)."""
    return E(Call(fn, tuple(_expr(a) for a in args)))


def cast(dtype: str, value: object) -> E:
    return E(Cast(DType(dtype), _expr(value)))
