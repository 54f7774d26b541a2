"""Route an op to its C kernel: the first template row that recognises it and accepts it, else the
generic loop nests. The router is this table; a new template is one row."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from uol_core.backends.base import KernelSource
from uol_core.odl.ir import Op


@dataclass(frozen=True)
class Context:
    """What every row sees: bound sizes, the target, the request's knobs, the thread count."""

    sizes: Mapping[str, int]
    target: Any
    config: dict
    threads: int


@dataclass(frozen=True)
class Route:
    """One template: `plan` recognises the op (None: not this template), `emit` writes the
    kernel (None: declines these sizes or knobs). `direct_loads`: the template reads tensors
    straight from memory, so an op whose pad() read leaves its tensor at these sizes skips it
    (the generic path honours such reads on every axis; conv checks its spatial axes itself)."""

    name: str
    plan: Callable[[Op, Context], Any]
    emit: Callable[[Op, Any, Context], KernelSource | None]
    direct_loads: bool = True


@cache
def routes() -> tuple[Route, ...]:
    """The template rows, in the order they are tried."""
    # the templates load when the first op is emitted: importing the router (the runtime asks
    # it `whole_op_template`) stays cheap
    from uol_core.backends.c.attention import backward as c_attention_bwd
    from uol_core.backends.c.attention import forward as c_attention
    from uol_core.backends.c.conv import emitter as c_conv
    from uol_core.backends.c.gemm import bf16 as c_gemm_bf16
    from uol_core.backends.c.rows import emitter as c_rows
    from uol_core.backends.c.scan import emitter as c_scan

    return (
        Route("scan", lambda op, c: True if c_scan.scan_fits(op, c.sizes, c.threads) else None,
              lambda op, _, c: c_scan.emit(op, c.sizes, c.threads)),
        # bf16 GEMM: AMX, AVX512-BF16 or widened f32 (it recognises and declines by itself)
        Route("bf16_gemm", lambda op, c: True,
              lambda op, _, c: c_gemm_bf16.emit(op, c.sizes, c.target, c.config)),
        Route("rows", lambda op, c: c_rows.row_plan(op),
              lambda op, plan, c: c_rows.emit(op, plan, c.sizes, c.target, c.config)),
        Route("flash", lambda op, c: c_attention.flash_plan(op),
              lambda op, plan, c: c_attention.emit(op, plan, c.sizes, c.target, c.config)),
        # the derived gradient of attention: one flash backward kernel instead of S x T
        # intermediates (s, p, d_p, d_s) written and read by separate kernels
        Route("flash_backward", lambda op, c: c_attention_bwd.flash_grad_plan(op),
              lambda op, plan, c: c_attention_bwd.emit(op, plan, c.sizes, c.target, c.config)),
        Route("conv", lambda op, c: True,  # None unless a plain NCHW convolution
              lambda op, _, c: c_conv.emit(op, c.sizes, c.target, c.config), direct_loads=False),
    )


def whole_op_template(op: Op) -> bool:
    """Whether a template takes `op` as a whole (flash attention, forward or backward), which
    beats splitting a multi-statement op at its contractions into one kernel per group."""
    # the attention templates load when asked (see `routes`)
    from uol_core.backends.c.attention import backward as c_attention_bwd
    from uol_core.backends.c.attention import forward as c_attention

    return c_attention.flash_plan(op) is not None or c_attention_bwd.flash_grad_plan(op) is not None


def emit_any(op: Op, sizes: Mapping[str, int], target=None, config: Mapping | None = None) -> KernelSource:
    """The best C kernel this backend has for `op` at `sizes` (never refuses a valid op).
    The knob `generic` skips every template."""
    # the generic emitter loads when the first op is emitted (see `routes`)
    from uol_core.backends.c.loops import generic as c_generic
    from uol_core.odl.pad_reach import padded_escapes

    cfg = dict(config or {})
    threads = int(cfg.get("threads") or getattr(target, "cores", 0) or os.cpu_count() or 1)
    # an op that writes an output over an input runs on the generic path, which reads that
    # input through the output's pointer; the templates take their inputs as given
    if not cfg.get("generic") and not op.aliases:
        ctx = Context(sizes, target, cfg, threads)
        direct_loads_ok = not padded_escapes(op, sizes)
        for route in routes():
            if route.direct_loads and not direct_loads_ok:
                continue
            plan = route.plan(op, ctx)
            if plan is not None:
                src = route.emit(op, plan, ctx)
                if src is not None:
                    return src
    return c_generic.emit(op, sizes, target, {k: v for k, v in cfg.items()
                                              if k not in ("generic", "bq", "bk")})
