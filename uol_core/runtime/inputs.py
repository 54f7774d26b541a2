"""Random inputs for an op at concrete sizes, typed as its declarations say."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from uol_core.odl.ir import DType, Op, retyped
from uol_core.odl.shapes import shape_of
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all


def random_inputs(op: Op, sizes: Mapping[str, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Normal floats, small integers in [0, last dim) (usable as class labels), random booleans."""
    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for decl in op.inputs:
        shape = shape_of(op, decl.name, sizes)
        if decl.dtype.is_float:
            value = torch.randn(shape, generator=gen, dtype=torch.float32)
        elif decl.dtype == DType.bool:
            value = torch.rand(shape, generator=gen) < 0.5
        else:
            high = max(min(sizes.values(), default=2), 2)
            value = torch.randint(0, high, shape, generator=gen)
        tensors[decl.name] = value.to(TORCH_DTYPES[decl.dtype])
    return tensors


def random_inputs_in_domain(op: Op, sizes: Mapping[str, int],
                            seed: int = 0) -> dict[str, torch.Tensor]:
    """`random_inputs`, redrawn inside the op's domain where normal samples leave it.

    log, sqrt, rsqrt, logit or a pow with a negative base give NaN or inf on normal samples;
    then every float input is drawn from (0.1, 0.9), inside each of those domains. The check
    evaluates the op once in f64 on the reference evaluator: meant for small sizes (tests,
    gradient checks), not for timing runs.
    """

    tensors = random_inputs(op, sizes, seed)
    wide = {k: v.double() if v.is_floating_point() else v for k, v in tensors.items()}
    outputs = evaluate_all(retyped(op, DType.f64), wide)
    if all(bool(t.isfinite().all()) for t in outputs.values() if t.is_floating_point()):
        return tensors
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.rand(v.shape, generator=gen) * 0.8 + 0.1).to(v.dtype)
            if v.is_floating_point() else v for k, v in tensors.items()}
