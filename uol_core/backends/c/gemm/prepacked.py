"""B packed once: the GEMM variant whose B argument is already in the micro-kernel's panel layout.

Why: a graph's linear and projection weights are constant at inference, yet the GEMM templates
pack B on every call (the packed path once per thread and call; the direct path whenever a panel
serves several row strips). Packing them once, when the graph is planned, removes that copy from
every call, and at small M (one to a few rows, where the direct path reads B in place from rows
N floats apart) the kernel reads each panel as one contiguous stream instead.

The layout is the one both drivers read their packed panels in: for each KC-deep block of depth
(the last one kc = K - pc deep), the ceil(N / NR) panels of kc x NR floats side by side, columns
past N zero. Panel (pc, j) starts at pc * NPAD + j * kc, with NPAD = ceil(N / NR) * NR, so the
packed path's kc x NC block at column jc is the window from pc * NPAD + jc * kc (NC is a multiple
of NR). The packed tensor depends on the config's KC and NR only: `layout_key` names it.
"""

from __future__ import annotations

import torch

from uol_core.acg.config import TileConfig
from uol_core.backends.base import KernelSource
from uol_core.backends.c.gemm.emitter import emit_gemm
from uol_core.backends.c.platforms import platform
from uol_core.odl.ir import DType
from uol_core.plans.gemm import GemmPlan, epilogue_reads


class NotPrepackable(ValueError):
    """This GEMM's B cannot be packed ahead of the call (the reason says why)."""


def prepack_refusal(plan: GemmPlan, cfg: TileConfig) -> str | None:
    """Why B of `plan` cannot be packed ahead under `cfg`, or None when it can."""
    if plan.dtype != DType.f32:
        return f"B is {plan.dtype.name}: only f32 panels are packed ahead"
    if platform(cfg.isa).vla:
        return "the lane count of a scalable-vector ISA is known only at run time"
    if cfg.path not in ("packed", "direct"):
        return f"path {cfg.path} has no B panels"
    if cfg.nc % cfg.nr:
        return f"NC={cfg.nc} is not a multiple of NR={cfg.nr}"
    indices = [f.pure_symbol for f in plan.rhs.indices]
    if sorted(map(str, indices)) != sorted((plan.k, plan.n)):
        return "B is not a plain [K, N] or [N, K] matrix (batched, broadcast or affine indices)"
    if plan.rhs.tensor == plan.lhs.tensor or plan.rhs.tensor in {a.tensor for a in epilogue_reads(plan)}:
        return "B is read elsewhere in the kernel"
    if plan.rhs.tensor not in {d.name for d in plan.op.inputs}:
        return "B is not an input of the op"
    return None


def check_prepackable(plan: GemmPlan, cfg: TileConfig) -> None:
    """Raise NotPrepackable with the reason when `prepack_refusal` has one."""
    why = prepack_refusal(plan, cfg)
    if why:
        raise NotPrepackable(f"{plan.op.name}: {why}")


def layout_key(plan: GemmPlan, cfg: TileConfig) -> tuple:
    """What the packed tensor depends on: K, N, the block depth, the panel width, B's order."""
    return (plan.K, plan.N, cfg.kc, cfg.nr, _transposed(plan))


def _transposed(plan: GemmPlan) -> bool:
    return str(plan.rhs.indices[0].pure_symbol) == plan.n


def packed_numel(plan: GemmPlan, cfg: TileConfig) -> int:
    """Floats of the packed B: K rows of NPAD columns."""
    return plan.K * -(-plan.N // cfg.nr) * cfg.nr


def pack_b(weight: torch.Tensor, plan: GemmPlan, cfg: TileConfig) -> torch.Tensor:
    """B (as the op declares it, [K, N] or [N, K]) in the prepacked layout (module docstring)."""
    check_prepackable(plan, cfg)
    b = weight.detach().t() if _transposed(plan) else weight.detach()
    k, n = plan.K, plan.N
    if tuple(b.shape) != (k, n):
        raise NotPrepackable(f"{plan.op.name}: B has shape {tuple(weight.shape)}, the kernel "
                             f"reads {k} x {n}")
    npad = -(-n // cfg.nr) * cfg.nr
    padded = torch.zeros(k, npad, dtype=torch.float32)
    padded[:, :n] = b
    out = torch.empty(packed_numel(plan, cfg), dtype=torch.float32)
    for pc in range(0, k, cfg.kc):
        kc = min(cfg.kc, k - pc)
        block = padded[pc:pc + kc].reshape(kc, npad // cfg.nr, cfg.nr).transpose(0, 1)
        out[pc * npad:(pc + kc) * npad].view(npad // cfg.nr, kc, cfg.nr).copy_(block)
    return out


def emit_prepacked(plan: GemmPlan, cfg: TileConfig, target) -> KernelSource:
    """The kernel that reads B's argument as `pack_b`'s output (same entry and arguments)."""

    return emit_gemm(plan, cfg, target, prepacked_b=True)


__all__ = ["NotPrepackable", "check_prepackable", "emit_prepacked", "layout_key", "pack_b",
           "packed_numel", "prepack_refusal"]
