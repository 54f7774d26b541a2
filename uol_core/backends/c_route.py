"""Route an op to its C kernel: a pattern template when one matches, else the generic loop nests."""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.base import KernelSource
from uol_core.odl.ir import Op


def whole_op_template(op: Op) -> bool:
    """Whether a template takes `op` as a whole (flash attention, forward or backward), which
    beats splitting a multi-statement op at its contractions into one kernel per group."""
    from uol_core.backends import c_attention, c_attention_bwd

    return c_attention.flash_plan(op) is not None or c_attention_bwd.flash_grad_plan(op) is not None


def emit_any(op: Op, sizes: Mapping[str, int], target=None, config: Mapping | None = None) -> KernelSource:
    """The best C kernel this backend has for `op` at `sizes` (never refuses a valid op).

    A pad() read that leaves its tensor at these sizes is honoured by the generic path on every
    axis and by the conv template on its spatial axes only (it checks that itself); the scan,
    row and flash templates load memory directly, so such an op skips them."""
    import os

    from uol_core.backends import c_attention, c_attention_bwd, c_conv, c_generic, c_rows, c_scan
    from uol_core.odl.pad_reach import padded_escapes

    cfg = dict(config or {})
    threads = int(cfg.get("threads") or getattr(target, "cores", 0) or os.cpu_count() or 1)
    direct_loads_ok = not padded_escapes(op, sizes)
    if not cfg.get("generic") and direct_loads_ok:
        if c_scan.scan_fits(op, sizes, threads):
            return c_scan.emit(op, sizes, threads)
        rows = c_rows.row_plan(op)
        if rows is not None:
            src = c_rows.emit(op, rows, sizes, target, cfg)
            if src is not None:
                return src
        flash = c_attention.flash_plan(op)
        if flash is not None:
            src = c_attention.emit(op, flash, sizes, target, cfg)
            if src is not None:
                return src
        # The derived gradient of attention: one flash backward kernel instead of S x T
        # intermediates (s, p, d_p, d_s) written and read by separate kernels.
        grad = c_attention_bwd.flash_grad_plan(op)
        if grad is not None:
            src = c_attention_bwd.emit(op, grad, sizes, target, cfg)
            if src is not None:
                return src
    if not cfg.get("generic"):
        conv = c_conv.emit(op, sizes, target, cfg)  # None unless a plain NCHW convolution
        if conv is not None:
            return conv
    return c_generic.emit(op, sizes, target, {k: v for k, v in cfg.items()
                                              if k not in ("generic", "bq", "bk")})
