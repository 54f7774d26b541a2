"""Compile service for the Studio: ODL text -> kernel source, knob space and explanation.

The same steps as `uol_core.compile`, through the backend registry, with the solved knob
space cached. Every failure comes back as a `CompileResult.error` (with the ODL line when
there is one), never as an exception to the page.

A compile is bounded: it queues in its client's compile lane (job_queue.COMPILE: one compile
per client at a time, at most MAX_WAITING waiting, a pool of slots for all clients), runs for at
most COMPILE_TIMEOUT_S, and stops (or is dropped before it starts) when its HTTP client closes
the connection. The emitters' checkpoints stop it mid-emission (emit_limits.compile_guard); the
size limits of emit_limits keep the stretches between checkpoints short.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.services import knobs as knob_space
from uol_core.backends import kernel_backend_names

TARGET_DEFAULT = "host"
BACKENDS = kernel_backend_names()
# The largest op the parser takes (64 statements, 100 kB) compiles in about 3 s on one core.
COMPILE_TIMEOUT_S = 15.0
COMPILE_WAIT_S = 20.0  # a compile that cannot start within this long is refused
# Filter-like dimensions get small sizes so windowed ops (conv, pooling) stay valid.


@dataclass
class CompileResult:
    """What the Studio shows after a compile: the kernel, its knobs, or the error and its line."""

    ok: bool
    odl: str
    backend: str
    target: str
    sizes: dict[str, int] = field(default_factory=dict)
    source: str = ""
    lang: str = "c"
    line_map: dict[int, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    knobs: list[dict] = field(default_factory=list)
    # knobs of the space not offered, with why (they change nothing in this kernel)
    hidden_knobs: list[dict] = field(default_factory=list)
    explanation: str = ""
    error: str = ""
    error_line: int = 0
    error_column: int = 0
    op_name: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready (line_map keys become strings in dcc.Store anyway)."""
        data = dict(self.__dict__)
        data["line_map"] = {str(k): v for k, v in self.line_map.items()}
        return data


def default_sizes(odl: str) -> dict[str, int]:
    """Sizes that make the op runnable at once (the same the CLI uses)."""
    from uol_core import parse
    from uol_core.odl.shapes import runnable_sizes

    return runnable_sizes(parse(odl))


def format_sizes(sizes: dict[str, int]) -> str:
    """'M=256,N=256' text as the sizes box shows it."""
    return ",".join(f"{k}={v}" for k, v in sizes.items())


@lru_cache(maxsize=64)
def _parse(odl: str):
    from uol_core import parse

    return parse(odl)


@lru_cache(maxsize=16)
def _target(name: str):
    from uol_core.hfl import load_target

    return load_target(name)


def emit(odl: str, backend: str, target: str, sizes: dict[str, int], config: dict | None,
         check: Callable[[], None] = lambda: None):
    """The KernelSource, knob rows and explanation of one compile (raises on any error).

    Uses the backend from the registry as `uol_core.compile` does (plan, space, emitter,
    explain), with the solved space cached, so a knob change re-emits in milliseconds.
    An op past the emission limits is refused before anything is planned; `check()` runs
    between the stages (a guarded compile stops there).
    """
    from uol_core.api import check_memory
    from uol_core.backends import get_backend
    from uol_core.backends.emit_limits import check_op_size
    from uol_core.odl.shapes import bind_sizes

    op = _parse(odl)
    check_op_size(op)
    bound = bind_sizes(op, sizes)
    check_memory(op, bound)  # sizes from the page: refuse what would exhaust the machine's RAM
    tgt = _target(target)
    check()
    space = knob_space.space_for(odl, backend, target, tuple(sorted(bound.items())))
    cfg = space.resolve(config or {})
    chosen = get_backend(backend, tgt)
    check()
    src = chosen.emit(chosen.plan(op, bound, tgt), cfg)
    check()
    explanation = _safe_explain(space, cfg) if space.model is not None else ""
    if not explanation:
        explanation = knob_space.explain(space, cfg, op, bound, tgt)
    return op, bound, src, space.knob_rows(cfg, src.text), explanation


def _safe_explain(space, cfg: dict) -> str:
    """The ACG explanation (cost-modelled spaces: the GEMM's) as text; '' (so the fallback is
    used) when it cannot be made."""
    try:
        from uol_core.acg.config import TileConfig
        from uol_core.backends.c.gemm.explain import explain

        return explain(space.acg, space.model, TileConfig.from_config(cfg)).render()
    except Exception:  # an explanation failure must not hide the kernel
        return ""


class CompileHalted(RuntimeError):
    """A compile stopped at its time limit or because its client left (the message says which)."""


@contextmanager
def compile_bounds(client: str | None = None) -> Iterator[Callable[[], None]]:
    """Hold a slot of `client`'s compile lane (default: the calling browser's) and bound the
    work inside: it stops after COMPILE_TIMEOUT_S or when the current HTTP request's client
    leaves, raising CompileHalted. Yields the `check()` to run between stages."""
    from app.services.job_queue import COMPILE, client_id, job_slot, request_left
    from uol_core.backends.emit_limits import CompileStopped, compile_guard

    left = request_left()
    with job_slot(client or client_id(), "compile", COMPILE_WAIT_S, lane=COMPILE,
                  abandoned=left):
        try:
            with compile_guard(COMPILE_TIMEOUT_S, left) as check:
                yield check
        except CompileStopped as exc:  # past the stages now: an ordinary error for callers
            raise CompileHalted(str(exc)) from None


def compile_odl(odl: str, backend: str = "c", target: str = TARGET_DEFAULT,
                sizes: dict[str, int] | None = None, config: dict | None = None,
                client: str | None = None) -> CompileResult:
    """Parse, bind sizes, solve the knob space and emit; errors come back inside the result.

    Queued in `client`'s compile lane (default: the calling browser's, job_queue.client_id)
    and bounded in time; inside an HTTP request, stopped when its client leaves."""
    start = time.perf_counter()
    result = CompileResult(False, odl, backend, target, dict(sizes or {}))
    try:
        with compile_bounds(client) as check:
            if not sizes:
                sizes = default_sizes(odl)
            op, bound, src, knobs, explanation = emit(odl, backend, target, sizes, config, check)
            hidden_knobs = _unoffered(odl, backend, target, bound, dict(src.config), src.text)
    except Exception as exc:  # shown in the page: the Studio never crashes on bad input
        result.error = _describe(exc)
        result.error_line = int(getattr(exc, "line", 0) or 0)
        result.error_column = int(getattr(exc, "column", 0) or 0)
        result.seconds = time.perf_counter() - start
        return result
    result.ok = True
    result.op_name = op.name
    result.sizes = dict(bound)
    result.source = src.text
    result.lang = src.lang
    result.line_map = {int(k): int(v) for k, v in src.line_map.items() if v}
    result.config = dict(src.config)
    result.hidden_knobs = hidden_knobs
    hidden = {h["name"] for h in result.hidden_knobs}
    result.knobs = [k for k in knobs if k["name"] not in hidden]
    result.explanation = explanation
    result.seconds = time.perf_counter() - start
    return result


def _unoffered(odl: str, backend: str, target: str, sizes: dict[str, int], config: dict,
               text: str) -> list[dict]:
    """The space's knobs that change nothing in this kernel, and why. Where the backend names
    its knobs in the kernel text (Triton), each knob is re-emitted with its other legal values:
    one whose every value gives the same text (a row kernel's BLOCK sized from its row) is not
    offered. Re-emitting is cheap (milliseconds) and cached per config."""
    from uol_core.backends import get_backend

    space = knob_space.space_for(odl, backend, target, tuple(sorted(sizes.items())))
    if not space.hide_unused:
        return []
    tgt = _target(target)
    chosen = get_backend(backend, tgt)
    plan = chosen.plan(_parse(odl), sizes, tgt)
    return space.unoffered(config, text, lambda cfg: chosen.emit(plan, cfg).text)


def inert_knobs(odl: str, backend: str, target: str, sizes: dict[str, int],
                config: dict) -> frozenset[str]:
    """Names of the knobs that change nothing in the kernel of `config` (see _unoffered)."""
    from uol_core.backends import get_backend

    tgt = _target(target)
    chosen = get_backend(backend, tgt)
    plan = chosen.plan(_parse(odl), sizes, tgt)
    text = chosen.emit(plan, config).text
    return frozenset(h["name"] for h in _unoffered(odl, backend, target, sizes, config, text))


def knob_names(odl: str, backend: str, target: str, sizes: dict[str, int]) -> list[str]:
    """The knobs the Studio offers for this op, backend, target and sizes (their space's)."""
    from uol_core.odl.shapes import bind_sizes

    bound = bind_sizes(_parse(odl), sizes)
    return list(knob_space.space_for(odl, backend, target, tuple(sorted(bound.items()))).default)


def _describe(exc: Exception) -> str:
    """One readable message: OdlError keeps its hint, a refused or stopped compile says only
    why, others keep their type name."""
    from app.services.job_queue import JobRefused
    from uol_core import OdlError
    from uol_core.backends.emit_limits import EmissionLimit

    if isinstance(exc, (JobRefused, CompileHalted, EmissionLimit)):
        return str(exc)
    if isinstance(exc, OdlError):
        hint = f"\nhint: {exc.hint}" if exc.hint else ""
        return f"line {exc.line}, column {exc.column}: {exc.message}{hint}"
    return f"{type(exc).__name__}: {exc}"
