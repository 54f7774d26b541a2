"""The operator IR: frozen dataclasses that every stage (check, classify, evaluate, emit) reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Union


class DType(enum.Enum):
    """Element types ODL knows, with their size in bytes."""

    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    f64 = "f64"
    i32 = "i32"
    i8 = "i8"
    bool = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.f16, DType.bf16, DType.f32, DType.f64)


_ITEMSIZE = {
    DType.f16: 2, DType.bf16: 2, DType.f32: 4, DType.f64: 8,
    DType.i32: 4, DType.i8: 1, DType.bool: 1,
}

# Promotion order: the result of mixing two types is the one further right.
_RANK = [DType.bool, DType.i8, DType.i32, DType.f16, DType.bf16, DType.f32, DType.f64]


def promote(a: DType, b: DType) -> DType:
    """The type of a binary operation on values of types a and b."""
    if {a, b} == {DType.f16, DType.bf16}:
        return DType.f32
    return a if _RANK.index(a) >= _RANK.index(b) else b


@dataclass(frozen=True)
class Affine:
    """An integer affine form: sum(coeff * symbol) + const, terms sorted by symbol."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(name: str) -> Affine:
        return Affine(((name, 1),), 0)

    @staticmethod
    def constant(value: int) -> Affine:
        return Affine((), value)

    def __add__(self, other: Affine) -> Affine:
        merged: dict[str, int] = dict(self.terms)
        for name, coeff in other.terms:
            merged[name] = merged.get(name, 0) + coeff
        return Affine(tuple(sorted((n, c) for n, c in merged.items() if c != 0)),
                      self.const + other.const)

    def scale(self, factor: int) -> Affine:
        if factor == 0:
            return Affine()
        return Affine(tuple((n, c * factor) for n, c in self.terms), self.const * factor)

    def __sub__(self, other: Affine) -> Affine:
        return self + other.scale(-1)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    @property
    def pure_symbol(self) -> str | None:
        """The symbol when the form is exactly one symbol with coefficient 1, else None."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and self.const == 0:
            return self.terms[0][0]
        return None

    def evaluate(self, values: dict[str, int]) -> int:
        return sum(c * values[n] for n, c in self.terms) + self.const

    def __str__(self) -> str:
        parts: list[str] = []
        for name, coeff in self.terms:
            sign = "-" if coeff < 0 else "+"
            mag = abs(coeff)
            text = name if mag == 1 else f"{mag}*{name}"
            parts.append(f"{sign} {text}" if parts else ("-" + text if sign == "-" else text))
        if self.const or not parts:
            if parts:
                parts.append(f"{'-' if self.const < 0 else '+'} {abs(self.const)}")
            else:
                parts.append(str(self.const))
        return " ".join(parts)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Const:
    """A numeric literal; `loc` (line, column) is where the text wrote it, (0, 0) when built.
    Integer literals from text hold an exact int (int64 range)."""

    value: float | int
    is_int: bool = False
    loc: tuple[int, int] = field(default=(0, 0), compare=False)


@dataclass(frozen=True)
class Var:
    """The value of an index variable or a dimension symbol, used in arithmetic."""

    name: str
    loc: tuple[int, int] = field(default=(0, 0), compare=False)


@dataclass(frozen=True)
class Access:
    """A tensor element read; `pad` is the value read outside the tensor (None: must be in bounds)."""

    tensor: str
    indices: tuple[Affine, ...]
    pad: float | None = None
    loc: tuple[int, int] = field(default=(0, 0), compare=False)
    # where the text wrote each index expression (error positions); () when built
    index_locs: tuple[tuple[int, int], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Unary:
    """A prefix operation: `neg` or `not`."""

    op: str
    operand: Expr


@dataclass(frozen=True)
class Binary:
    """An infix operation: arithmetic (add sub mul div), comparison (lt le gt ge eq ne), and/or."""

    op: str
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True)
class Call:
    """A named function: exp, log, ..., where, pow, max/min (two-argument forms)."""

    fn: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast:
    """A conversion to another element type, written `f32(x)`."""

    dtype: DType
    operand: Expr


@dataclass(frozen=True)
class Reduce:
    """A reduction (sum max min mean prod) of `body` over the named indices."""

    op: str
    indices: tuple[str, ...]
    body: Expr
    loc: tuple[int, int] = field(default=(0, 0), compare=False)
    extents: tuple[tuple[str, Affine], ...] = ()  # written extents, `sum[r: 3](...)`


@dataclass(frozen=True)
class Scan:
    """An inclusive prefix reduction (cumsum) of `body` along one free index."""

    op: str
    index: str
    body: Expr
    loc: tuple[int, int] = field(default=(0, 0), compare=False)


Expr = Union[Const, Var, Access, Unary, Binary, Call, Cast, Reduce, Scan]

UNARY_FUNCTIONS = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "abs",
    "erf", "sin", "cos", "floor", "ceil",
)
# torch's GELU `approximate` argument -> the ODL function of that form
GELU_FORMS = {"none": "gelu", "tanh": "gelu_tanh"}
BINARY_FUNCTIONS = ("pow", "max", "min")
REDUCTIONS = ("sum", "max", "min", "mean", "prod")
SCANS = ("cumsum", "cumprod", "cummax")
ARITHMETIC = ("add", "sub", "mul", "div")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("and", "or")


# ---------------------------------------------------------------- declarations


@dataclass(frozen=True)
class TensorDecl:
    """A declared tensor: name, element type and a shape of affine forms over dimension symbols.
    An output may name the input it is written over (`alias`, ODL's `aliases X`): the kernel
    updates that input's storage in place when the caller donates it."""

    name: str
    dtype: DType
    shape: tuple[Affine, ...]
    line: int = field(default=0, compare=False)
    alias: str | None = None
    # where the text wrote each axis's extent (error positions); () when built or inferred
    shape_locs: tuple[tuple[int, int], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Stmt:
    """One assignment `target[indices] = expr` at a source line."""

    target: str
    indices: tuple[str, ...]
    expr: Expr
    line: int = field(default=0, compare=False)
    extents: tuple[tuple[str, Affine], ...] = ()  # written extents, `t[i: N] = ...`


@dataclass(frozen=True)
class Op:
    """An operator: inputs, outputs, statements; `locals` are the inferred intermediates."""

    name: str
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[TensorDecl, ...]
    stmts: tuple[Stmt, ...]
    locals: tuple[TensorDecl, ...] = ()
    line: int = field(default=0, compare=False)
    source: str = field(default="", compare=False, repr=False)

    def __hash__(self) -> int:
        # Ops key many caches; hashing the whole tree every time costs more than the lookup.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.inputs, self.outputs, self.stmts, self.locals))
            self.__dict__["_hash"] = cached
        return cached

    @property
    def dims(self) -> tuple[str, ...]:
        """Dimension symbols, in order of first appearance in the signature."""
        seen: list[str] = []
        for decl in self.inputs + self.outputs:
            for extent in decl.shape:
                for name in extent.symbols:
                    if name not in seen:
                        seen.append(name)
        return tuple(seen)

    def tensor(self, name: str) -> TensorDecl:
        """The declaration of the named tensor (input, output or intermediate)."""
        for decl in self.inputs + self.outputs + self.locals:
            if decl.name == name:
                return decl
        raise KeyError(name)

    @property
    def tensors(self) -> dict[str, TensorDecl]:
        return {d.name: d for d in self.inputs + self.outputs + self.locals}

    @property
    def aliases(self) -> dict[str, str]:
        """Output name -> the input it is written over (`aliases` in ODL)."""
        return {d.name: d.alias for d in self.outputs if d.alias}


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(expr, (Unary, Cast)):
        return (expr.operand,)
    if isinstance(expr, Binary):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, (Reduce, Scan)):
        return (expr.body,)
    return ()


def walk(expr: Expr):
    """Every node of an expression, parents before children."""
    yield expr
    for child in children(expr):
        yield from walk(child)


def retyped(op: Op, dtype: DType) -> Op:
    """The same op with every floating tensor declared as `dtype` (e.g. f64 for gradcheck)."""

    def fix(decls: tuple[TensorDecl, ...]) -> tuple[TensorDecl, ...]:
        return tuple(replace(d, dtype=dtype) if d.dtype.is_float else d for d in decls)

    return replace(op, inputs=fix(op.inputs), outputs=fix(op.outputs), locals=fix(op.locals))
