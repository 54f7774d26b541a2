"""What every C template shares to write its text: the line writer with its ODL line map, the
generator's version stamp, how a micro-kernel is declared, and the literal spellings of affine
index forms and float constants. Identifiers come from `names`; expressions from `expr`."""

from __future__ import annotations

from dataclasses import dataclass, field

from uol_core.backends.base import KernelSource
from uol_core.backends.c.text.names import index_id, size_id
from uol_core.odl.ir import Affine

GENERATOR_VERSION = "acg-c-3"
# How a register-tile micro-kernel is declared: a function of its own, never inlined. Inlined
# into the OpenMP body, gcc 12 kept some of the AVX2 6x16 tile's accumulators on the stack on
# an AVX-512 host (every FMA then waited on a reload and a store: 110 GFLOP/s at 2048^3, 226
# out of line, OpenBLAS's Haswell kernel 216); one call per kc-deep tile costs nothing
# measurable (AVX-512 6x64: 409 -> 413 GFLOP/s).
MICRO_KERNEL = "static __attribute__((noinline)) void"


def render_affine(form: Affine, dims: set[str]) -> str:
    """An affine index form in C: indices are loop locals, dimension symbols are constants."""
    parts = []
    for name, coeff in form.terms:
        ident = size_id(name) if name in dims else index_id(name)
        parts.append(ident if coeff == 1 else f"{coeff} * {ident}")
    if form.const or not parts:
        parts.append(str(form.const))
    return " + ".join(parts).replace("+ -", "- ")


def render_const(value: float, is_int: bool = False) -> str:
    """A float literal C reads exactly (9 significant digits round-trip f32); infinities (ODL's
    1e999, a -inf pad) are math.h's INFINITY."""
    if is_int:
        return f"{int(value)}.0f"
    if value != value or value in (float("inf"), float("-inf")):
        return "NAN" if value != value else ("INFINITY" if value > 0 else "(-INFINITY)")
    text = f"{value:.9g}"
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text + "f"


@dataclass
class CodeWriter:
    """Lines of C with, for each, the ODL line it implements (the kernel's line map)."""

    lines: list[str] = field(default_factory=list)
    odl: list[int] = field(default_factory=list)
    default_line: int = 0

    def emit(self, text: str, odl_line: int | None = None) -> None:
        """Append one or more lines, all mapped to `odl_line` (default: the op's line)."""
        for line in text.split("\n"):
            self.lines.append(line)
            self.odl.append(self.default_line if odl_line is None else odl_line)

    def source(self, entry: str, op_name: str, config: dict, meta: dict) -> KernelSource:
        line_map = {i + 1: line for i, line in enumerate(self.odl)}
        return KernelSource("\n".join(self.lines) + "\n", "c", entry, op_name, config,
                            line_map, meta)
