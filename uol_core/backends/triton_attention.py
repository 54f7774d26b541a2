"""Flash-style fused attention kernel (online softmax) recognised from multi-statement ODL."""

from __future__ import annotations


def flash_plan(op):
    return None


def emit_flash(op, plan, cfg):
    raise NotImplementedError
