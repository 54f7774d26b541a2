"""Bounds on code emission: how large an op may be, how large its kernel text, how long a
compile may run (entry points `check_op_size`, `check_source_size`, `compile_guard`,
`checkpoint`).

Every emitter renders each statement once (a statement's value is a variable, a repeated
argument a local: text.expr.SHARE_CHARS, triton.expr.bind), so the time and text of an emission
grow linearly with the op. These bounds keep that linear cost small and say so when an op is
past them, in one line naming the bound, instead of compiling for minutes:

- an op is refused before it is planned when it has more than MAX_KERNEL_STATEMENTS statements
  or more than MAX_EXPRESSION_NODES expression nodes (counted as the emitters render them: a
  sub-expression shared by two parents, which the Python builder can make, counts twice);
- a kernel text over MAX_SOURCE_BYTES is refused before anything builds it;
- inside `compile_guard(seconds, abandoned)` the renderers' `checkpoint()` calls stop the
  emission with CompileStopped once the time is up or `abandoned()` says the caller left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from uol_core.odl.ir import Expr, Op, children

# The ODL parser allows 64 statements; derived gradients and fused graph nodes have more.
MAX_KERNEL_STATEMENTS = 256
# 100 kB of ODL (the parser's limit) holds about 30 000 nodes; gradients grow a few times.
MAX_EXPRESSION_NODES = 200_000
# The largest library kernel is 19 kB, the largest op the parser takes about 0.5 MB of C.
MAX_SOURCE_BYTES = 2 * 2**20
CHECK_EVERY = 256  # checkpoints between two looks at the clock


class EmissionLimit(ValueError):
    """An op or kernel past one of this module's bounds (the message names the bound)."""


class CompileStopped(BaseException):
    """A guarded compile stopped: its time limit passed, or its caller left. A BaseException
    (as asyncio's CancelledError): the stages' `except Exception` fallbacks (a knob not
    offered when its kernel cannot be emitted) must not take a stop for a failure and go on."""


def expression_nodes(op: Op) -> int:
    """Expression nodes of every statement as rendered: a shared sub-expression counts once
    per parent. Linear in the distinct nodes (each node's count is remembered by identity)."""
    counts: dict[int, tuple[Expr, int]] = {}

    def count(expr: Expr) -> int:
        seen = counts.get(id(expr))
        if seen is None:
            seen = counts[id(expr)] = (expr, 1 + sum(count(c) for c in children(expr)))
        return seen[1]

    return sum(count(stmt.expr) for stmt in op.stmts)


def check_op_size(op: Op) -> None:
    """Raise EmissionLimit when `op` has too many statements or expression nodes to compile."""
    if len(op.stmts) > MAX_KERNEL_STATEMENTS:
        raise EmissionLimit(f"{op.name} has {len(op.stmts)} statements, over the limit of "
                            f"{MAX_KERNEL_STATEMENTS} statements per kernel "
                            "(MAX_KERNEL_STATEMENTS): split it into several ops")
    nodes = expression_nodes(op)
    if nodes > MAX_EXPRESSION_NODES:
        raise EmissionLimit(f"{op.name} has {nodes} expression nodes, over the limit of "
                            f"{MAX_EXPRESSION_NODES} per kernel (MAX_EXPRESSION_NODES): split "
                            "it into several ops")


def check_source_size(op_name: str, text: str) -> None:
    """Raise EmissionLimit when a generated kernel's text is over MAX_SOURCE_BYTES."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_SOURCE_BYTES:
        raise EmissionLimit(f"the kernel of {op_name} is {size} bytes, over the limit of "
                            f"{MAX_SOURCE_BYTES} bytes of generated source (MAX_SOURCE_BYTES)")


class _Guard:
    """The time limit and the leaving test of one compile."""

    def __init__(self, seconds: float, abandoned: Callable[[], bool] | None, what: str):
        self.seconds, self.abandoned, self.what = seconds, abandoned, what
        self.deadline = time.monotonic() + seconds
        self.calls = 0

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise CompileStopped(f"{self.what} stopped after its time limit of "
                                 f"{self.seconds:g} s: make the op or its sizes smaller")
        if self.abandoned is not None and self.abandoned():
            raise CompileStopped(f"{self.what} stopped: the client left")


_GUARD: ContextVar[_Guard | None] = ContextVar("uol_compile_guard", default=None)


@contextmanager
def compile_guard(seconds: float, abandoned: Callable[[], bool] | None = None,
                  what: str = "the compile") -> Iterator[Callable[[], None]]:
    """Within the block, emission in this thread stops with CompileStopped after `seconds` or
    once `abandoned()` is true; yields a `check()` the caller runs between its own stages."""
    guard = _Guard(seconds, abandoned, what)
    token = _GUARD.set(guard)
    try:
        yield guard.check
    finally:
        _GUARD.reset(token)


def checkpoint() -> None:
    """Where an emitter may be stopped (once per rendered node or statement); free outside a
    guard, a look at the clock every CHECK_EVERY calls inside one."""
    guard = _GUARD.get()
    if guard is not None:
        guard.calls += 1
        if guard.calls % CHECK_EVERY == 0:
            guard.check()
