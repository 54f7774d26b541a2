"""What every backend produces: kernel source text with a map from its lines to ODL lines."""

from __future__ import annotations

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
