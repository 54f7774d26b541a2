"""C backend: the entry that renders the operator IR to C.

A single-GEMM contraction goes to the BLIS-style template (`gemm/`); every other op to the
router (`route`), whose table of templates (`attention/`, `conv/`, `rows/`, `scan/`) falls back
to the generic loop nests (`loops/`). What every template shares to write text sits in `text/`:
the line writer, one expression renderer (`text/expr`), and one mangler through which every
identifier in the C text comes from the IR, never from raw user text (`text/names`: tensor `X`
-> `t_X`, index `m` -> `i_m`, size `M` -> `D_M`). Vector operations are spelled by the ISA's
platform file (`platforms/`).
"""

from __future__ import annotations

from collections.abc import Callable

from uol_core.backends.base import KernelSource


def _emit_contraction(plan, config, target) -> KernelSource:
    # a template loads when its first kernel is emitted: importing this entry stays cheap
    from uol_core.backends.c.gemm.emitter import emit_gemm
    return emit_gemm(plan, config, target)


def _emit_pattern(op, sizes, config, target) -> KernelSource:
    # the router and its templates load when the first pattern kernel is emitted
    from uol_core.backends.c.route import emit_any
    return emit_any(op, sizes, target, config)


# Pattern kind -> emitter. The contraction row takes (GemmPlan, TileConfig, target); the others
# take (op, sizes, config dict, target) and pick a template (flash, scan) or the generic path.
PATTERN_EMITTERS: dict[str, Callable] = {"contraction": _emit_contraction, "map": _emit_pattern,
                                         "reduce": _emit_pattern, "stencil": _emit_pattern,
                                         "scan": _emit_pattern}


def emit(op, config, target, sizes) -> KernelSource:
    """The C kernel of `op` for bound `sizes`: a TileConfig builds the GEMM, a dict the rest."""
    # loaded with the first kernel, as the templates are: importing this entry stays cheap
    from uol_core.backends.emit_limits import check_op_size, check_source_size
    from uol_core.odl.patterns import classify
    from uol_core.plans.gemm import UnsupportedOp, lower_contraction

    check_op_size(op)
    kind = classify(op).kind
    source = None
    if kind == "contraction" and not isinstance(config, dict):
        try:
            plan = lower_contraction(op, sizes)
        except UnsupportedOp:  # conv, attention, several GEMMs: flash or generic kernels
            plan = None
        if plan is not None:
            source = PATTERN_EMITTERS[kind](plan, config, target)
    if source is None:
        source = _emit_pattern(op, sizes, config if isinstance(config, dict) else None, target)
    check_source_size(op.name, source.text)
    return source
