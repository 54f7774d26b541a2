"""What every backend produces: kernel source text with a map from its lines to ODL lines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelSource:
    """Generated kernel text. `line_map` maps 1-based kernel lines to the ODL lines they implement."""

    text: str
    lang: str  # "c" or "triton"
    entry: str  # the function to call
    op_name: str
    config: dict = field(default_factory=dict)
    line_map: dict[int, int] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # argument order, grid, notes for the runner

    def odl_line(self, kernel_line: int) -> int | None:
        """The ODL line a kernel line implements, if any."""
        return self.line_map.get(kernel_line)


def into_given(outs: dict, out, source: KernelSource) -> dict:
    """Outputs computed into fresh tensors, copied into the caller's buffers where it gave some
    (`out`: one tensor for the first output, or a mapping name -> tensor or None)."""
    if out is None:
        return outs
    given = out if isinstance(out, Mapping) else {source.meta["outputs"][0]: out}
    for name, tensor in given.items():
        if tensor is not None:
            tensor.copy_(outs[name])
            outs[name] = tensor
    return outs


class DeclaredArgs:
    """What every compiled C kernel says about its arguments, native or emulated: `_args` is
    (name, torch dtype, shape) per entry argument, `_outputs` the same for the outputs."""

    _args: list
    _outputs: list

    def launch_args(self) -> list[tuple]:
        """Name, shape and dtype of every argument, in the order the entry takes them."""
        return [(name, shape, dtype) for name, dtype, shape in self._args]

    def outputs_like(self) -> dict:
        """Fresh output tensors of the declared shapes and dtypes."""
        import torch

        return {name: torch.empty(shape, dtype=dtype) for name, dtype, shape in self._outputs}
