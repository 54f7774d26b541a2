"""The conv template's epilogue: a register tile's lanes through the fused expression into the
output, walking its vectors as the block's layout says (c/conv/tiles.py's driver calls it)."""

from __future__ import annotations

from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.plans.conv import ConvPlan

# How the store walks a tile's vectors: whole vectors of one output row each, or (flat) buffer
# positions p = row * WP + column, split at row ends, columns past OW and rows past the block
# being idle lanes. Each walk sets row y, column x0, `len` lanes to store and where they start
# (the walk's loop head, its close and the note the kernel's comment gives).
WHOLE_VECTORS = (
    "                for (int64_t v = 0; v < nv; ++v) {\n"
    "                    const int64_t {y} = y0 + (v0 + v) / VPR, x0 = (v0 + v) % VPR * LANES;\n"
    "                    const int64_t len = OW - x0 < LANES ? OW - x0 : LANES;\n"
    "                    const float *restrict lane = tile + (i * NV + v) * LANES;",
    "                }", "")
ROW_SEGMENTS = (
    "                for (int64_t v = 0; v < nv; ++v)\n"
    "                for (int64_t p = (v0 + v) * LANES, end = p + LANES; p < end;) {\n"
    "                    const int64_t row = p / WP, x0 = p % WP;\n"
    "                    const int64_t seg = WP - x0 < end - p ? WP - x0 : end - p;\n"
    "                    const int64_t len = row >= rows || x0 >= OW ? 0 : (OW - x0 < seg ? OW - x0 : seg);\n"
    "                    const int64_t {y} = y0 + row;\n"
    "                    const float *restrict lane = tile + (i * NV + v) * LANES + (p - (v0 + v) * LANES);",
    "                    p += seg;\n                }", ", row segment by row segment")


# A flat block whose buffer rows are as long as the output's (WP == OW, no window columns) holds
# its pixels in output order: vector v is one store at the block's pixel (v0 + v) * LANES, the
# block's last one masked, and the column index runs past OW into the next rows (x0 + j with
# y = y0 is the same row-major address). Two masked passes per vector otherwise, as a 16-lane
# vector of 14-pixel rows spans two rows.
CONTIGUOUS = (
    "                for (int64_t v = 0; v < nv; ++v) {\n"
    "                    const int64_t {y} = y0, x0 = (v0 + v) * LANES;\n"
    "                    const int64_t len = rows * OW - x0 < LANES ? rows * OW - x0 : LANES;\n"
    "                    const float *restrict lane = tile + (i * NV + v) * LANES;",
    "                }", ", vector by vector in output order")


def store_tile(w: CodeWriter, plan: ConvPlan, ys: list[int], value: str, uses_x: bool,
                walk_close: tuple[str, str, str], line: int, free_filter: bool = True,
                per_channel: bool = False) -> None:
    """The epilogue: the tile's lanes through `value` into the output, walking the tile's
    vectors as `walk_close` says, then the region's end (freeing the packed filter when the
    entry allocated it)."""
    b, m, y = index_id(plan.b), index_id(plan.m), index_id(plan.y)
    walk, close, note = walk_close
    # The walk below stores a vector's lanes in masked passes where a row ends inside it (a
    # flat tile's vector spans two rows: two passes), and gcc 12 leaves a masked pass whose
    # epilogue calls a function scalar ("no vectype for .MASK_LOAD"). An epilogue that reads
    # only the channel's values (bias, activation) runs once over the tile's whole vectors
    # instead, unmasked and vectorised, and the walk copies. SiLU after 14x14 convolutions of
    # EfficientNet-B0: 1x1 expansions 0.57 -> 0.28 ms, the whole model 19.3 -> 11.4 ms.
    w.emit(f"            /* epilogue: {plan.out}[{plan.b}, {plan.m}, {plan.y}, {plan.xw}] from "
           f"the tile{note} */\n"
           "            for (int64_t i = 0; i < MR && panel * MR + i < MDIM; ++i) {\n"
           f"                const int64_t {m} = panel * MR + i;", line)
    if per_channel:
        w.emit("                float *restrict row_tile = tile + i * NV * LANES;\n"
               "#pragma omp simd\n"
               "                for (int64_t j = 0; j < NV * LANES; ++j) "
               f"{{ const float acc = row_tile[j]; row_tile[j] = {value}; }}", line)
    w.emit(walk.replace("{y}", y) + "\n"
           f"                    float *restrict yrow = {tensor_id(plan.out)} + {b} * {ys[0]} + "
           f"{m} * {ys[1]} + {y} * {ys[2]} + x0;", line)
    column = f" const int64_t {index_id(plan.xw)} = x0 + j;" if uses_x else ""
    body = ("{ yrow[j] = lane[j]; }" if per_channel
            else f"{{ const float acc = lane[j];{column} yrow[j] = {value}; }}")
    # Both loops run LANES times, so each compiles to whole vectors: a whole vector's lanes
    # unmasked, a short one's under a mask. A loop of `len` trips instead is a memcpy to gcc
    # when the epilogue is the sum itself, and a `rep movs` copy of 12 floats took a fifth of
    # a depthwise convolution.
    w.emit("                    if (len == LANES) {\n"
           "#pragma omp simd\n"
           f"                        for (int64_t j = 0; j < LANES; ++j) {body}\n"
           "                    } else {\n"
           "#pragma omp simd\n"
           f"                        for (int64_t j = 0; j < LANES; ++j) if (j < len) {body}\n"
           f"                    }}\n{close}\n            }}\n        }}\n    }}", line)
    w.emit("    free(buf);\n    }\n" + ("    free(Ap);\n}" if free_filter else "}"), line)
