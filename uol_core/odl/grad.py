"""Reverse-mode differentiation of an ODL op into an ordinary ODL op (entry point `derive_grad`).

For a statement T[F] = e and an element read A[f(V)] inside it, the adjoint contribution is

    dA[a] += sum over V with f(V) = a of  dT[F] * de/dA[f(V)]

V is the statement's free indices plus the reduction indices the read depends on. Indices
that appear alone (or with coefficient +-1) in f are solved for the gradient's own indices
`a`; the rest stay summed, guarded by `where(f(V) == a, ...)`. Contractions therefore
become contractions, windows (h + r) become windows on the adjoint, and strided reads
become guarded sums. Forward outputs are saved (they exist already); elementwise
intermediates are recomputed inside the gradient op, which costs no memory; reductions are
saved unless they are larger than every input and output (see `_Builder.unbounded`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from uol_core.odl.check import stmt_extents
from uol_core.odl.cost import free_indices
from uol_core.odl.derivatives import (
    Differentiator,
    access_symbols,
    affine_expr,
    rebuild,
    substitute,
    substitute_affine,
)
from uol_core.odl.errors import OdlError
from uol_core.odl.grad_rewrite import (
    Renamer,
    alpha_normal,
    contains,
    factors,
)
from uol_core.odl.grad_saves import SavePolicy, reduces
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    Const,
    Expr,
    Op,
    Reduce,
    Stmt,
    TensorDecl,
    Var,
    walk,
)
from uol_core.odl.printer import format_op
from uol_core.odl.simplify import ZERO, is_zero, simplify


@dataclass(frozen=True)
class GradOp:
    """A derived backward op and how its names relate to the forward op."""

    op: Op
    forward: Op
    wrt: tuple[str, ...]  # forward inputs that get a gradient, in order
    grad_of_output: dict[str, str]  # forward output -> backward input holding its gradient
    grad_of_input: dict[str, str]  # forward input -> backward output holding its gradient
    saved: tuple[str, ...]  # forward outputs the backward reads
    notes: tuple[str, ...] = field(default=())
    forward_op: Op | None = None  # the forward, also writing what the backward saves
    saved_extra: tuple[str, ...] = ()  # extra outputs of forward_op the backward reads

    @property
    def forward_with_saves(self) -> Op:
        """The op to run forward so the backward finds its saved tensors."""
        return self.forward_op or self.forward

    @property
    def text(self) -> str:
        return format_op(self.op)


def differentiable_inputs(op: Op) -> tuple[str, ...]:
    """Inputs of a floating type: the ones a gradient is derived for."""
    return tuple(d.name for d in op.inputs if d.dtype.is_float)


@functools.lru_cache(maxsize=256)
def derive_grad(op: Op, wrt: Sequence[str] | None = None, recompute_wide: bool = False) -> GradOp:
    """The vector-Jacobian product of `op` as a new, checked ODL op named `<op>_grad`.

    Reductions the backward needs are saved from the forward pass; with `recompute_wide`,
    those whose axes no input or output has (attention's S x T scores) are recomputed
    instead. The torch bridge asks for that only when a backend template fuses the
    recomputation into the backward (flash attention): elsewhere it would cost a GEMM."""
    from uol_core.odl.parser import parse  # the result is re-parsed: derived ops are plain ODL

    wrt = tuple(wrt) if wrt is not None else differentiable_inputs(op)
    for name in wrt:
        if name not in differentiable_inputs(op):
            raise OdlError(f"cannot differentiate with respect to '{name}': not a float input of {op.name}")
    builder = _Builder(op, wrt, recompute_wide)
    raw = builder.build()
    text = format_op(raw)
    forward = builder.forward_with_saves()
    forward_op = parse(format_op(forward), filename=f"{op.name}.odl") if forward is not op else None
    return GradOp(parse(text, filename=f"{op.name}_grad.odl"), op, wrt, builder.grad_out,
                  builder.grad_in, builder.saved, tuple(builder.notes), forward_op,
                  tuple(builder.saved_extra))


class _Builder(SavePolicy):
    def __init__(self, op: Op, wrt: tuple[str, ...], recompute_wide: bool = False) -> None:
        self.op = op
        self.wrt = wrt
        self.recompute_wide = recompute_wide
        self.taken = set(op.dims) | set(op.tensors)
        for stmt in op.stmts:
            self.taken.update(stmt.indices)
            for node in walk(stmt.expr):
                if isinstance(node, Reduce):
                    self.taken.update(node.indices)
        self.grad_out = {d.name: self.name(f"d{d.name}") for d in op.outputs}
        self.grad_in = {name: self.name(f"d{name}") for name in wrt}
        self.adjoint: dict[str, str] = dict(self.grad_in)  # tensor -> name of its adjoint
        self.contributions: dict[str, list[Expr]] = {}
        self.lhs: dict[str, tuple[str, ...]] = {}
        self.saved: tuple[str, ...] = ()
        self.notes: list[str] = []
        # Hoisted values by alpha-normal form; forward statements count, so a gradient that
        # needs the row max reads the recomputed `mx` instead of computing it again.
        self.hoisted: dict[Expr, tuple[str, tuple[str, ...]]] = {
            alpha_normal(s.expr): (s.target, s.indices) for s in op.stmts}
        # Forward sub-values the backward reads instead of recomputing: key -> (name, indices,
        # statement index, value, extents); and forward locals promoted to outputs.
        self.saves: dict[Expr, tuple[str, tuple[str, ...], int, Expr, tuple]] = {}
        # Forward reductions rebuilt from an output the backward keeps anyway (`from_output`).
        self.rebuilt: dict[Expr, Expr] = {}
        self.saved_extra: list[str] = []
        self.current_stmt = -1

    def name(self, base: str) -> str:
        candidate, n = base, 0
        while candidate in self.taken:
            n += 1
            candidate = f"{base}_{n}"
        self.taken.add(candidate)
        return candidate

    def lhs_names(self, tensor: str) -> tuple[str, ...]:
        if tensor not in self.lhs:
            rank = len(self.op.tensor(tensor).shape)
            self.lhs[tensor] = tuple(self.name(f"{tensor.lower()}{i}") for i in range(rank))
        return self.lhs[tensor]

    def needs_grad(self, tensor: str) -> bool:
        decl = self.op.tensor(tensor)
        if not decl.dtype.is_float:
            return False
        return tensor in self.wrt or tensor in {d.name for d in self.op.locals} or \
            tensor in {d.name for d in self.op.outputs}

    # ------------------------------------------------------------------ driver
    def build(self) -> Op:
        outputs = {d.name for d in self.op.outputs}
        adjoint_stmts: list[Stmt] = []
        for index in range(len(self.op.stmts) - 1, -1, -1):
            stmt = self.op.stmts[index]
            incoming = self.incoming(stmt.target, outputs, adjoint_stmts)
            if incoming is None:
                continue
            self.differentiate(index, incoming, adjoint_stmts)
        for name in self.wrt:
            adjoint_stmts.append(self.sum_statement(name, self.grad_in[name]))
        return self.assemble(adjoint_stmts)

    def incoming(self, target: str, outputs: set[str], out: list[Stmt]) -> str | None:
        """Name of the tensor holding target's adjoint, emitting its statement if needed."""
        parts = self.contributions.get(target, [])
        if target in outputs and not parts:
            return self.grad_out[target]
        if not parts:
            return None
        if target in outputs:
            names = self.lhs_names(target)
            parts = [Access(self.grad_out[target], tuple(Affine.of(n) for n in names)), *parts]
            self.contributions[target] = parts
        adj = self.name(f"d_{target}")
        self.adjoint[target] = adj
        out.append(self.sum_statement(target, adj))
        return adj

    def sum_statement(self, tensor: str, target: str) -> Stmt:
        parts = [p for p in (simplify(p) for p in self.contributions.get(tensor, [])) if not is_zero(p)]
        total: Expr = parts[0] if parts else ZERO
        for part in parts[1:]:
            total = Binary("add", total, part)
        if not parts:
            self.notes.append(f"{tensor} does not influence any output: its gradient is zero")
        names = self.lhs_names(tensor)
        # An adjoint intermediate has no declaration; write its extents so nothing is inferred.
        written = () if target in self.grad_in.values() else \
            tuple(zip(names, self.op.tensor(tensor).shape))
        return Stmt(target, names, total, 0, written)

    def differentiate(self, index: int, incoming: str, out: list[Stmt]) -> None:
        stmt = self.op.stmts[index]
        self.current_stmt = index
        extents = dict(stmt_extents(self.op, index).free)
        body = Renamer(self.name, stmt_extents(self.op, index).reductions, extents).run(stmt.expr)
        upstream = Access(incoming, tuple(Affine.of(i) for i in stmt.indices))
        symbols = list(dict.fromkeys(n for n in walk(body) if isinstance(n, Access)
                                     and n.tensor != stmt.target and self.needs_grad(n.tensor)))
        for symbol in symbols:
            diff = Differentiator(symbol, self.name, extents)
            partial = simplify(diff.d(body))
            if is_zero(partial):
                continue
            extents.update(diff.extents)
            partial = self.freshen(partial, set(diff.stripped), extents)
            loop_vars = list(stmt.indices) + diff.stripped
            value = self.hoist(Binary("mul", upstream, partial), stmt, symbol, extents, out)
            term = self.scatter(symbol, value, loop_vars, extents)
            self.contributions.setdefault(symbol.tensor, []).append(term)

    def hoist(self, value: Expr, stmt: Stmt, symbol: Access, extents: dict[str, Affine],
              out: list[Stmt]) -> Expr:
        """Compute once per point what depends only on the statement's own indices.

        Forward reductions inside the partial (the z of gelu'(z)) become intermediates, and so
        does the product of the factors local to the statement: dY * gelu'(z) becomes g[m, n],
        so dX = sum[n](g * W) is a plain contraction again. Equal hoisted values (up to the
        names of their reduction indices) are computed once and shared by every gradient.
        """
        own = set(stmt.indices) | set(self.op.dims)
        value = self.hoist_reductions(simplify(value), stmt, own, extents, out)
        parts = factors(value)
        local = [f for f in parts if free_indices(f) <= own]
        rest = [f for f in parts if not free_indices(f) <= own]
        summed_later = bool(set(stmt.indices) - access_symbols(symbol))
        if len(local) < 2 or not (rest or summed_later):
            return value
        product = local[0]
        for factor in local[1:]:
            product = Binary("mul", product, factor)
        if not rest and alpha_normal(product) not in self.hoisted:
            # A reduction of purely local values (d_var = sum[c](dY * ...)): computing them
            # inside the sum costs nothing extra, and a stored copy would cost a pass.
            return value
        result: Expr = self.intermediate(product, stmt, extents, out)
        for factor in rest:
            result = Binary("mul", result, factor)
        return result

    def hoist_reductions(self, expr: Expr, stmt: Stmt, own: set[str],
                         extents: dict[str, Affine], out: list[Stmt]) -> Expr:
        closed = free_indices(expr) <= own
        if closed and not isinstance(expr, (Access, Const, Var)):
            known = self.hoisted.get(alpha_normal(expr))
            if known is not None and set(known[1]) <= own:
                return Access(known[0], tuple(Affine.of(n) for n in known[1]))
        if isinstance(expr, Reduce) and closed:
            body = self.hoist_reductions(expr.body, stmt, own, extents, out)
            return self.intermediate(Reduce(expr.op, expr.indices, body, expr.loc, expr.extents),
                                     stmt, extents, out)

        return rebuild(expr, lambda child: self.hoist_reductions(child, stmt, own, extents, out))

    def intermediate(self, value: Expr, stmt: Stmt, extents: dict[str, Affine],
                     out: list[Stmt]) -> Access:
        """An Access to a new statement computing `value` over the indices it uses (shared)."""
        key = alpha_normal(value)
        if key in self.rebuilt:
            return self.rebuilt[key]
        if key not in self.hoisted:
            used = free_indices(value)
            names = tuple(i for i in stmt.indices if i in used)
            written = tuple((n, extents[n]) for n in names)
            if isinstance(value, Reduce) and \
                    (rebuilt := self.from_output(key, stmt, names)) is not None:
                self.rebuilt[key] = rebuilt
                return rebuilt
            target = self.name(f"g_{stmt.target}" if not isinstance(value, Reduce) else f"z_{stmt.target}")
            if isinstance(value, Reduce) and contains(stmt.expr, key) and \
                    not self.unbounded(tuple(e for _, e in written)):
                # Cost rule: a forward reduction is a whole pass over its input; saving it costs
                # one tensor of its (smaller or equal) output. Save it, as torch saves z.
                self.saves[key] = (target, names, self.current_stmt, value, written)
            else:
                out.append(Stmt(target, names, value, 0, written))
            self.hoisted[key] = (target, names)
        target, names = self.hoisted[key]
        return Access(target, tuple(Affine.of(n) for n in names))

    def freshen(self, expr: Expr, names: set[str], extents: dict[str, Affine]) -> Expr:
        """Rename reductions that bind a stripped index: once that index is solved for the
        gradient's indices, the forward value inside the partial must not capture it."""
        if isinstance(expr, Reduce) and names & set(expr.indices):
            mapping = {}
            for old in names & set(expr.indices):
                new = self.name(old)
                extents[new] = extents[old]
                mapping[old] = Affine.of(new)
            renamed = tuple(mapping[i].pure_symbol if i in mapping else i for i in expr.indices)
            written = tuple((mapping[n].pure_symbol if n in mapping else n, e) for n, e in expr.extents)
            body = substitute(expr.body, mapping)
            return Reduce(expr.op, renamed, self.freshen(body, names, extents), expr.loc, written)

        return rebuild(expr, lambda child: self.freshen(child, names, extents))

    def scatter(self, symbol: Access, value: Expr, loop_vars: list[str],
                extents: dict[str, Affine]) -> Expr:
        """Re-index a contribution by the gradient's own indices: solve, guard, sum the rest."""
        target = self.lhs_names(symbol.tensor)
        shape = self.op.tensor(symbol.tensor).shape
        solved: dict[str, Affine] = {}
        exact: set[str] = set()  # solved by a plain gradient index of the same extent: no guard
        conditions: list[Expr] = []
        forms = list(symbol.indices)
        for position, form in enumerate(forms):
            form = substitute_affine(form, solved)
            here = Affine.of(target[position])
            free = [(n, c) for n, c in form.terms if n in loop_vars and n not in solved]
            # Solve for the statement's own indices first: the reduction indices left over then
            # keep their plain reads in the other operand (dX of a conv stays a conv).
            unit = sorted(((n, c) for n, c in free if abs(c) == 1),
                          key=lambda term: loop_vars.index(term[0]))
            if unit:
                name, coeff = unit[0]
                rest = form - Affine(((name, coeff),))
                solution = (here - rest).scale(coeff)  # coeff is +-1, its own inverse
                solved[name] = solution
                if solution == here and extents[name] == shape[position]:
                    exact.add(name)
                else:
                    conditions.append(Binary("ge", affine_expr(solution), ZERO))
                    conditions.append(Binary("lt", affine_expr(solution), affine_expr(extents[name])))
            else:
                conditions.append(Binary("eq", affine_expr(form), Var(target[position])))
        value = substitute(value, {n: f for n, f in solved.items() if n in exact})
        value = substitute(value, {n: f for n, f in solved.items() if n not in exact},
                           pad_changed=True)
        conditions = [substitute(c, solved) for c in conditions]
        if conditions:
            cond = conditions[0]
            for extra in conditions[1:]:
                cond = Binary("and", cond, extra)
            value = Call("where", (cond, value, ZERO))
        remaining = tuple(v for v in loop_vars if v not in solved)
        if not remaining:
            return value
        return Reduce("sum", remaining, value, (0, 0), tuple((v, extents[v]) for v in remaining))

    def assemble(self, adjoint_stmts: list[Stmt]) -> Op:
        used = {n.tensor for s in adjoint_stmts for n in walk(s.expr) if isinstance(n, Access)}
        outputs = {d.name for d in self.op.outputs}
        needed, kept = self.recompute_closure(used - outputs)
        recomputed = [s for s in self.op.stmts if s.target in needed]
        used |= {n.tensor for s in recomputed for n in walk(s.expr) if isinstance(n, Access)}
        self.saved = tuple(d.name for d in self.op.outputs if d.name in used)
        self.saved_extra = [s.target for s in self.op.stmts if s.target in kept] + \
            [save[0] for save in self.saves.values()]
        wide = [s.target for s in recomputed if reduces(s)]
        if len(wide) < len(recomputed):
            self.notes.append("recomputed (elementwise, no extra memory): "
                              + ", ".join(s.target for s in recomputed if not reduces(s)))
        if wide:
            self.notes.append(
                "recomputed although a reduction, because saving it would store a tensor larger "
                "than every input and output (its axes are not those of any one of them, like "
                "the S x T scores of attention; FlashAttention recomputes them too): "
                + ", ".join(wide))
        if self.saved or self.saved_extra:
            self.notes.append("saved from the forward pass (a reduction or contraction would cost "
                              "a pass to recompute): " + ", ".join([*self.saved, *self.saved_extra]))
        inputs = list(self.op.inputs)
        # saved outputs come back as inputs: values now, no longer written over anything
        inputs += [replace(d, alias=None) for d in self.op.outputs if d.name in self.saved]
        inputs += [self.op.tensor(n) for n in self.saved_extra if n in kept]
        inputs += [self.saved_decl(save) for save in self.saves.values()]
        inputs += [TensorDecl(self.grad_out[d.name], d.dtype, d.shape) for d in self.op.outputs]
        grads = [TensorDecl(self.grad_in[n], self.op.tensor(n).dtype, self.op.tensor(n).shape)
                 for n in self.wrt]
        return Op(f"{self.op.name}_grad", tuple(inputs), tuple(grads),
                  tuple(recomputed) + tuple(adjoint_stmts))
