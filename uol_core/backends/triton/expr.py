"""Triton expression emission: ODL expressions -> tl code over a block context (rule tables)."""

from __future__ import annotations

import keyword
from collections.abc import Callable
from dataclasses import dataclass, field

from uol_core.backends.emit_limits import checkpoint
from uol_core.odl.check import stmt_extents
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
    Unary,
    Var,
)

TL_DTYPES = {
    DType.f16: "tl.float16", DType.bf16: "tl.bfloat16", DType.f32: "tl.float32",
    DType.f64: "tl.float64", DType.i32: "tl.int32", DType.i8: "tl.int8", DType.bool: "tl.int1",
}
TORCH_DTYPES = {
    DType.f16: "torch.float16", DType.bf16: "torch.bfloat16", DType.f32: "torch.float32",
    DType.f64: "torch.float64", DType.i32: "torch.int32", DType.i8: "torch.int8",
    DType.bool: "torch.bool",
}
# Names the generated module uses itself; IR names equal to one of these get a trailing '_'.
RESERVED = set(keyword.kwlist) | {"tl", "triton", "torch", "launch", "math", "float", "min",
                                  "max", "range", "int", "len", "print"}

# Rule tables (autodidax style): one row per IR operation. `{0}`/`{1}` are operand codes.
UNARY_RULES = {
    "exp": "tl.exp({0})", "log": "tl.log({0})", "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "sigmoid": "tl.sigmoid({0})", "abs": "tl.abs({0})",
    "erf": "tl.erf({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})", "relu": "tl.maximum({0}, 0.0)",
    # tl has no tanh that runs everywhere (interpreter included): tanh(x) = 2 sigmoid(2x) - 1.
    "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)",
    "silu": "({0} * tl.sigmoid({0}))",
    # torch's default gelu is the exact (erf) form.
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
    # torch's tanh form, 0.5 x (1 + tanh(u)), is x * sigmoid(2u).
    "gelu_tanh": "({0} * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0})))",
}
BINARY_RULES = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "and": "({0} & {1})", "or": "({0} | {1})",
    "max": "tl.maximum({0}, {1})", "min": "tl.minimum({0}, {1})",
    # General pow through exp/log (positive bases); small integer powers are multiplied out.
    "pow": "tl.exp({1} * tl.log({0}))",
}
REDUCE_INIT = {"sum": "0.0", "mean": "0.0", "prod": "1.0", "max": 'float("-inf")',
               "min": 'float("inf")'}
REDUCE_TILE = {"sum": "tl.sum", "mean": "tl.sum", "max": "tl.max", "min": "tl.min"}
COMBINE = {"sum": "{0} + {1}", "mean": "{0} + {1}", "prod": "{0} * {1}",
           "max": "tl.maximum({0}, {1})", "min": "tl.minimum({0}, {1})",
           "cumsum": "{0} + {1}", "cumprod": "{0} * {1}", "cummax": "tl.maximum({0}, {1})"}
SCAN_INIT = {"cumsum": "0.0", "cumprod": "1.0", "cummax": 'float("-inf")'}


def safe(name: str) -> str:
    """An IR name usable as a Python identifier in the generated module."""
    return name + "_" if name in RESERVED else name


def extent_code(form: Affine) -> str:
    """Python code of an affine extent over dimension symbols, parenthesised when compound."""
    text = str(Affine(tuple((safe(n), c) for n, c in form.terms), form.const))
    return text if form.pure_symbol or form.is_constant else f"({text})"


def product_code(forms: list[Affine]) -> str:
    """Code of a product of extents ('1' for none)."""
    codes = [extent_code(f) for f in forms if not (f.is_constant and f.const == 1)]
    return " * ".join(codes) or "1"


def strides(op: Op, tensor: str) -> list[str]:
    """Row-major element strides of a tensor as code."""
    shape = list(op.tensor(tensor).shape)
    return [product_code(shape[a + 1:]) for a in range(len(shape))]


class Writer:
    """Lines of one kernel with the ODL line each implements, and unique variable names."""

    def __init__(self, used: set[str] | None = None) -> None:
        self.lines: list[tuple[str, int | None]] = []
        self.depth = 0
        self.used: set[str] = set(RESERVED) | set(used or ())
        self.odl_line: int | None = None
        # base -> the last suffix tried: names are never freed, so the search for the next
        # free one resumes there (from 1 each time, 17 000 shared values took 16 s)
        self.suffix: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        """A new variable name derived from `base` (an IR name or a role word): `base`, else
        the first free of base_2, base_3, ..."""
        stem = safe(base)
        n = self.suffix.get(stem, 1)
        name = stem if n == 1 else f"{stem}_{n}"
        while name in self.used:
            n += 1
            name = f"{stem}_{n}"
        self.suffix[stem] = n
        self.used.add(name)
        return name

    def emit(self, text: str, odl: int | None = -1) -> None:
        self.lines.append(("    " * self.depth + text, self.odl_line if odl == -1 else odl))

    def text(self) -> tuple[list[str], list[int | None]]:
        return [t for t, _ in self.lines], [o for _, o in self.lines]


@dataclass
class Ctx:
    """A block context: index name -> (code, tile axis or None for a scalar), lane masks, shape."""

    blocks: list[str]
    idx: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    masks: list[tuple[str, int | None]] = field(default_factory=list)
    regs: dict[str, str] = field(default_factory=dict)  # tensors held in registers
    cache: dict[str, str] = field(default_factory=dict)  # load call -> variable

    @property
    def rank(self) -> int:
        return len(self.blocks)

    def at(self, code: str, axis: int | None) -> str:
        """`code` (a 1-D tile on `axis`) expanded to this context's rank."""
        if axis is None or self.rank == 1:
            return code
        return f"{code}[:, None]" if axis == 0 else f"{code}[None, :]"

    def index(self, name: str) -> str:
        code, axis = self.idx[name]
        return self.at(code, axis)

    def mask(self) -> str | None:
        parts = [self.at(code, axis) for code, axis in self.masks]
        return " & ".join(parts) if parts else None

    def shape(self) -> str:
        return "[" + ", ".join(self.blocks) + "]"

    def child(self, **changes) -> Ctx:
        """A nested context (a loop body): same registers, its own load cache."""
        base = {"blocks": self.blocks, "idx": dict(self.idx), "masks": list(self.masks),
                "regs": self.regs, "cache": {}}
        base.update(changes)
        return Ctx(**base)


class ExprEmitter:
    """Emits the code of ODL expressions into a Writer; reductions through `reduce_rule`."""

    def __init__(self, op: Op, writer: Writer, acc_dtype: str,
                 reduce_rule: Callable[[ExprEmitter, Reduce, Ctx], str] | None = None) -> None:
        self.op = op
        self.w = writer
        self.acc_dtype = acc_dtype
        self.reduce_rule = reduce_rule or scalar_loop_reduce
        self.overrides: dict[int, str] = {}  # id(node) -> code (a contraction's accumulator)
        self.stmt_index = 0  # the statement being emitted (its extents name the loop bounds)

    def current_reduce_extents(self, node: Reduce) -> list[Affine]:
        return reduce_extents(self.op, self.stmt_index, node)

    def current_scan_extent(self, node: Scan) -> Affine:
        return stmt_extents(self.op, self.stmt_index).free[node.index]

    def expr(self, e: Expr, ctx: Ctx) -> str:
        checkpoint()  # a guarded compile (emit_limits.compile_guard) may stop here
        if id(e) in self.overrides:
            return self.overrides[id(e)]
        if isinstance(e, Const):
            return const_code(e)
        if isinstance(e, Var):
            return ctx.index(e.name) if e.name in ctx.idx else safe(e.name)
        if isinstance(e, Access):
            return self.load(e, ctx)
        if isinstance(e, Unary):
            inner = self.expr(e.operand, ctx)
            return f"(-{inner})" if e.op == "neg" else f"({inner} == 0)"
        if isinstance(e, Binary):
            return self.binary(e.op, e.lhs, e.rhs, ctx)
        if isinstance(e, Call):
            if e.fn == "where":
                c, a, b = (self.expr(x, ctx) for x in e.args)
                return f"tl.where({c}, {a}, {b})"
            if e.fn in UNARY_RULES:
                return UNARY_RULES[e.fn].format(self.bind(self.expr(e.args[0], ctx)))
            return self.binary(e.fn, e.args[0], e.args[1], ctx)
        if isinstance(e, Cast):
            return f"({self.expr(e.operand, ctx)}).to({TL_DTYPES[e.dtype]})"
        if isinstance(e, Reduce):
            return self.reduce_rule(self, e, ctx)
        if isinstance(e, Scan):
            return scan_loop(self, e, ctx)
        raise TypeError(f"no Triton rule for IR node {type(e).__name__}")

    def binary(self, name: str, lhs: Expr, rhs: Expr, ctx: Ctx) -> str:
        if name == "pow" and isinstance(rhs, Const) and float(rhs.value).is_integer() \
                and 1 <= rhs.value <= 4:
            base = self.bind(self.expr(lhs, ctx))
            return "(" + " * ".join([base] * int(rhs.value)) + ")"
        return BINARY_RULES[name].format(self.expr(lhs, ctx), self.expr(rhs, ctx))

    def bind(self, code: str, base: str = "t") -> str:
        """A plain name for `code` (used more than once by a rule)."""
        if code.isidentifier() or _is_number(code):
            return code
        name = self.w.fresh(base)
        self.w.emit(f"{name} = {code}")
        return name

    def offset(self, tensor: str, indices: tuple[Affine, ...], ctx: Ctx) -> tuple[str, bool]:
        """Element offset code of an access, and whether it varies across the tile."""
        terms, vector = [], False
        for form, stride in zip(indices, strides(self.op, tensor)):
            parts = []
            for name, coeff in form.terms:
                if name in ctx.idx:
                    vector |= ctx.idx[name][1] is not None
                    code = ctx.index(name)
                else:
                    code = safe(name)
                parts.append(code if coeff == 1 else f"{coeff} * {code}")
            if form.const or not parts:
                parts.append(str(form.const))
            index = " + ".join(parts).replace("+ -", "- ")
            if index == "0":
                continue
            if stride == "1":
                terms.append(index if len(parts) == 1 else f"({index})")
            else:
                terms.append(f"({index}) * {stride}" if len(parts) > 1 else f"{index} * {stride}")
        return (" + ".join(terms) or "0"), vector

    def load(self, a: Access, ctx: Ctx) -> str:
        if a.tensor in ctx.regs:
            return ctx.regs[a.tensor]
        off, vector = self.offset(a.tensor, a.indices, ctx)
        ptr = f"{safe(a.tensor)}_ptr + {off}" if off != "0" else f"{safe(a.tensor)}_ptr"
        mask = ctx.mask() if vector else None
        other = ""
        if a.pad is not None:
            bounds = []
            for form, ext in zip(a.indices, self.op.tensor(a.tensor).shape):
                code, _ = self.offset_axis(form, ctx)
                bounds.append(f"({code} >= 0) & ({code} < {extent_code(ext)})")
            mask = " & ".join(([mask] if mask else []) + bounds)
            other = f", other={const_code(Const(a.pad))}"
        call = f"tl.load({ptr}, mask={mask}{other})" if mask else f"tl.load({ptr})"
        if self.op.tensor(a.tensor).dtype in (DType.f16, DType.bf16):
            call += ".to(tl.float32)"  # half types are computed in f32, rounded at the store
        if call in ctx.cache:  # the same lanes were loaded earlier in this scope
            return ctx.cache[call]
        name = self.w.fresh(a.tensor.lower() if a.tensor.lower() != a.tensor else a.tensor + "v")
        self.w.emit(f"{name} = {call}")
        ctx.cache[call] = name
        return name

    def offset_axis(self, form: Affine, ctx: Ctx) -> tuple[str, bool]:
        parts = [(ctx.index(n) if n in ctx.idx else safe(n)) if c == 1 else
                 f"{c} * {ctx.index(n) if n in ctx.idx else safe(n)}" for n, c in form.terms]
        if form.const or not parts:
            parts.append(str(form.const))
        return "(" + " + ".join(parts).replace("+ -", "- ") + ")", True

    def decompose(self, flat: str, names: tuple[str, ...], extents: list[Affine]) -> list[str]:
        """Split a flat row-major index into one variable per index name (// and %)."""
        out = []
        for pos, name in enumerate(names):
            var = self.w.fresh(name)
            inner = product_code(extents[pos + 1:])
            div = inner if inner.isidentifier() or inner.isdigit() else f"({inner})"
            code = flat if inner == "1" else f"({flat} // {div})"
            if pos > 0:
                code = f"{code} % {extent_code(extents[pos])}"
            self.w.emit(f"{var} = {code}")
            out.append(var)
        return out


def const_code(c: Const) -> str:
    """Python literal of a constant."""
    if c.is_int:
        return str(int(c.value))
    value = float(c.value)
    if value != value or value in (float("inf"), float("-inf")):
        return f'float("{value}")'
    return repr(value)


def _is_number(code: str) -> bool:
    try:
        float(code)
    except ValueError:
        return False
    return True


def reduce_extents(op: Op, stmt_index: int, node: Reduce) -> list[Affine]:
    """Extents of a reduction's indices, in its index order."""

    found = stmt_extents(op, stmt_index).reductions[node]
    return [found[n] for n in node.indices]


def scalar_loop_reduce(em: ExprEmitter, node: Reduce, ctx: Ctx) -> str:
    """A reduction as a scalar loop over its flattened index space (nested or prod reductions)."""
    extents = em.current_reduce_extents(node)
    acc = em.w.fresh(f"{node.op}_acc")
    em.w.emit(f"{acc} = tl.full({ctx.shape()}, {REDUCE_INIT[node.op]}, {em.acc_dtype})")
    it = em.w.fresh("it")
    em.w.emit(f"for {it} in range(0, {product_code(extents)}):")
    em.w.depth += 1
    inner = ctx.child()
    for name, var in zip(node.indices, em.decompose(it, node.indices, extents)):
        inner.idx[name] = (var, None)
    body = em.expr(node.body, inner)
    em.w.emit(f"{acc} = " + COMBINE[node.op].format(acc, body))
    em.w.depth -= 1
    if node.op == "mean":
        return f"({acc} / ({product_code(extents)}))"
    return acc


def scan_loop(em: ExprEmitter, node: Scan, ctx: Ctx) -> str:
    """An inclusive scan: for each lane, combine the body over positions <= its own (O(n^2))."""
    extent = em.current_scan_extent(node)
    acc = em.w.fresh(f"{node.op}_acc")
    em.w.emit(f"{acc} = tl.full({ctx.shape()}, {SCAN_INIT[node.op]}, {em.acc_dtype})")
    it = em.w.fresh(node.index)
    em.w.emit(f"for {it} in range(0, {extent_code(extent)}):")
    em.w.depth += 1
    here = ctx.index(node.index)
    inner = ctx.child()
    inner.idx[node.index] = (it, None)
    body = em.expr(node.body, inner)
    keep = f"tl.where({it} <= {here}, {body}, {SCAN_INIT[node.op]})"
    em.w.emit(f"{acc} = " + COMBINE[node.op].format(acc, keep))
    em.w.depth -= 1
    return acc
