"""Typed C rendering of ODL expressions for the non-GEMM C paths: one table per IR node kind.

Every value is one of three C kinds, as the reference evaluator computes it: `f` (the op's
compute type `real`: float, or double when any tensor is f64), `i` (int64_t: index values,
integer tensors and their sums) and `b` (0/1 truth values). Reductions are hoisted into
accumulator loops placed before the expression that uses them (`ExprContext.pre`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from uol_core.backends.c.text.names import index_id, size_id, stretch_id
from uol_core.backends.c.text.vmath import SCALAR_MATH
from uol_core.backends.c.text.writer import render_affine
from uol_core.backends.emit_limits import checkpoint
from uol_core.odl.ir import (
    COMPARISONS,
    LOGICAL,
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
    Unary,
    Var,
)
from uol_core.odl.ir import children as _children

# Storage type of each element type in C (f16 is gcc's _Float16; bf16 is kept as raw bits).
STORAGE: dict[DType, str] = {
    DType.f32: "float", DType.f64: "double", DType.f16: "_Float16", DType.bf16: "uint16_t",
    DType.i32: "int32_t", DType.i8: "int8_t", DType.bool: "uint8_t",
}

# Scalar helpers: the math of text.vmath.SCALAR_MATH, bf16 conversions, NaN-aware max/min.
PRELUDE = SCALAR_MATH + r"""
static inline float uol_bf16_load(uint16_t b)
{
    const union { uint32_t i; float f; } v = { .i = (uint32_t)b << 16 };
    return v.f;
}
static inline uint16_t uol_bf16_store(float f)
{
    union { float f; uint32_t i; } v = { .f = f };
    return (uint16_t)((v.i + 0x7fffu + ((v.i >> 16) & 1u)) >> 16);
}
/* NaN-propagating max/min (a NaN on either side wins), in the one form gcc 12 if-converts to
   vector compares and blends under -fno-trapping-math; `a > b || a != a` stays scalar branches */
static inline double uol_maxd(double a, double b) { return !(a <= b) && b == b ? a : b; }
static inline double uol_mind(double a, double b) { return !(a >= b) && b == b ? a : b; }
static inline float uol_maxf(float a, float b) { return !(a <= b) && b == b ? a : b; }
static inline float uol_minf(float a, float b) { return !(a >= b) && b == b ? a : b; }
static inline int64_t uol_maxi(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t uol_mini(int64_t a, int64_t b) { return a < b ? a : b; }
"""

# Unary functions per compute type ({0} is the argument, already of the compute type).
# gelu_tanh is torch's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
# written as x * sigmoid(2u): one exp, and no 1 + tanh that cancels for large negative x.
# x * uol_recipf(1 + e) rather than x / (1 + e): gcc folds a quotient into both arms of
# uol_expf's clamp (two vector divisions a vector), and even one division cost about half of
# a SiLU vector's cycles in a standalone loop on an AVX2 Zen 3; the reciprocal's Newton steps
# are FMAs. A bare sigmoid keeps its division: there the reciprocal measured 0.80x
# (benchmarks/activation_recip.py, docs/benchmarks.md).
FUNCS: dict[str, dict[str, str]] = {
    "float": {
        "exp": "uol_expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})",
        "rsqrt": "(1.0f / sqrtf({0}))", "tanh": "uol_tanhf({0})",
        "sigmoid": "(1.0f / (1.0f + uol_expf(-({0}))))", "relu": "(({0}) > 0.0f ? ({0}) : 0.0f)",
        "gelu": "(0.5f * ({0}) * (1.0f + uol_erff(({0}) * 0.70710678118654752f)))",
        "gelu_tanh": "(({0}) * uol_recipf(1.0f + uol_expf(-1.5957691216057308f * (({0}) + 0.044715f * ({0}) * ({0}) * ({0})))))",
        "silu": "(({0}) * uol_recipf(1.0f + uol_expf(-({0}))))", "abs": "fabsf({0})", "erf": "uol_erff({0})",
        "sin": "sinf({0})", "cos": "cosf({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
    },
    "double": {
        "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "rsqrt": "(1.0 / sqrt({0}))",
        "tanh": "tanh({0})", "sigmoid": "(1.0 / (1.0 + exp(-({0}))))",
        "relu": "(({0}) > 0.0 ? ({0}) : 0.0)",
        "gelu": "(0.5 * ({0}) * (1.0 + erf(({0}) * 0.70710678118654752)))",
        "gelu_tanh": "(({0}) / (1.0 + exp(-1.5957691216057308 * (({0}) + 0.044715 * ({0}) * ({0}) * ({0})))))",
        "silu": "(({0}) / (1.0 + exp(-({0}))))", "abs": "fabs({0})", "erf": "erf({0})",
        "sin": "sin({0})", "cos": "cos({0})", "floor": "floor({0})", "ceil": "ceil({0})",
    },
}
BINARY_C = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
            "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
# Reduction: (initial value per kind, update template, OpenMP reduction operator).
REDUCE_C: dict[str, tuple[dict[str, str], str, str]] = {
    "sum": ({"f": "0", "i": "0"}, "{a} += {v};", "+"),
    "mean": ({"f": "0", "i": "0"}, "{a} += {v};", "+"),
    "prod": ({"f": "1", "i": "1"}, "{a} *= {v};", "*"),
    "max": ({"f": "-INFINITY", "i": "INT64_MIN"}, "{a} = {v} > {a} ? {v} : {a};", "max"),
    "min": ({"f": "INFINITY", "i": "INT64_MAX"}, "{a} = {v} < {a} ? {v} : {a};", "min"),
}
# A rule that writes its argument more than once (relu's `x > 0 ? x : 0`, gelu_tanh's four
# x, pow(x, 3)) repeats the argument's text, so nested calls grew the kernel exponentially in
# the nesting depth (gelu_tanh eight deep was 17 MB of C). An argument longer than
# SHARE_CHARS is computed once, into a local of a GNU statement expression
# (`({ const float uol_s1 = ...; rule(uol_s1); })`): the text stays linear in the ODL. A short
# argument (a load, `acc + b`) stays inline, so kernels without deep nesting do not change.
SHARE_CHARS = 256

SCAN_C: dict[str, tuple[str, str]] = {
    "cumsum": ("0", "{a} += {v};"), "cumprod": ("1", "{a} *= {v};"),
    "cummax": ("-INFINITY", "{a} = {v} > {a} ? {v} : {a};"),
}


def compute_type(op: Op) -> str:
    """`double` when any tensor is f64 (as the reference evaluator), else `float`."""
    types = {d.dtype for d in op.inputs + op.outputs + op.locals}
    return "double" if DType.f64 in types else "float"


def kind_of_dtype(dtype: DType) -> str:
    """The value kind (f, i, b) of an element type."""
    return "f" if dtype.is_float else ("b" if dtype == DType.bool else "i")


@dataclass
class ExprContext:
    """What rendering needs: tensor dtypes, how to index a tensor, reduction extents, names."""

    real: str  # "float" or "double"
    dtypes: dict[str, DType]
    address: Callable[[Access], str]  # C lvalue of an access (in bounds)
    bounds: Callable[[Access], str]  # C condition that an access is inside its tensor
    reductions: dict[Reduce, dict[str, int]]
    dims: set[str]
    scans: dict[int, str] = field(default_factory=dict)  # id(Scan) -> running-state variable
    pre: list[str] = field(default_factory=list)  # hoisted accumulator code, in order
    counter: list[int] = field(default_factory=lambda: [0])
    simd: bool = True
    cache: dict[int, str] = field(default_factory=dict)  # id(Reduce) -> value, once hoisted
    # id(node) -> (node, its value kind), once found; holding the node keeps its id unique
    kinds: dict[int, tuple[Expr, str]] = field(default_factory=dict)
    shared: list[int] = field(default_factory=lambda: [0])  # locals made by `shared_use`
    # a vectorised reduction keeps up to `chains` partial sums (acg.config.reduction_chains)
    # over vectors of `lanes` floats (split_parts)
    chains: int = 1
    lanes: int = 1

    def fresh(self, stem: str) -> str:
        self.counter[0] += 1
        return f"{stem}{self.counter[0]}"

    def ctype(self, kind: str) -> str:
        return self.real if kind == "f" else "int64_t"


def kind(expr: Expr, ctx: ExprContext) -> str:
    """Value kind of an expression (the reference evaluator's promotion rules); remembered
    per node, so rendering a deep expression asks each subtree once, not once per level."""
    found = ctx.kinds.get(id(expr))
    if found is None:
        found = ctx.kinds[id(expr)] = (expr, _kind(expr, ctx))
    return found[1]


def _kind(expr: Expr, ctx: ExprContext) -> str:
    if isinstance(expr, Const):
        return "i" if expr.is_int else "f"
    if isinstance(expr, Var):
        return "i"
    if isinstance(expr, Access):
        return kind_of_dtype(ctx.dtypes[expr.tensor])
    if isinstance(expr, Cast):
        return kind_of_dtype(expr.dtype)
    if isinstance(expr, Unary):
        return "b" if expr.op == "not" else kind(expr.operand, ctx)
    if isinstance(expr, Binary):
        if expr.op in COMPARISONS + LOGICAL:
            return "b"
        sides = {kind(expr.lhs, ctx), kind(expr.rhs, ctx)}
        return "f" if "f" in sides or expr.op == "div" else "i"
    if isinstance(expr, Call):
        if expr.fn in FUNCS["float"]:
            return "f"
        sides = {kind(a, ctx) for a in expr.args[-2:]}
        return "f" if "f" in sides else "i"
    if isinstance(expr, Reduce):
        return "f" if expr.op == "mean" or kind(expr.body, ctx) == "f" else "i"
    if isinstance(expr, Scan):
        return "f" if kind(expr.body, ctx) == "f" else "i"
    raise TypeError(f"unknown IR node {type(expr).__name__}")


def render_affine_c(form: Affine, dims: set[str]) -> str:
    """An affine index form as a C integer expression (indices are locals, sizes #defines)."""
    return f"({render_affine(form, dims)})"


def render_as(ctx: ExprContext, expr: Expr, want: str) -> str:
    """`expr` rendered, converted to the compute type when `want` is "f" and it is not."""
    text = render(expr, ctx)
    if want == "f" and kind(expr, ctx) != "f":
        return f"(({ctx.real})({text}))"
    return text


def _const(e: Const, ctx: ExprContext) -> str:
    if e.is_int:
        return f"INT64_C({int(e.value)})"
    return f"(({ctx.real}){float(e.value)!r})".replace("inf)", "INFINITY)")


def _access(e: Access, ctx: ExprContext) -> str:
    dtype = ctx.dtypes[e.tensor]
    load = ctx.address(e)
    if dtype == DType.bf16:
        load = f"uol_bf16_load({load})"
    elif dtype == DType.f16:
        load = f"(({ctx.real}){load})"
    elif dtype.is_float and ctx.real == "double":
        load = f"((double){load})"
    if e.pad is None:
        return load
    pad = (f"(({ctx.real}){float(e.pad)!r})".replace("inf)", "INFINITY)")
           if kind_of_dtype(dtype) == "f" else str(int(e.pad)))
    inside = ctx.bounds(e)
    return load if inside == "1" else f"({inside} ? {load} : {pad})"


def _unary(e: Unary, ctx: ExprContext) -> str:
    return f"(!{render(e.operand, ctx)})" if e.op == "not" else f"(-{render(e.operand, ctx)})"


def _binary(e: Binary, ctx: ExprContext) -> str:
    k = kind(e, ctx)
    if e.op == "div" and isinstance(e.rhs, Reduce) and id(e.rhs) in ctx.cache:
        # Dividing by a reduction hoisted out of this loop: one reciprocal, then multiplies.
        return f"({render_as(ctx, e.lhs, 'f')} * (({ctx.real})1 / {render_as(ctx, e.rhs, 'f')}))"
    if e.op == "div":
        return f"({render_as(ctx, e.lhs, 'f')} / {render_as(ctx, e.rhs, 'f')})"
    want = "f" if k == "f" else "?"
    lhs = render_as(ctx, e.lhs, want)
    rhs = render_as(ctx, e.rhs, want)
    return f"({lhs} {BINARY_C[e.op]} {rhs})"


def shared_use(ctx: ExprContext, text: str, uses: int, rule: Callable[[str], str]) -> str:
    """`rule` applied to the value `text` (of the compute type) that it writes `uses` times:
    inline when that is short, else through one local (see SHARE_CHARS)."""
    if uses < 2 or len(text) <= SHARE_CHARS:
        return rule(text)
    ctx.shared[0] += 1
    name = f"uol_s{ctx.shared[0]}"
    return f"({{ const {ctx.real} {name} = {text}; {rule(name)}; }})"


def _pow(e: Call, ctx: ExprContext) -> str:
    base = e.args[1]
    if isinstance(base, Const) and float(base.value) in (1.0, 2.0, 3.0):
        times = int(base.value)
        return shared_use(ctx, render_as(ctx, e.args[0], "f"), times,
                          lambda b: "(" + " * ".join([b] * times) + ")")
    suffix = "f" if ctx.real == "float" else ""
    return f"pow{suffix}({render_as(ctx, e.args[0], 'f')}, {render_as(ctx, e.args[1], 'f')})"


def _call(e: Call, ctx: ExprContext) -> str:
    if e.fn == "where":
        k = kind(e, ctx)
        want = "f" if k == "f" else "?"
        return (f"({render(e.args[0], ctx)} ? {render_as(ctx, e.args[1], want)} : "
                f"{render_as(ctx, e.args[2], want)})")
    if e.fn == "pow":
        return _pow(e, ctx)
    if e.fn in ("max", "min"):
        k = kind(e, ctx)
        suffix = "i" if k != "f" else ("f" if ctx.real == "float" else "d")
        want = "f" if k == "f" else "?"
        return f"uol_{e.fn}{suffix}({render_as(ctx, e.args[0], want)}, {render_as(ctx, e.args[1], want)})"
    rule = FUNCS[ctx.real][e.fn]
    return shared_use(ctx, render_as(ctx, e.args[0], "f"), rule.count("{0}"), rule.format)


def _cast(e: Cast, ctx: ExprContext) -> str:
    inner = render(e.operand, ctx)
    if e.dtype == DType.bool:
        return f"(({inner}) != 0)"
    if e.dtype.is_float:
        # Round through the narrower type, then compute in `real` (the reference does the same).
        narrow = "float" if e.dtype in (DType.f32, DType.f16, DType.bf16) else "double"
        return f"(({ctx.real})({narrow})({inner}))"
    return f"((int64_t)({STORAGE[e.dtype]})({inner}))"


def _reduce(e: Reduce, ctx: ExprContext) -> str:
    """Hoist the reduction into an accumulator loop nest; returns the accumulator's value."""
    if id(e) in ctx.cache:
        return ctx.cache[id(e)]
    k = kind(e, ctx)
    body_kind = "f" if k == "f" else "i"
    acc = ctx.fresh("acc")
    inits, update, omp = REDUCE_C[e.op]
    ctx.pre.append(f"{ctx.ctype(body_kind)} {acc} = {inits[body_kind]};")
    extents = ctx.reductions[e]
    names = list(e.indices)
    for depth, name in enumerate(names):
        innermost = depth == len(names) - 1
        if innermost:
            mark = len(ctx.pre)
        ctx.pre.append(f"for (int64_t {index_id(name)} = 0; {index_id(name)} < {extents[name]}; "
                       f"++{index_id(name)}) {{")
    value = render_as(ctx, e.body, "f") if body_kind == "f" else render(e.body, ctx)
    inner_has_loops = any(line.startswith("for ") for line in ctx.pre[mark + 1:])
    parts = split_parts(extents[names[-1]], ctx.chains, ctx.lanes)
    if ctx.simd and not inner_has_loops and parts >= 2:
        _split_reduce(ctx, acc, inits[body_kind], update, omp, mark, names[-1],
                      extents[names[-1]], parts, value, body_kind)
        ctx.pre.extend("}" for _ in names[:-1])
    else:
        if ctx.simd and not inner_has_loops:
            # A reduction clause lets the compiler reassociate (vectorise) this sum without
            # -ffast-math.
            ctx.pre.insert(mark, f"#pragma omp simd reduction({omp}:{acc})")
        ctx.pre.append(update.format(a=acc, v=value))
        ctx.pre.extend("}" for _ in names)
    count = 1
    for name in names:
        count *= extents[name]
    ctx.cache[id(e)] = reduced_value(e, acc, count, ctx.real)
    return ctx.cache[id(e)]


def split_parts(extent: int, chains: int, lanes: int) -> int:
    """Partial sums of a vectorised reduction over `extent` elements: up to `chains`, each over
    at least as many vectors as there are sums, so the horizontal sums and the combining
    (which grow with the parts) stay below the loop they shorten; 1 leaves one sum."""
    return max(1, min(chains, extent // lanes // max(1, chains)))


def _split_reduce(ctx: ExprContext, acc: str, init: str, update: str, omp: str, mark: int,
                  name: str, extent: int, parts: int, value: str, body_kind: str) -> None:
    """Replace the innermost accumulator loop (from ctx.pre[mark]) by `parts` partial sums,
    each over its own contiguous stretch of the index, in one vectorised loop.

    Why: a vectorised sum into one accumulator waits an add's latency per vector (a 768-float
    row: 96 dependent adds); `parts` independent accumulators keep the adders busy. On a
    2-core AVX2 Zen 3 the rows of a layer norm over 768 floats took 29 us with one and 20 us
    with eight (197 rows). The stretches are whole vectors, so each part's loads stay aligned
    to one another; what is left over (fewer than parts x lanes elements) runs after them."""
    index = index_id(name)
    step = stretch_id(name)  # the stretch's offset: its own name kind, so no index can shadow it
    body = ctx.pre[mark + 1:]
    del ctx.pre[mark:]
    span = extent // (parts * ctx.lanes) * ctx.lanes
    others = [f"{acc}_{k}" for k in range(1, parts)]
    ctx.pre.append(f"{ctx.ctype(body_kind)} {', '.join(f'{o} = {init}' for o in others)};")
    ctx.pre.append(f"#pragma omp simd reduction({omp}:{', '.join([acc, *others])})")
    ctx.pre.append(f"for (int64_t {step} = 0; {step} < {span}; ++{step}) {{")
    for k, part in enumerate([acc, *others]):
        ctx.pre += ["{", f"const int64_t {index} = {step}{f' + {k * span}' if k else ''};", *body,
                    update.format(a=part, v=value), "}"]
    ctx.pre.append("}")
    if parts * span < extent:
        ctx.pre += [f"#pragma omp simd reduction({omp}:{acc})",
                    f"for (int64_t {index} = {parts * span}; {index} < {extent}; ++{index}) {{",
                    *body, update.format(a=acc, v=value), "}"]
    ctx.pre += [update.format(a=acc, v=o) for o in others]


def reduced_value(e: Reduce, acc: str, count: int, real: str) -> str:
    """The C value of reduction `e` from its accumulator over `count` elements (a mean divides)."""
    return f"({acc} / ({real}){count})" if e.op == "mean" else acc


def _scan(e: Scan, ctx: ExprContext) -> str:
    state = ctx.scans[id(e)]
    value = render_as(ctx, e.body, "f") if kind(e, ctx) == "f" else render(e.body, ctx)
    ctx.pre.append(SCAN_C[e.op][1].format(a=state, v=value))
    return state


RENDER: dict[type, Callable[[Expr, ExprContext], str]] = {
    Const: _const,
    Var: lambda e, ctx: size_id(e.name) if e.name in ctx.dims else index_id(e.name),
    Access: _access,
    Unary: _unary,
    Binary: _binary,
    Call: _call,
    Cast: _cast,
    Reduce: _reduce,
    Scan: _scan,
}


def render(expr: Expr, ctx: ExprContext) -> str:
    """C text of `expr`; reductions and scans append their loops and updates to `ctx.pre`."""
    checkpoint()  # a guarded compile (emit_limits.compile_guard) may stop here
    return RENDER[type(expr)](expr, ctx)


def render_epilogue(expr: Expr, address: Callable[[Access], str], dtypes: dict[str, DType],
                    dims: set[str], reduced: str = "acc") -> str:
    """C text of a template's epilogue in f32: every reduction in `expr` is the value the
    template has already computed (`reduced`), every access is in bounds (`address`)."""
    cached = {id(r): reduced for r in _walk_reduces(expr)}
    ctx = ExprContext("float", dtypes, address, lambda a: "1", {}, dims, cache=cached)
    return render(expr, ctx)


def _walk_reduces(expr: Expr) -> list[Reduce]:
    if isinstance(expr, Reduce):
        return [expr]
    return [r for child in _children(expr) for r in _walk_reduces(child)]


def store(dtype: DType, value: str, value_kind: str) -> str:
    """C text converting a value to the storage type of `dtype`."""
    if dtype == DType.bool:
        return f"(uint8_t)(({value}) != 0)"
    if dtype == DType.bf16:
        return f"uol_bf16_store((float)({value}))"
    return f"({STORAGE[dtype]})({value})"


def free_names(expr: Expr, bound: frozenset[str] = frozenset()) -> set[str]:
    """Index and size names an expression uses that no reduction inside it binds."""
    if isinstance(expr, Var):
        return set() if expr.name in bound else {expr.name}
    if isinstance(expr, Access):
        return {n for f in expr.indices for n in f.symbols} - bound
    inner = bound | set(expr.indices) if isinstance(expr, Reduce) else bound
    found: set[str] = set()
    for child in _children(expr):
        found |= free_names(child, inner)
    return found


def outer_reduces(expr: Expr) -> list[Reduce]:
    """Reductions not nested in another reduction, in evaluation order."""
    if isinstance(expr, Reduce):
        return [expr]
    return [r for child in _children(expr) for r in outer_reduces(child)]

