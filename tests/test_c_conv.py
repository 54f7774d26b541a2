"""Convolution template (uol_core/backends/c/conv/emitter.py): chosen for conv2d, declines what it does not
match, verified against the reference at odd shapes; golden file updated with --update-golden."""

from __future__ import annotations

import pytest
import torch

from uol_core import compile as uol_compile
from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.conv import emitter as c_conv
from uol_core.backends.c.conv.depthwise import depthwise_plan
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.route import emit_any
from uol_core.graph import aten_map
from uol_core.odl import parse
from uol_core.odl.inline import inline_maps
from uol_core.ops import load_op
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.runtime.verify import compare

TARGET = fixed_target()


def check(op, sizes, config=None):
    kernel = compile_c(op, sizes, TARGET, config or {"threads": 2})
    inputs = random_inputs(op, kernel.sizes, seed=7)
    verdict = compare(kernel.run(inputs), evaluate_all(op, inputs), kernel.src.meta["reduction_length"])
    assert verdict.ok, f"{op.name} at {sizes}: {verdict}"
    return kernel


CASES = [
    ("conv2d", {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7, "R": 3, "S": 3}),
    ("conv2d_pad1", {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7}),
    ("conv2d", {"N": 1, "C": 1, "K": 1, "H": 1, "W": 1, "R": 1, "S": 1}),
    ("conv2d_pad1", {"N": 1, "C": 1, "K": 1, "H": 1, "W": 1}),
    ("conv2d_pad1", {"N": 2, "C": 5, "K": 13, "H": 11, "W": 17}),
    ("conv2d", {"N": 3, "C": 7, "K": 11, "H": 13, "W": 5, "R": 5, "S": 2}),
    ("conv2d_bias_relu", {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7, "R": 3, "S": 3}),
    ("conv2d_bias_relu", {"N": 2, "C": 37, "K": 17, "H": 9, "W": 31, "R": 5, "S": 3}),  # KDIM > KC
]


@pytest.mark.parametrize("name,sizes", CASES, ids=[f"{n}-{'x'.join(map(str, s.values()))}"
                                                  for n, s in CASES])
def test_template_matches_reference(name, sizes):
    kernel = check(load_op(name), sizes)
    assert kernel.src.meta["generator"] == c_conv.GENERATOR


def test_one_thread_and_pad_value():
    op = parse("op cpad(X: f32[N, C, H, W], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
               "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0.5)"
               " * F[k, c, r, s])\n")
    kernel = check(op, {"N": 2, "C": 3, "K": 7, "H": 5, "W": 11}, {"threads": 1})
    assert kernel.src.meta["generator"] == c_conv.GENERATOR


def test_template_is_chosen_for_conv2d_and_maps_lines():
    op = load_op("conv2d_pad1")
    src = emit_any(op, {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7}, TARGET, {"threads": 2})
    assert src.meta["generator"] == c_conv.GENERATOR
    assert set(src.line_map.values()) <= {op.line, op.stmts[0].line}
    assert op.stmts[0].line in set(src.line_map.values())
    assert len(src.line_map) == len(src.text.splitlines())


def test_declines_depthwise_and_dilated_takes_strided():
    assert c_conv.conv_plan(load_op("depthwise_conv2d")) is None  # the depthwise plan's
    # one 3-wide row: under half of its vector, and no rows to run end to end
    sizes = {"N": 1, "C": 3, "H": 3, "W": 5, "R": 3, "S": 3}
    kernel = check(load_op("depthwise_conv2d"), sizes)
    assert kernel.src.meta["generator"] != c_conv.GENERATOR
    strided = parse("op cs(X: f32[N, C, 2 * H + 2, W + 2], F: f32[K, C, 3, 3]) -> "
                    "Y: f32[N, K, H, W]:\n"
                    "    Y[n, k, h, w] = sum[c, r, s](X[n, c, 2 * h + r, w + s] * F[k, c, r, s])\n")
    dilated = parse("op cd(X: f32[N, C, H + 4, W + 4], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
                    "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + 2 * r, w + 2 * s] * F[k, c, r, s])\n")
    assert c_conv.conv_plan(dilated) is None
    plan = c_conv.conv_plan(strided)  # strided windows: the im2col path (tests/test_c_conv_strided.py)
    assert plan is not None and (plan.stride_y, plan.stride_x) == (2, 1)
    assert c_conv.conv_plan(load_op("matmul")) is None


def test_generic_flag_keeps_the_loop_nests():
    src = emit_any(load_op("conv2d"), {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7, "R": 3, "S": 3},
                   TARGET, {"threads": 2, "generic": 1})
    assert src.meta.get("generator") != c_conv.GENERATOR


def test_conv_template_golden(golden):
    text = emit_any(load_op("conv2d_bias_relu"),
                    {"N": 2, "C": 3, "K": 5, "H": 9, "W": 7, "R": 3, "S": 3}, TARGET,
                    {"threads": 2}).text
    golden("c/pattern_conv_template.c", text)


def test_conv_im2col_golden(golden):
    # 3 images of 9x2 output pixels: the im2col path, blocks of the batch's pixels
    text = emit_any(load_op("conv2d_bias_relu"),
                    {"N": 3, "C": 4, "K": 6, "H": 11, "W": 4, "R": 3, "S": 3}, TARGET,
                    {"threads": 2}).text
    assert "im2col" in text
    golden("c/pattern_conv_im2col.c", text)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_direct_and_im2col_paths_both_verify(threads):
    # wide rows take the direct path (row buffer, vectors of output pixels); rows narrower
    # than half a vector keep im2col panels; odd channel counts leave partial register tiles
    wide = check(load_op("conv2d_pad1"), {"N": 2, "C": 5, "K": 9, "H": 10, "W": 29},
                 {"threads": threads})
    assert "direct" in wide.src.meta["fusion"]
    narrow = check(load_op("conv2d_pad1"), {"N": 3, "C": 4, "K": 6, "H": 9, "W": 2},
                   {"threads": threads})
    assert "im2col" in narrow.src.meta["fusion"]
    rows = check(load_op("conv2d_pad1"), {"N": 1, "C": 3, "K": 5, "H": 13, "W": 8},
                 {"threads": threads, "chunk": 4})  # rows per work item from the config
    assert "direct" in rows.src.meta["fusion"]


CHAIN = ("op chain(X: f32[N, C, H, W], F: f32[K, C, 3, 3], b: f32[K], R: f32[N, K, H, W]) -> "
         "Y: f32[N, K, H, W]:\n"
         "    z[n: N, k: K, h: H, w: W] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0)"
         " * F[k, c, r, s]) + b[k]\n"
         "    a[n: N, k: K, h: H, w: W] = z[n, k, h, w] + R[n, k, h, w]\n"
         "    Y[n, k, h, w] = relu(a[n, k, h, w])\n")


def test_a_conv_followed_by_maps_of_its_result_takes_the_template():
    # the graph's fusion of conv, bias, a residual add and relu: one statement with an epilogue
    op = parse(CHAIN)
    one = inline_maps(op)
    assert len(one.stmts) == 1 and one.locals == () and one.outputs == op.outputs
    assert c_conv.conv_plan(one) is not None
    for sizes in ({"N": 2, "C": 5, "K": 9, "H": 10, "W": 29}, {"N": 3, "C": 4, "K": 6, "H": 9, "W": 2}):
        assert check(op, sizes).src.meta["generator"] == c_conv.GENERATOR


def test_maps_stay_apart_where_folding_would_repeat_or_misplace_work():
    # a reduction read twice would be computed twice (silu: z * sigmoid(z))
    twice = parse(CHAIN.replace("relu(a[n, k, h, w])", "a[n, k, h, w] * z[n, k, h, w]"))
    # a local read at another element (a shifted read) is not a map of the same element
    shifted = parse(CHAIN.replace("relu(a[n, k, h, w])", "relu(pad(a[n, k, h, w - 1], 0))"))
    for op in (twice, shifted):
        assert inline_maps(op) is op
        check(op, {"N": 1, "C": 3, "K": 5, "H": 6, "W": 20})  # the generic path, still right


DEPTHWISE = [  # op, sizes, config, whether the window slides down whole rows
    ("depthwise_conv2d", {"N": 2, "C": 5, "H": 9, "W": 13, "R": 3, "S": 3}, None, True),
    ("depthwise_conv2d", {"N": 1, "C": 3, "H": 12, "W": 40, "R": 5, "S": 2}, None, False),
    # padded 7x7 with bias (convnext), a short last tile and several row blocks
    (CONVNEXT := ("op dw(X: f32[N, C, H, W], F: f32[C, 1, 7, 7], b: f32[C]) -> Y: f32[N, C, H, W]:\n"
                  "    Y[n, k, h, w] = relu(sum[r, s](pad(X[n, k, h + r - 3, w + s - 3], 0.5)"
                  " * F[k, 0, r, s]) + b[k])\n"), {"N": 2, "C": 3, "H": 17, "W": 28}, None, False),
    (CONVNEXT, {"N": 1, "C": 2, "H": 9, "W": 20}, {"threads": 3, "nv": 5}, False),
    (CONVNEXT, {"N": 1, "C": 2, "H": 11, "W": 13}, {"threads": 3, "slide": 3}, True),  # 3+3+3+2
    (CONVNEXT, {"N": 2, "C": 3, "H": 7, "W": 24}, None, True),
    ("depthwise_conv2d", {"N": 2, "C": 5, "H": 9, "W": 13, "R": 3, "S": 3}, {"slide": 0}, False),
]


@pytest.mark.parametrize("op, sizes, config, sliding", DEPTHWISE, ids=[
    "valid", "5x2", "7x7-pad", "7x7-nv5", "7x7-slide3", "7x7-slide", "valid-slide0"])
def test_a_depthwise_convolution_takes_the_direct_path(op, sizes, config, sliding):
    # AVX2 (8 lanes, a bound of 6 accumulators): rows of up to 3 vectors slide the window down
    # whole rows unless the config asks for vectors in a row (nv=5, slide=0); every form verifies
    op = parse(op) if "\n" in op else load_op(op)
    assert c_conv.conv_plan(op) is None and depthwise_plan(op) is not None
    kernel = check(op, sizes, {"threads": 2, **(config or {})})
    fusion = kernel.src.meta["fusion"]
    assert kernel.src.meta["generator"] == c_conv.GENERATOR and "depthwise" in fusion
    assert ("sliding" in fusion) == sliding and ("1x" in fusion) != sliding, fusion
    if (config or {}).get("slide"):
        assert f"down {config['slide']} output rows" in fusion


def test_a_depthwise_convolution_matches_torch():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(6, 6, 7, padding=3, groups=6)
    x = torch.randn(2, 6, 14, 21)
    text, _ = aten_map.conv2d(tuple(x.shape), tuple(conv.weight.shape), True, (1, 1), (3, 3), (1, 1), 6)
    shapes = {"X": tuple(x.shape), "F": tuple(conv.weight.shape), "b": (6,)}
    kernel = uol_compile(parse(text), shapes=shapes, backend="c")  # the host's ISA
    assert "depthwise" in kernel.source
    with torch.no_grad():
        torch.testing.assert_close(kernel(X=x, F=conv.weight, b=conv.bias), conv(x), rtol=1e-5, atol=1e-5)


def test_depthwise_template_golden(golden):
    op = parse(DEPTHWISE[2][0])
    golden("c/pattern_conv_depthwise.c", emit_any(op, {"N": 2, "C": 3, "H": 17, "W": 28}, TARGET,
                                                   {"threads": 2}).text)


@pytest.mark.parametrize("width, flat", [(28, True), (13, True), (29, True), (16, False), (30, False)])
def test_rows_end_to_end_where_whole_vectors_would_idle_more_lanes(width, flat):
    # AVX2 (8 lanes), a 3-wide window: a 28-pixel row is 30 buffer lanes end to end, 32 as
    # whole vectors; 16 is exactly two vectors, 30 (+2) would need 32 either way
    op = parse("op cbr(X: f32[N, C, H, W], F: f32[K, C, 3, 3], b: f32[K]) -> Y: f32[N, K, H, W]:\n"
               "    Y[n, k, h, w] = relu(sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0)"
               " * F[k, c, r, s]) + b[k] + 0.001 * w)\n")
    kernel = check(op, {"N": 2, "C": 5, "K": 9, "H": 11, "W": width}, {"threads": 3})
    assert ("end to end" in kernel.src.meta["fusion"]) == flat, kernel.src.meta["fusion"]


def test_flat_rows_and_depthwise_planes_stay_in_their_buffers():
    # the flat path's last vectors read up to LANES + S - 2 floats past a block's rows: each
    # plane carries that tail, zeroed; the sanitizers see any read past the allocation
    from profilers.sanitizer import sanitize_op

    for name, sizes in (("conv2d_pad1", {"N": 2, "C": 3, "K": 5, "H": 7, "W": 13}),
                        ("depthwise_conv2d", {"N": 2, "C": 3, "H": 9, "W": 30, "R": 3, "S": 3})):
        report = sanitize_op(name, sizes)
        assert report.clean, (name, report.findings[:2])


def _busy_lanes(t, oh: int, ow: int) -> float:
    """Output pixels per lane the direct path computes (whole tiles of NV vectors per block)."""
    tiles = 0
    for y0 in range(0, oh, t.rb):
        rows = min(t.rb, oh - y0)
        vectors = -(-((rows - 1) * t.wp + ow) // t.lanes) if t.flat else rows * t.vpr
        tiles += -(-vectors // t.nv)
    return oh * ow / (tiles * t.nv * t.lanes)


def test_row_blocks_keep_lanes_busy_and_every_thread_fed():
    # resnet's 28x28 3x3 conv on AVX-512: blocks of 3 rows (the fewest that fill whole 8x3
    # tiles) keep 84 of 96 lanes busy; the modelled choice keeps more, and a single image
    # still splits into a block per thread
    from uol_core.backends.c.conv.tiles import row_tiles

    dims = {"cdim": 64, "oh": 28, "ow": 28, "rdim": 3, "sdim": 3, "mdim": 64, "threads": 2}
    three = row_tiles("avx512", 16, TARGET, {"chunk": 3}, {**dims, "nb": 8})
    for nb in (8, 1):
        chosen = row_tiles("avx512", 16, TARGET, {}, {**dims, "nb": nb})
        assert _busy_lanes(chosen, 28, 28) > _busy_lanes(three, 28, 28) + 0.03, chosen
        assert nb * chosen.nrb >= 2, chosen
    kernel = check(load_op("conv2d_pad1"), {"N": 1, "C": 4, "K": 9, "H": 11, "W": 13},
                   {"threads": 2, "chunk": 4})  # a ragged last block (11 = 4 + 4 + 3)
    assert "4 output rows per item" in kernel.src.meta["fusion"]


def test_a_small_plane_takes_the_register_tile_that_idles_fewer_lanes():
    # EfficientNet's 1x1 convolutions read in place on AVX-512: a 7x7 plane's 49 pixels fill
    # 3 vectors of 16 and a 4th by one lane; 8 x 3 tiles compute 6 vectors for them, the
    # platform's others 4. A 56x56 plane fills whole vectors: the first tile stays.
    from uol_core.backends.c.conv.tiles import direct_tiles, row_tiles

    first, *others = direct_tiles("avx512")
    assert first == ((8, 3), 1.0) and others and all(0.5 < speed <= 1 for _, speed in others)

    def dims(side: int) -> dict:
        return {"cdim": 192, "oh": side, "ow": side, "rdim": 1, "sdim": 1, "mdim": 1152, "nb": 1,
                "threads": 2, "ih": side, "iw": side, "in_place": True}

    small = row_tiles("avx512", 16, TARGET, {}, dims(7))
    pinned = row_tiles("avx512", 16, TARGET, {"mr": 8, "nv": 3}, dims(7))
    assert (small.mr, small.nv) != (8, 3) and _busy_lanes(small, 7, 7) > _busy_lanes(pinned, 7, 7)
    assert small.choice.startswith("the least modelled time of 8x3, ") and pinned.choice == ""
    large = row_tiles("avx512", 16, TARGET, {}, dims(56))
    assert (large.mr, large.nv) == (8, 3)
    assert (row_tiles("avx2", 8, TARGET, {}, dims(7)).choice) == ""  # one tile on AVX2


@pytest.mark.parametrize("isa", ["avx2", "avx512", "neon"])
def test_every_direct_tile_fits_the_register_file(isa):
    # MR x NV accumulators, NV input vectors and one broadcast filter value live in registers
    # for the whole reduction: a tile past the ISA's register file would spill every step
    from types import SimpleNamespace

    from uol_core.acg.config import vector_registers
    from uol_core.backends.c.conv.tiles import direct_tiles

    registers = vector_registers(isa, SimpleNamespace(vector_registers=64))
    for (mr, nv), _speed in direct_tiles(isa):
        assert mr * nv + nv + 1 <= registers, (isa, mr, nv, registers)


@pytest.mark.parametrize("sizes", [{"N": 5, "C": 3, "K": 7, "H": 6, "W": 3},
                                   {"N": 2, "C": 6, "K": 17, "H": 3, "W": 2}])
def test_im2col_blocks_span_images_and_the_epilogue_finds_each_pixel(sizes):
    # narrow outputs (18 and 6 pixels an image; AVX2 micro-panels of 16): a block of the
    # batch's pixels crosses images, and the epilogue reads the residual of each pixel's own
    # image and its column
    op = parse(CHAIN.replace("Y[n, k, h, w] = relu(a[n, k, h, w])",
                             "Y[n, k, h, w] = relu(a[n, k, h, w]) + 0.01 * w + 0.001 * n"))
    kernel = check(op, sizes, {"threads": 2})
    assert "im2col" in kernel.src.meta["fusion"] and "pixels of the batch" in kernel.src.meta["fusion"]


def test_pixel_blocks_keep_both_threads_fed():
    from uol_core.backends.c.conv.im2col import pixel_block

    # resnet's last stage: 8 images of 7x7 = 392 pixels in 13 panels of 32
    assert pixel_block(392, 32, 4, 2) == 96  # blocks of 3 panels: 7 panels to one thread, 6
    assert pixel_block(49, 32, 4, 2) == 32  # one image: a panel per thread, not one block of 2
    assert pixel_block(49, 32, 4, 1) == 64


POINTWISE_RESIDUAL = (  # a 1x1 projection with bias, a residual add and relu, as a graph fuses it
    "op pw(X: f32[N, C, H, W], F: f32[K, C, 1, 1], b: f32[K], R: f32[N, K, H, W])"
    " -> Y: f32[N, K, H, W]:\n"
    "    Y[n, k, h, w] = relu(sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s]) + b[k]"
    " + R[n, k, h, w])\n")


@pytest.mark.parametrize("sizes, threads", [({"N": 1, "C": 16, "K": 40, "H": 14, "W": 14}, 2),
                                            ({"N": 2, "C": 9, "K": 21, "H": 5, "W": 7}, 3),
                                            ({"N": 1, "C": 16, "K": 40, "H": 14, "W": 14}, 4)])
def test_few_row_blocks_split_their_panels_and_store_in_output_order(sizes, threads):
    # a 14x14 plane is a few flat row blocks: the threads share each block's filter panels
    # (MS groups), and with a 1x1 window a block's pixels are consecutive in the output, so a
    # vector is one store, the residual read at the same row-major offset
    kernel = check(parse(POINTWISE_RESIDUAL), sizes, {"threads": threads})
    text = kernel.src.text
    assert "#define MS " in text and "item % MS; panel < MPAD / MR; panel += MS" in text
    assert "vector by vector in output order" in text


def test_an_epilogue_reading_the_column_keeps_the_row_segment_walk():
    # x in arithmetic is no row-major offset: a store past OW would give it the wrong column
    op = parse(POINTWISE_RESIDUAL.replace("+ R[n, k, h, w])", "+ R[n, k, h, w] + 0.01 * w)"))
    kernel = check(op, {"N": 1, "C": 16, "K": 40, "H": 14, "W": 14}, {"threads": 2})
    assert "row segment by row segment" in kernel.src.text
    per_row = parse(POINTWISE_RESIDUAL.replace("R: f32[N, K, H, W]", "R: f32[N, K, H, 1]")
                    .replace("R[n, k, h, w]", "R[n, k, h, 0]"))
    kernel = check(per_row, {"N": 1, "C": 16, "K": 40, "H": 14, "W": 14}, {"threads": 2})
    assert "row segment by row segment" in kernel.src.text  # a value per row, not per pixel


@pytest.mark.parametrize("k, direct", [(24, True), (40, False)])
def test_a_dense_strided_conv_takes_phases_only_where_im2col_packing_would_dominate(k, direct):
    # AVX2 (8 lanes): to 24 output channels im2col's packing would cost at least half of its
    # FMAs, so the row buffer holds the stride phases; to 40 the packed GEMM stays
    op = parse("op cs(X: f32[N, C, 2 * H + 1, 2 * W + 1], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
               "    Y[n, k, h, w] = sum[c, r, s](X[n, c, 2 * h + r, 2 * w + s] * F[k, c, r, s])\n")
    kernel = check(op, {"N": 2, "C": 3, "K": k, "H": 7, "W": 8}, {"threads": 2})
    assert ("phases" in kernel.src.meta["fusion"]) == direct, kernel.src.meta["fusion"]
    assert ("im2col" in kernel.src.meta["fusion"]) == (not direct)


@pytest.mark.parametrize("sizes", [{"N": 1, "C": 3, "H": 5, "W": 5, "R": 3, "S": 3},
                                   {"N": 2, "C": 5, "H": 9, "W": 5, "R": 3, "S": 3}])
def test_narrow_depthwise_planes_run_end_to_end(sizes):
    # 3-wide output rows on AVX2 (8 lanes), as EfficientNet's 7x7 planes on AVX-512: whole
    # vectors per row would idle over half their lanes, so a plane's rows run end to end
    # (a 3x3 plane: 2 vectors for 9 pixels), not the generic loop nests
    from profilers.sanitizer import sanitize_op

    op = load_op("depthwise_conv2d")
    kernel = check(op, sizes)
    assert kernel.src.meta["generator"] == c_conv.GENERATOR and "end to end" in kernel.src.meta["fusion"]
    report = sanitize_op("depthwise_conv2d", sizes)
    assert report.clean, report.findings[:2]
