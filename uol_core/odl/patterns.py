"""Pattern classification: map, reduce, contraction, stencil or scan, plus fused epilogues."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    Stmt,
    Unary,
    walk,
)

# When an op has several statements, the heaviest pattern names the op.
PRIORITY = {"map": 0, "reduce": 1, "stencil": 2, "scan": 3, "contraction": 4}


@dataclass(frozen=True)
class ContractionRoles:
    """Index roles of a contraction: C[batch, m, n] = sum[k](A[batch, m, k] * B[batch, k, n])."""

    lhs: str
    rhs: str
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]
    batch: tuple[str, ...] = ()
    windowed: bool = False  # an operand is read through affine windows (convolution)


@dataclass(frozen=True)
class StmtPattern:
    """The pattern of one statement and what it was recognised from."""

    index: int
    target: str
    kind: str
    reductions: tuple[str, ...] = ()
    contraction: ContractionRoles | None = None
    offsets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    epilogue: tuple[str, ...] = ()  # operations applied after the reduction in the same statement

    def describe(self) -> str:
        text = self.kind
        if self.contraction:
            c = self.contraction
            roles = [f"M={','.join(c.m) or '-'}", f"N={','.join(c.n) or '-'}", f"K={','.join(c.k)}"]
            if c.batch:
                roles.insert(0, f"batch={','.join(c.batch)}")
            text += f" [{' '.join(roles)}{' windowed' if c.windowed else ''}]"
        elif self.reductions:
            text += f" [{','.join(self.reductions)}]"
        if self.epilogue:
            text += f" + epilogue({', '.join(self.epilogue)})"
        return text


@dataclass(frozen=True)
class OpPattern:
    """The op's pattern: its main statement, the statements fused after it, all statements."""

    kind: str
    main: int
    statements: tuple[StmtPattern, ...]
    epilogues: tuple[int, ...] = ()

    @property
    def main_statement(self) -> StmtPattern:
        return self.statements[self.main]

    def describe(self) -> str:
        head = self.statements[self.main].describe()
        if len(self.statements) > 1:
            kinds = " -> ".join(s.kind for s in self.statements)
            head += f"; {len(self.statements)} statements: {kinds}"
        return head


def classify(op: Op) -> OpPattern:
    """Classify every statement, then the op by its heaviest statement."""
    stmts = tuple(classify_stmt(op, i) for i in range(len(op.stmts)))
    main = max(range(len(stmts)), key=lambda i: (PRIORITY[stmts[i].kind], -i))
    epilogues = tuple(i for i in range(main + 1, len(stmts)) if stmts[i].kind == "map")
    return OpPattern(stmts[main].kind, main, stmts, epilogues)


def classify_stmt(op: Op, index: int) -> StmtPattern:
    """Pattern of statement `index` of a checked op."""
    stmt = op.stmts[index]
    nodes = list(walk(stmt.expr))
    reduces = [n for n in nodes if isinstance(n, Reduce)]
    offsets = _offset_accesses(nodes)
    epilogue = _epilogue_ops(stmt.expr)
    if any(isinstance(n, Scan) for n in nodes):
        return StmtPattern(index, stmt.target, "scan", offsets=offsets, epilogue=epilogue)
    for node in reduces:
        roles = _contraction_roles(stmt, node)
        if roles is not None:
            return StmtPattern(index, stmt.target, "contraction", ("sum",), roles, offsets, epilogue)
    ops = tuple(dict.fromkeys(n.op for n in reduces))
    if reduces:
        windowed = any(set(form.symbols) & set(r.indices) and form.pure_symbol is None
                       for r in reduces for a in walk(r.body) if isinstance(a, Access)
                       for form in a.indices)
        kind = "stencil" if windowed else "reduce"
        return StmtPattern(index, stmt.target, kind, ops, None, offsets, epilogue)
    return StmtPattern(index, stmt.target, "stencil" if offsets else "map", (), None, offsets)


def _offset_accesses(nodes: list[Expr]) -> dict[str, tuple[str, ...]]:
    """Accesses whose indices are not plain names (h + r, i - 1, 2*i), by tensor."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        if isinstance(node, Access) and any(f.pure_symbol is None for f in node.indices):
            text = f"{node.tensor}[{', '.join(map(str, node.indices))}]"
            found.setdefault(node.tensor, [])
            if text not in found[node.tensor]:
                found[node.tensor].append(text)
    return {k: tuple(v) for k, v in found.items()}


def _product_factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "mul":
        return _product_factors(expr.lhs) + _product_factors(expr.rhs)
    if isinstance(expr, Cast):
        return _product_factors(expr.operand)
    return [expr]


def _contraction_roles(stmt: Stmt, node: Reduce) -> ContractionRoles | None:
    """Roles when the reduction is a sum of a product of two tensors sharing the summed indices."""
    if node.op != "sum":
        return None
    factors = [f for f in _product_factors(node.body) if not isinstance(f, Const)]
    accesses = [f for f in factors if isinstance(f, Access)]
    if len(accesses) != 2 or len(factors) != 2:
        return None
    lhs, rhs = accesses
    lhs_names = {s for f in lhs.indices for s in f.symbols}
    rhs_names = {s for f in rhs.indices for s in f.symbols}
    summed = set(node.indices)
    if not (summed & lhs_names and summed & rhs_names):
        return None
    free = [i for i in stmt.indices]
    batch = tuple(i for i in free if i in lhs_names and i in rhs_names)
    m = tuple(i for i in free if i in lhs_names and i not in rhs_names)
    n = tuple(i for i in free if i in rhs_names and i not in lhs_names)
    windowed = any(f.pure_symbol is None for f in lhs.indices + rhs.indices)
    return ContractionRoles(lhs.tensor, rhs.tensor, m, n, tuple(node.indices), batch, windowed)


def _epilogue_ops(expr: Expr) -> tuple[str, ...]:
    """Operations wrapped around the statement's reductions (bias add, activation, scaling)."""
    if isinstance(expr, (Reduce, Scan)) or not any(isinstance(n, (Reduce, Scan)) for n in walk(expr)):
        return ()
    names: list[str] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (Reduce, Scan)):
            continue
        if isinstance(node, Binary):
            names.append(node.op)
            stack.extend([node.rhs, node.lhs])
        elif isinstance(node, Call):
            names.append(node.fn)
            stack.extend(reversed(node.args))
        elif isinstance(node, Unary):
            names.append(node.op)
            stack.append(node.operand)
        elif isinstance(node, Cast):
            names.append(f"cast_{node.dtype.value}")
            stack.append(node.operand)
    return tuple(names)
