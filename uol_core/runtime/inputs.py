"""Random inputs for an op at concrete sizes, typed as its declarations say."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from uol_core.odl.ir import DType, Op
from uol_core.runtime.reference import TORCH_DTYPES
from uol_core.runtime.shapes import shape_of


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
