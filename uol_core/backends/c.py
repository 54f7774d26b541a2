"""C backend: renders the operator IR to C. One table per IR node kind, one emitter per pattern.

Adding a pattern (issue 5: map, reduce, stencil, scan) adds a row to `PATTERN_EMITTERS`;
adding an IR function adds a row to `CALLS`. Identifiers in the C text come from the IR
only, through one mangler (c_names: tensor `X` -> `t_X`, index `m` -> `i_m`, size `M` -> `D_M`),
never from raw user text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from uol_core.backends.base import KernelSource
from uol_core.backends.c_names import index_id, size_id
from uol_core.backends.c_vmath import SCALAR_MATH
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    Reduce,
    Unary,
    Var,
)

GENERATOR_VERSION = "acg-c-3"

# IR function name -> C template ({0}, {1}, ... are the rendered arguments).
CALLS: dict[str, str] = {
    "exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})", "rsqrt": "(1.0f / sqrtf({0}))",
    "tanh": "tanhf({0})", "sigmoid": "uol_sigmoid({0})", "relu": "uol_relu({0})",
    "gelu": "uol_gelu({0})", "silu": "uol_silu({0})", "abs": "fabsf({0})", "erf": "uol_erff({0})",
    "sin": "sinf({0})", "cos": "cosf({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
    "pow": "powf({0}, {1})", "max": "fmaxf({0}, {1})", "min": "fminf({0}, {1})",
    "where": "(({0}) ? ({1}) : ({2}))",
}
BINARY: dict[str, str] = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
    "eq": "==", "ne": "!=", "and": "&&", "or": "||",
}
UNARY: dict[str, str] = {"neg": "-", "not": "!"}
C_TYPES: dict[DType, str] = {
    DType.f32: "float", DType.f64: "double", DType.i32: "int32_t", DType.i8: "int8_t",
    DType.bool: "uint8_t",
}

# Scalar helpers the CALLS table refers to (exp, erf: c_vmath.SCALAR_MATH), vectorisable in the
# epilogue loop; gelu is the erf form (torch's).
PRELUDE = SCALAR_MATH + """\
static inline float uol_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float uol_sigmoid(float x) { return 1.0f / (1.0f + uol_expf(-x)); }
static inline float uol_silu(float x) { return x / (1.0f + uol_expf(-x)); }
static inline float uol_gelu(float x) { return 0.5f * x * (1.0f + uol_erff(x * 0.70710678118654752f)); }"""


def render_affine(form: Affine, dims: set[str]) -> str:
    """An affine index form in C: indices are loop locals, dimension symbols are constants."""
    parts = []
    for name, coeff in form.terms:
        ident = size_id(name) if name in dims else index_id(name)
        parts.append(ident if coeff == 1 else f"{coeff} * {ident}")
    if form.const or not parts:
        parts.append(str(form.const))
    return " + ".join(parts).replace("+ -", "- ")


def render_const(value: float, is_int: bool = False) -> str:
    """A float literal C reads exactly (9 significant digits round-trip f32); infinities (ODL's
    1e999, a -inf pad) are math.h's INFINITY."""
    if is_int:
        return f"{int(value)}.0f"
    if value != value or value in (float("inf"), float("-inf")):
        return "NAN" if value != value else ("INFINITY" if value > 0 else "(-INFINITY)")
    text = f"{value:.9g}"
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text + "f"


@dataclass
class ExprRenderer:
    """Renders an expression; `access` turns a tensor read into C, `reduce_value` names a reduction."""

    access: Callable[[Access], str]
    reduce_value: Callable[[Reduce], str] = field(default=lambda r: "acc")
    dims: set[str] = field(default_factory=set)

    def __call__(self, expr: Expr) -> str:
        return RENDER[type(expr)](self, expr)


RENDER: dict[type, Callable[[ExprRenderer, Expr], str]] = {
    Const: lambda r, e: render_const(e.value, e.is_int),
    Var: lambda r, e: f"(float){size_id(e.name) if e.name in r.dims else index_id(e.name)}",
    Access: lambda r, e: r.access(e),
    Unary: lambda r, e: f"({UNARY[e.op]}{r(e.operand)})",
    Binary: lambda r, e: f"({r(e.lhs)} {BINARY[e.op]} {r(e.rhs)})",
    Call: lambda r, e: CALLS[e.fn].format(*(r(a) for a in e.args)),
    Cast: lambda r, e: f"(({C_TYPES[e.dtype]})({r(e.operand)}))",
    Reduce: lambda r, e: r.reduce_value(e),
}


@dataclass
class CodeWriter:
    """Lines of C with, for each, the ODL line it implements (the kernel's line map)."""

    lines: list[str] = field(default_factory=list)
    odl: list[int] = field(default_factory=list)
    default_line: int = 0

    def emit(self, text: str, odl_line: int | None = None) -> None:
        """Append one or more lines, all mapped to `odl_line` (default: the op's line)."""
        for line in text.split("\n"):
            self.lines.append(line)
            self.odl.append(self.default_line if odl_line is None else odl_line)

    def source(self, entry: str, op_name: str, config: dict, meta: dict) -> KernelSource:
        line_map = {i + 1: line for i, line in enumerate(self.odl)}
        return KernelSource("\n".join(self.lines) + "\n", "c", entry, op_name, config,
                            line_map, meta)


def _emit_contraction(plan, config, target) -> KernelSource:
    from uol_core.backends.c_gemm import emit_gemm
    return emit_gemm(plan, config, target)


def _emit_pattern(op, sizes, config, target) -> KernelSource:
    from uol_core.backends.c_route import emit_any
    return emit_any(op, sizes, target, config)


# Pattern kind -> emitter. The contraction row takes (GemmPlan, TileConfig, target); the others
# take (op, sizes, config dict, target) and pick a template (flash, scan) or the generic path.
PATTERN_EMITTERS: dict[str, Callable] = {"contraction": _emit_contraction, "map": _emit_pattern,
                                         "reduce": _emit_pattern, "stencil": _emit_pattern,
                                         "scan": _emit_pattern}


def emit(op, config, target, sizes) -> KernelSource:
    """The C kernel of `op` for bound `sizes`: a TileConfig builds the GEMM, a dict the rest."""
    from uol_core.acg.lower import UnsupportedOp, lower_contraction
    from uol_core.odl.patterns import classify

    kind = classify(op).kind
    if kind == "contraction" and not isinstance(config, dict):
        try:
            plan = lower_contraction(op, sizes)
        except UnsupportedOp:  # conv, attention, several GEMMs: flash or generic kernels
            plan = None
        if plan is not None:
            return PATTERN_EMITTERS[kind](plan, config, target)
    return _emit_pattern(op, sizes, config if isinstance(config, dict) else None, target)
