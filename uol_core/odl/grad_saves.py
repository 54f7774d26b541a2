"""What a derived backward saves from the forward pass and what it recomputes (`SavePolicy`).

Elementwise intermediates are recomputed (no memory); reductions and contractions are saved
(recomputing one costs a whole pass or a GEMM), unless `recompute_wide` asks to recompute the
ones whose axes no input or output has (attention's S x T scores), as FlashAttention does.
"""

from __future__ import annotations

from collections import Counter

from uol_core.odl.grad_rewrite import alpha_normal, replace_subexpression
from uol_core.odl.ir import Access, Affine, Binary, Expr, Op, Reduce, Scan, Stmt, TensorDecl, walk


class SavePolicy:
    """Mixed into the gradient builder: needs `op`, `saves`, `saved_extra`, `recompute_wide`."""

    op: Op
    saves: dict
    saved_extra: list[str]
    recompute_wide: bool

    def saved_decl(self, save: tuple) -> TensorDecl:
        target, _names, index, _value, written = save
        dtype = self.op.tensor(self.op.stmts[index].target).dtype
        return TensorDecl(target, dtype, tuple(extent for _, extent in written))

    def unbounded(self, shape: tuple[Affine, ...]) -> bool:
        """With `recompute_wide`: whether a tensor of `shape` could be larger than every input
        and output (its axes, as a multiset of extents, are not among the axes of any one of
        them), so that it is recomputed rather than saved.

        A saved tensor no larger than some input or output at most doubles what the op already
        holds; one not bounded so (S x T attention scores from [S, D] and [T, D] inputs) grows
        as a product of sizes nothing else has. Recomputing it pays only where a template
        fuses the recomputation into the backward (the flash backward); an MLP's hidden
        activations are just as unbounded, and recomputing them would cost their GEMMs.
        """
        if not self.recompute_wide:
            return False
        need = Counter(shape)
        return not any(not need - Counter(d.shape) for d in self.op.inputs + self.op.outputs)

    def from_output(self, key: Expr, stmt: Stmt, names: tuple[str, ...]) -> Expr | None:
        """`z` of an output statement Y = z / X (z a reduction over every index of Y, X one
        tensor element at Y's indices) as Y * X: the backward keeps Y and X anyway, so a copy of
        z would cost the forward a store and the step its memory (attention's O = z / l: the
        flash backward reads dO . O where it read dO . z / l). None for any other form."""
        e = stmt.expr
        if stmt.target not in {d.name for d in self.op.outputs} or names != stmt.indices or \
                not (isinstance(e, Binary) and e.op == "div" and isinstance(e.rhs, Access)) or \
                alpha_normal(e.lhs) != key or e.rhs.pad is not None or \
                any(f.pure_symbol not in stmt.indices for f in e.rhs.indices):
            return None
        output = Access(stmt.target, tuple(Affine.of(n) for n in stmt.indices))
        return Binary("mul", output, e.rhs)

    def recompute_closure(self, names: set[str]) -> tuple[set[str], set[str]]:
        """Locals the backward needs: elementwise ones are recomputed (with what they read),
        reductions are kept from the forward pass unless `unbounded` (then recomputed too)."""
        locals_ = {d.name for d in self.op.locals}
        recompute: set[str] = set()
        keep: set[str] = set()
        stack = [n for n in names if n in locals_]
        while stack:
            name = stack.pop()
            if name in recompute or name in keep:
                continue
            stmt = next(s for s in self.op.stmts if s.target == name)
            if reduces(stmt) and not self.unbounded(self.op.tensor(name).shape):
                keep.add(name)
                continue
            recompute.add(name)
            stack.extend(n.tensor for n in walk(stmt.expr)
                         if isinstance(n, Access) and n.tensor in locals_)
        return recompute, keep

    def forward_with_saves(self) -> Op:
        """The forward op that also writes what the backward reads instead of recomputing."""
        if not self.saved_extra:
            return self.op
        kept = set(self.saved_extra)
        by_stmt: dict[int, list[tuple]] = {}
        for save in self.saves.values():
            by_stmt.setdefault(save[2], []).append(save)
        stmts: list[Stmt] = []
        extra: list[TensorDecl] = []
        for index, stmt in enumerate(self.op.stmts):
            expr = stmt.expr
            for target, names, _, value, written in by_stmt.get(index, []):
                stmts.append(Stmt(target, names, value, stmt.line, written))
                expr = replace_subexpression(expr, alpha_normal(value), Access(
                    target, tuple(Affine.of(n) for n in names)))
                extra.append(self.saved_decl((target, names, index, value, written)))
            stmts.append(Stmt(stmt.target, stmt.indices, expr, stmt.line, stmt.extents))
        promoted = [d for d in self.op.locals if d.name in kept]
        return Op(self.op.name, self.op.inputs, self.op.outputs + tuple(promoted) + tuple(extra),
                  tuple(stmts), line=self.op.line)


def reduces(stmt: Stmt) -> bool:
    """Whether a statement reduces or scans (a whole pass over its input to recompute)."""
    return any(isinstance(n, (Reduce, Scan)) for n in walk(stmt.expr))
