"""The column loop of a pass's elementwise row statement, and what shares it (entry points
`plan_row_loops`, `RowLoop` and `stream_prelude`).

A pass over rows (a norm's forward or backward) ends each row with an elementwise statement
over the row's columns, often followed by column reductions riding the pass (dgamma, dbeta):
- the riders right after it add their share inside its column loop, so the row's operands are
  read once for all of them rather than once per statement (a layer norm's backward: dX,
  dgamma and dbeta in one loop);
- when the kernel streams its output (acg/stores.py: an output written in place, with the
  kernel and its inputs beyond the last-level cache), the row is computed into a stage buffer
  in L1 and copied out with non-temporal stores, which write each line without reading it
  first: a third of the memory traffic of a pass that reads one row and writes one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from uol_core.acg.config import lanes
from uol_core.acg.fusion import FusionPlan, column_reduce
from uol_core.acg.stores import StorePolicy, store_policy
from uol_core.backends.c.loops.columns import ColumnRider
from uol_core.backends.c.loops.regions import hoist_invariant_reads
from uol_core.backends.c.platforms import PLATFORMS, platform
from uol_core.backends.c.text.expr import free_names, outer_reduces
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Access, DType, Op, Scan, walk

STAGE = "stage"  # the C name of a streamed row's buffer


@dataclass(frozen=True)
class RowShare:
    """What a row statement's column loop carries: the riders sharing it (statement indices,
    in order) and the store policy of its output where there was a choice to make (a kernel
    that moves more than the last-level cache, or a config asking for streaming)."""

    col: str
    extent: int
    riders: tuple[int, ...]
    stores: StorePolicy | None

    @property
    def streamed(self) -> bool:
        return self.stores is not None and self.stores.stream

    def describe(self, op: Op, i: int) -> str:
        """One line for the kernel header."""
        stmt = op.stmts[i]
        parts = []
        if self.riders:
            names = ", ".join(op.stmts[j].target for j in self.riders)
            parts.append(f"{names} add their rows' shares in its column loop (each row read once)")
        if self.streamed:
            parts.append(f"{self.stores.why}: each row is computed into an L1 stage and streamed out")
        elif self.stores is not None and self.stores.beyond_cache:  # a choice was made
            parts.append(self.stores.why)
        return f"{stmt.target} (line {stmt.line}): " + "; ".join(parts)


def plan_row_loops(op: Op, shapes: Mapping[str, tuple], plan: FusionPlan, real: str,
                   cfg: Mapping, target) -> dict[int, RowShare]:
    """Row statement index -> what its column loop carries, for every row statement that
    shares its loop with riders or streams its rows."""
    outputs = {d.name for d in op.outputs}
    found: dict[int, RowShare] = {}
    for g in plan.groups:
        if not g.depth:
            continue
        for k, i in enumerate(g.stmts):
            col = _row_column(op, i, g.depth, set(g.riders))
            if col is None:
                continue
            stmt = op.stmts[i]
            extent = shapes[stmt.target][-1]
            riders = []
            for j in g.stmts[k + 1:]:
                if j not in g.riders or not _can_share(op, shapes, i, j, col, extent):
                    break
                riders.append(j)
            later = g.stmts[k + 1:]
            stores = None
            if stmt.target in outputs and real == "float" and op.tensor(stmt.target).dtype == DType.f32:
                stores = _store_policy(op, shapes, i, extent, later, cfg, target)
            if riders or (stores is not None and (stores.stream or stores.beyond_cache)):
                found[i] = RowShare(col, extent, tuple(riders), stores)
    return found


def _row_column(op: Op, i: int, depth: int, riders: set[int]) -> str | None:
    """The one index statement i loops over inside a pass of `depth` shared loops, when it is
    an elementwise row statement: its last index, no scan, no reduction that moves with it."""
    stmt = op.stmts[i]
    if i in riders or len(stmt.indices) != depth + 1 or any(isinstance(n, Scan) for n in walk(stmt.expr)):
        return None
    col = stmt.indices[-1]
    if any(col in free_names(r.body, frozenset(r.indices)) for r in outer_reduces(stmt.expr)):
        return None
    return col


def _can_share(op: Op, shapes: Mapping[str, tuple], i: int, j: int, col: str, extent: int) -> bool:
    """Whether rider j may add its share inside row statement i's column loop: the same number
    of columns, no index name meaning one thing in i and another in j, and it does not read
    what i writes (a streamed row is not in memory until the loop ends)."""
    rider = op.stmts[j]
    red = column_reduce(rider)
    if red is None or shapes[rider.target][0] != extent or red.indices[0] == col:
        return False
    if rider.indices[0] in op.stmts[i].indices[:-1]:  # its column named as one of i's rows
        return False
    return all(not (isinstance(n, Access) and n.tensor == op.stmts[i].target) for n in walk(red.body))


def _store_policy(op: Op, shapes: Mapping[str, tuple], i: int, extent: int, later: list[int],
                  cfg: Mapping, target) -> StorePolicy | None:
    """The store policy of statement i's rows where they could stream out, else None: the ISA
    has non-temporal stores of fixed width, the row's stage fits in half of L1 and no later
    statement of the pass reads the output. The config's `stream=1` streams; otherwise the
    policy decides (acg/stores.py)."""
    stmt = op.stmts[i]
    isa = cfg.get("isa", "")
    if isa not in PLATFORMS or not platform(isa).stream or platform(isa).vla:
        return None
    if any(isinstance(n, Access) and n.tensor == stmt.target
           for j in later for n in walk(op.stmts[j].expr)):
        return None
    l1 = int(getattr(target, "l1d_bytes", 0) or 0)
    if not l1 or 4 * extent > l1 // 2:
        return None
    policy = store_policy(stmt.target, _bytes(op, shapes, stmt.target),
                          sum(_bytes(op, shapes, d.name) for d in op.inputs), target)
    if int(cfg.get("stream") or 0):
        return StorePolicy(True, "non-temporal stores (the config's choice: an output written in "
                                 "place)", policy.beyond_cache)
    return policy


def _bytes(op: Op, shapes: Mapping[str, tuple], name: str) -> int:
    return math.prod(shapes[name]) * op.tensor(name).dtype.itemsize


def stream_prelude(isa: str, target) -> str:
    """The intrinsics header and `uol_stream_row`, which copies a finished row from its stage
    to memory: ordinary stores up to the first vector-aligned address, non-temporal ones for
    the whole vectors, ordinary ones for the tail."""
    P, lane = platform(isa), lanes(isa, target)
    return f"""{P.include}
static inline void uol_stream_row(float *restrict dst, const float *restrict row, int64_t n)
{{
    int64_t c = 0;
    for (; c < n && ((uintptr_t)(dst + c) & {4 * lane - 1}); ++c) dst[c] = row[c];
    for (; c + {lane} <= n; c += {lane}) {P.stream.format('dst + c', P.loadu.format('row + c'))};
    for (; c < n; ++c) dst[c] = row[c];
}}
"""


class RowLoop:
    """Emits a row statement's additions to its own loop (see RowShare); with no share, an
    ordinary statement's loop, to which it adds nothing."""

    def __init__(self, share: RowShare | None, riders: Mapping[int, ColumnRider]) -> None:
        self.share = share
        self.riders = [riders[j] for j in share.riders] if share is not None else []
        self.streamed = share is not None and share.streamed

    def open(self, w: CodeWriter, pad: str, line: int) -> None:
        """Before the column loop: the stage of a streamed row."""
        if self.streamed:
            w.emit(f"{pad}float {STAGE}[{self.share.extent}] __attribute__((aligned(64)));", line)

    def hoist(self, w: CodeWriter, lay, row_names: list[str], pad: str, reads: bool) -> None:
        """Just before the column loop, after the row statement's own hoisted reads: each
        rider's row index and, with `reads` (a vector loop), the reads its share does not move
        along (a row's mean), which gcc would otherwise keep inside and then leave the whole
        loop scalar."""
        declared = set(row_names)
        for rider in self.riders:
            row = rider.red.indices[0]
            if row not in declared:
                declared.add(row)
                w.emit(f"{pad}const int64_t {index_id(row)} = o0;", rider.stmt.line)
            if reads:
                hoist_invariant_reads(w, lay, rider.stmt, rider.col, pad, expr=rider.red.body)

    def store_target(self, address: str) -> str:
        """Where the loop body stores the row statement's value."""
        return f"{STAGE}[{index_id(self.share.col)}]" if self.streamed else address

    def inside(self, w: CodeWriter, pad: str) -> None:
        """At the end of the loop body: the riders' shares at this column."""
        for rider in self.riders:
            rider.share(w, pad, index_id(self.share.col))

    def close(self, w: CodeWriter, pad: str, row_start: Callable[[], str], line: int) -> None:
        """After the column loop: stream the finished row out (`row_start`: the C address of
        the row's first element)."""
        if self.streamed:
            w.emit(f"{pad}uol_stream_row(&{row_start()}, {STAGE}, {self.share.extent});", line)
