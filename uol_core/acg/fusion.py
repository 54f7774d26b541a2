"""Statement fusion: group consecutive statements into as few passes over memory as dependencies allow.

A group shares its `depth` outermost loops: statement s joins the group when, for each of
those positions, its extent equals the group's and every read of a tensor written earlier in
the group uses exactly s's own index there (the value was produced in the same iteration).
Intermediates used only inside their group never reach memory as whole tensors: each thread
keeps one slice (the axes past `depth`) in a private buffer. Every decision has a reason.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from uol_core.backends.emit_limits import checkpoint
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Expr, Op, Reduce, Scan, children, walk


@dataclass
class FusionGroup:
    """Statements run inside one loop nest of `depth` shared outer loops."""

    stmts: list[int]
    depth: int
    extents: list[int]  # concrete extents of the shared loops
    private: list[str] = field(default_factory=list)  # intermediates kept per thread (a slice)
    # column reductions over the shared row loop: each thread sums its rows into a partial row,
    # the partial rows are combined after the pass
    riders: list[int] = field(default_factory=list)


@dataclass
class FusionPlan:
    """The groups in order, plus one sentence per statement boundary saying why."""

    groups: list[FusionGroup]
    reasons: list[str]

    def explain(self, op: Op) -> str:
        """Plain text: which statements were fused, which intermediates stay private, and why."""
        lines = []
        for n, g in enumerate(self.groups):
            names = ", ".join(f"{op.stmts[i].target} (line {op.stmts[i].line})" for i in g.stmts)
            lines.append(f"pass {n + 1}: {names}; {g.depth} shared loop(s) {g.extents}"
                         + (f"; private per thread: {', '.join(g.private)}" if g.private else ""))
        return "\n".join(lines + [f"  - {r}" for r in self.reasons])


def _reads(expr: Expr, bound: frozenset[str] = frozenset()):
    """(access, indices rebound by enclosing reductions) for every tensor read."""
    if isinstance(expr, Access):
        yield expr, bound
    inner = bound | set(expr.indices) if isinstance(expr, Reduce) else bound
    for child in children(expr):
        yield from _reads(child, inner)


@dataclass(frozen=True)
class _Shape:
    """What fusion asks of one statement's expression, found in one look at it."""

    scan_position: int | None  # the free position of its scan index (None: no scan)
    column_reduce: bool
    pure_map: bool  # no reduction
    inner_contiguous: bool  # _contiguous_in its last free index


@functools.lru_cache(maxsize=512)
def tensors_read(op: Op, i: int) -> frozenset[str]:
    """The tensors statement i reads, remembered per op and statement (see _shape)."""
    return frozenset(n.tensor for n in walk(op.stmts[i].expr) if isinstance(n, Access))


@functools.lru_cache(maxsize=512)
def _shape(op: Op, i: int) -> _Shape:
    """Statement i's _Shape, remembered per op (hashed once) and statement: plan_fusion runs
    once per config the space ranks and again for each emit, over every statement each time,
    and walking the expressions anew each time made a 64-statement op take seconds."""
    stmt = op.stmts[i]
    scans = [n for n in walk(stmt.expr) if isinstance(n, Scan)]
    return _Shape(stmt.indices.index(scans[0].index) if scans else None,
                  column_reduce(stmt) is not None,
                  not any(isinstance(n, Reduce) for n in walk(stmt.expr)),
                  bool(stmt.indices) and _contiguous_in(stmt, stmt.indices[-1]))


def _max_depth(op: Op, i: int, sizes: Mapping[str, int], starting: bool = False) -> int:
    """Loops statement i can share at most: its free indices before any scan index; a map that
    starts a pass keeps its innermost loop to itself (the vectorised one)."""
    stmt = op.stmts[i]
    shape = _shape(op, i)
    if shape.scan_position is not None:
        return shape.scan_position
    if shape.column_reduce:
        return 0  # rows outside, columns inside: the C path gives it a pass of its own
    pure_map = shape.pure_map
    keep_inner = starting and stmt.indices and (pure_map or shape.inner_contiguous)
    if keep_inner and not pure_map and short_inner_axis(op, i, sizes):
        return len(stmt.indices) - 2  # both inner loops: the C path vectorises the longer one
    return len(stmt.indices) - 1 if keep_inner else len(stmt.indices)


# An innermost free axis this short fills no vector of any target (4 f32 lanes at the least).
SHORT_EXTENT = 4


def short_inner_axis(op: Op, i: int, sizes: Mapping[str, int]) -> bool:
    """A reduction whose statement's last free axis runs fewer than SHORT_EXTENT times, where
    the axis before it runs at least twice as long and some read inside the reduction walks it
    with stride 1: y[n, k, h, a, w, e] = sum[c](x[n, c, h, w] * W[c, k, a, e]), a transposed
    convolution with a and e of extent 2. The fusion keeps both loops out of the shared ones,
    and the C path swaps them and accumulates along w, storing every second element, instead
    of 2 lanes at a time along e."""
    stmt = op.stmts[i]
    if len(stmt.indices) < 2:
        return False
    free = stmt_extents(op, i).free
    outer, inner = stmt.indices[-2], stmt.indices[-1]
    inner_n, outer_n = (free[n].evaluate(dict(sizes)) for n in (inner, outer))
    return inner_n < SHORT_EXTENT and outer_n >= 2 * inner_n and _contiguous_in(stmt, outer)


def _contiguous_in(stmt, index: str) -> bool:
    """Some read inside a reduction walks its last axis with `index` (stride 1) and moves with
    the reduction: the C path then vectorises the reduction over that index, so it stays an
    inner loop. (A read such as mu[r] in sum[c](X[r, c] - mu[r]) is invariant: it does not count.)"""
    for red in (n for n in walk(stmt.expr) if isinstance(n, Reduce)):
        for node in walk(red.body):
            if (isinstance(node, Access) and node.indices
                    and dict(node.indices[-1].terms).get(index) == 1
                    and _uses(node, red.indices)):
                return True
    return False


def _uses(access: Access, names) -> bool:
    return any(n in names for f in access.indices for n in f.symbols)


def column_reduce(stmt) -> Reduce | None:
    """The reduction of a column sum: a one-index statement `y[c] = f(red[r..](body), ..)` with
    one reduction, whose body reads some tensor contiguously along c while walking its rows,
    and reads no tensor contiguously along r that also moves with c (sum[r](g[r, c]), not
    sum[k](A[c, k])). The C path runs the rows outside and the columns inside (vectorised)."""
    if len(stmt.indices) != 1:
        return None
    nodes = list(walk(stmt.expr))
    reds = [n for n in nodes if isinstance(n, Reduce)]
    if len(reds) != 1 or any(isinstance(n, Scan) for n in nodes):
        return None
    red, c = reds[0], stmt.indices[0]
    if red.op not in ("sum", "mean", "prod", "max", "min"):
        return None
    along_c = False
    for node in walk(red.body):
        if not (isinstance(node, Access) and node.indices):
            continue
        last = dict(node.indices[-1].terms)
        if any(last.get(r) for r in red.indices) and _uses(node, (c,)):
            return None  # contiguous along the rows for some read: a row reduction
        if last.get(c) == 1 and _uses(node, red.indices):
            along_c = True
    return red if along_c else None


def _legal_depth(op: Op, i: int, group: FusionGroup, sizes: Mapping[str, int]) -> tuple[int, str]:
    """How many of the group's shared loops statement i can join, and what limits it."""
    stmt = op.stmts[i]
    free = stmt_extents(op, i).free
    depth, why = min(group.depth, _max_depth(op, i, sizes)), ""
    if depth < group.depth:
        why = f"{stmt.target} has only {depth} loop(s) before its scan or its end"
        if column_reduce(stmt) is not None:
            why = f"{stmt.target} is a column reduction (rows outside, columns inside)"
    for p in range(depth):
        if free[stmt.indices[p]].evaluate(dict(sizes)) != group.extents[p]:
            # the reads below must still be checked for the loops before this one
            depth, why = p, f"loop {p + 1} of {stmt.target} has a different extent"
            break
    written = {op.stmts[j].target for j in group.stmts}
    for access, rebound in _reads(stmt.expr):
        if access.tensor not in written:
            continue
        if access.tensor in {op.stmts[j].target for j in group.riders}:
            return 0, f"{stmt.target} reads {access.tensor}, complete only after the pass"
        for p in range(depth):
            same = access.indices[p].pure_symbol == stmt.indices[p] and stmt.indices[p] not in rebound
            if not same:
                return p, (f"{stmt.target} reads {access.tensor} at another position of loop "
                           f"{p + 1} (it needs the whole of {access.tensor} first)")
    return depth, why


def _can_ride(op: Op, i: int, group: FusionGroup, sizes: Mapping[str, int]) -> bool:
    """Statement i is a column reduction over exactly the group's one shared (row) loop, reading
    what the group wrote only at the current row and only inside the reduction."""
    stmt = op.stmts[i]
    red = column_reduce(stmt)
    if red is None or group.depth != 1 or len(red.indices) != 1:
        return False
    row = red.indices[0]
    extent = stmt_extents(op, i).reductions[red][row].evaluate(dict(sizes))
    if extent != group.extents[0]:
        return False
    written = {op.stmts[j].target for j in group.stmts}
    inside = {id(n) for n in walk(red.body)}
    for access, _ in _reads(stmt.expr):
        if access.tensor not in written:
            continue
        if id(access) not in inside or not access.indices or access.indices[0].pure_symbol != row:
            return False
    return True


def plan_fusion(op: Op, sizes: Mapping[str, int], enabled: bool = True) -> FusionPlan:
    """Greedy fusion of consecutive statements (statement order is a legal schedule already)."""
    groups: list[FusionGroup] = []
    reasons: list[str] = []
    for i, stmt in enumerate(op.stmts):
        checkpoint()  # a guarded compile may stop here (the space plans once per config)
        free = stmt_extents(op, i).free
        depth = _max_depth(op, i, sizes, starting=True)
        extents = [free[n].evaluate(dict(sizes)) for n in stmt.indices[:depth]]
        if groups and enabled:
            group = groups[-1]
            if _can_ride(op, i, group, sizes):
                group.stmts.append(i)
                group.riders.append(i)
                reasons.append(f"{stmt.target} rides the pass of {op.stmts[group.stmts[0]].target}: "
                               "a column reduction over its rows, summed per thread and combined "
                               "after the pass (its inputs are read once)")
                continue
            if group.depth == 0 and flat_map_joins(op, group.stmts, i, sizes):
                group.stmts.append(i)
                reasons.append(f"{stmt.target} fused into the pass of "
                               f"{op.stmts[group.stmts[0]].target}: element-wise over the same "
                               "one loop, reading earlier results only at its own element")
                continue
            joined, why = _legal_depth(op, i, group, sizes)
            if joined >= 1 and group.depth >= 1:
                group.stmts.append(i)
                group.depth, group.extents = joined, group.extents[:joined]
                reasons.append(f"{stmt.target} fused into the pass of "
                               f"{op.stmts[group.stmts[0]].target}: it reads earlier results "
                               f"only at the current iteration of {joined} shared loop(s)")
                continue
            reasons.append(f"{stmt.target} starts a new pass: " + (why or "no shared loop"))
        elif groups:
            reasons.append(f"{stmt.target} starts a new pass: fusion disabled by the config")
        groups.append(FusionGroup([i], depth, extents))
    _mark_private(op, groups)
    return FusionPlan(groups, reasons)


def flat_map(op: Op, i: int) -> bool:
    """A one-index element-wise statement (no reduction, scan or written extents): the loop
    its pass runs is its only one, the vectorised one."""
    stmt = op.stmts[i]
    shape = _shape(op, i)
    return len(stmt.indices) == 1 and not stmt.extents and shape.pure_map and \
        shape.scan_position is None


def flat_map_joins(op: Op, group: list[int], i: int, sizes: Mapping[str, int]) -> bool:
    """Statement i can share the one loop of a pass of flat maps: it is one too, with the
    same index name and extent, and reads what the pass wrote only at its own element."""
    first, stmt = op.stmts[group[0]], op.stmts[i]
    if not (flat_map(op, i) and all(flat_map(op, j) for j in group)
            and stmt.indices == first.indices):
        return False
    extent = [stmt_extents(op, j).free[stmt.indices[0]].evaluate(dict(sizes)) for j in (group[0], i)]
    written = {op.stmts[j].target for j in group}
    return extent[0] == extent[1] and all(
        tuple(f.pure_symbol for f in a.indices) == stmt.indices
        for a in walk(stmt.expr) if isinstance(a, Access) and a.tensor in written)


def _mark_private(op: Op, groups: list[FusionGroup]) -> None:
    """Intermediates read only inside their own group (and not outputs) stay per thread."""
    outputs = {d.name for d in op.outputs}
    read_later: set[str] = set()  # tensors the groups after the current one read
    for g in reversed(groups):
        if g.depth != 0:
            for i in g.stmts:
                target = op.stmts[i].target
                if target not in outputs and i not in g.riders and target not in read_later:
                    g.private.append(target)
        read_later.update(*(tensors_read(op, i) for i in g.stmts))
