"""Halo handling for padded reads (`pad(X[h + r - 1, ...], 0)`): copy the input once into a
buffer with margins filled with the pad value, so every read in the hot loops is an
unconditional affine load that gcc vectorises (instead of a bounds test per element)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from uol_core.backends.c.text.names import halo_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.check import index_range, stmt_extents
from uol_core.odl.ir import Access, Affine, DType, Op, walk

HaloKey = tuple[str, float]  # (input tensor, pad value)


def halo_margins(op: Op, sizes: Mapping[str, int]) -> dict[HaloKey, list[tuple[int, int]]]:
    """Per padded input and pad value: (low, high) margin of each axis that the reads reach."""
    inputs = {d.name for d in op.inputs}
    found: dict[HaloKey, list[tuple[int, int]]] = {}
    extents: dict[HaloKey, list[int]] = {}
    for i, stmt in enumerate(op.stmts):
        ext = stmt_extents(op, i)
        env = {n: Affine.constant(f.evaluate(dict(sizes))) for n, f in ext.free.items()}
        for red in ext.reductions.values():
            env.update({n: Affine.constant(f.evaluate(dict(sizes))) for n, f in red.items()})
        for node in walk(stmt.expr):
            if not (isinstance(node, Access) and node.pad is not None and node.tensor in inputs):
                continue
            shape = [f.evaluate(dict(sizes)) for f in op.tensor(node.tensor).shape]
            extents[(node.tensor, float(node.pad))] = shape
            margins = found.setdefault((node.tensor, float(node.pad)), [(0, 0)] * len(shape))
            for p, form in enumerate(node.indices):
                low, high = index_range(form, {k: v for k, v in env.items() if k in form.symbols})
                lo, hi = low.evaluate(dict(sizes)), high.evaluate(dict(sizes))
                margins[p] = (max(margins[p][0], -lo), max(margins[p][1], hi - (shape[p] - 1)))
    # A margin half as wide as its axis or more (a concatenation's operand, read once at an
    # offset) makes a buffer that is a third pad or more: filling it costs a pass over memory
    # and fresh pages for reads the bounds test answers without a load. Those, and huge
    # buffers, keep the test; a stencil's margin of a few elements pays for its copy.
    return {k: m for k, m in found.items()
            if math.prod(a + b + 1 for a, b in m) < 1 << 26
            and all(2 * max(lo, hi) < extent for (lo, hi), extent in zip(m, extents[k]))}


def halo_name(key: HaloKey, keys: list[HaloKey]) -> str:
    """C identifier of a halo copy (from the IR tensor name and its position)."""
    return halo_id(key[0], keys.index(key))


def halo_shape(shape: list[int], margins: list[tuple[int, int]]) -> list[int]:
    return [n + lo + hi for n, (lo, hi) in zip(shape, margins)]


def emit_halo_copies(w: CodeWriter, op: Op, shapes: Mapping[str, tuple[int, ...]], ctype,
                     halos: dict[HaloKey, list[tuple[int, int]]], threads: int) -> None:
    """Allocate and fill each halo buffer: pad value outside, the input inside (one pass).

    Row by row along the last axis: a row's place is found by division once, then its low
    margin, interior (a copy of the input's row) and high margin are three vector loops. (Per
    element, four 64-bit divisions cost more than the stencil after it: a 7x7 depthwise
    convolution's 3.5 MB copy took most of its 3.4 ms.)"""
    keys = list(halos)
    for key in keys:
        name, pad = key
        shape, margins = list(shapes[name]), halos[key]
        big = halo_shape(shape, margins)
        buf, elem = halo_name(key, keys), ctype(name)
        line = op.tensor(name).line
        value = _stored_pad(op.tensor(name).dtype, elem, pad)
        (low, high), last, width = margins[-1], shape[-1], big[-1]
        w.emit(f"    {elem} *restrict {buf} = malloc(sizeof({elem}) * {math.prod(big)});", line)
        w.emit(f"    #pragma omp parallel for num_threads({threads}) schedule(static)\n"
               f"    for (int64_t q = 0; q < {math.prod(big[:-1])}; ++q) {{\n"
               + ("        int64_t rem = q, src = 0, inside = 1;" if len(shape) > 1 else
                  "        const int64_t src = 0, inside = 1;  /* one row: the whole tensor */"),
               line)
        stride = last
        for p in range(len(shape) - 2, -1, -1):
            w.emit(f"        {{ const int64_t x = rem % {big[p]} - {margins[p][0]}; rem /= {big[p]}; "
                   f"inside &= x >= 0 && x < {shape[p]}; src += x * {stride}; }}", line)
            stride *= shape[p]
        w.emit(f"        {elem} *restrict row = {buf} + q * {width};\n"
               f"        if (!inside) {{\n"
               f"            for (int64_t j = 0; j < {width}; ++j) row[j] = {value};\n"
               f"            continue;\n        }}\n"
               f"        for (int64_t j = 0; j < {low}; ++j) row[j] = {value};\n"
               f"        for (int64_t j = 0; j < {last}; ++j) row[{low} + j] = "
               f"{tensor_id(name)}[src + j];\n"
               f"        for (int64_t j = 0; j < {high}; ++j) row[{low + last} + j] = {value};\n"
               f"    }}", line)


def _stored_pad(dtype: DType, elem: str, pad: float) -> str:
    """The pad value as the buffer stores it: bf16 as its bit pattern (uint16_t), not as the
    integer the number converts to; infinities as math.h's INFINITY."""
    value = repr(pad).replace("inf", "INFINITY")
    if dtype == DType.bf16:
        return f"uol_bf16_store((float){value})"
    return f"({elem}){value}"


def halo_address(access: Access, key: HaloKey, keys: list[HaloKey], shape: list[int],
                 margins: list[tuple[int, int]], render_form) -> str:
    """Address of a padded read inside its halo buffer (indices shifted by the low margins)."""
    big = halo_shape(shape, margins)
    terms, stride = [], 1
    for p in range(len(shape) - 1, -1, -1):
        shift = f" + {margins[p][0]}" if margins[p][0] else ""
        terms.append(f"({render_form(access.indices[p])}{shift})" + (f" * {stride}" if stride > 1 else ""))
        stride *= big[p]
    return f"{halo_name(key, keys)}[{' + '.join(reversed(terms)) or '0'}]"
