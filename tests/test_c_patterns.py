"""C backend beyond GEMM: fusion decisions, ops that match no template, knobs, the pattern space,
and golden files of one kernel per pattern (update with `pytest --update-golden`)."""

from __future__ import annotations

import pytest
import torch

from uol_core.acg.fixtures import fixed_target
from uol_core.acg.fusion import plan_fusion
from uol_core.backends.c.loops import generic as c_generic
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.space import build_pattern_space, choose_pattern_config
from uol_core.odl import parse
from uol_core.ops import load_op
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.runtime.verify import compare

TARGET = fixed_target()


def check(op, sizes, config=None):
    """Build, run and compare with the reference; returns the kernel."""
    kernel = compile_c(op, sizes, TARGET, config)
    inputs = random_inputs(op, kernel.sizes, seed=3)
    def ints(d):  # verify.compare cannot subtract booleans
        return {k: v.int() if v.dtype == torch.bool else v for k, v in d.items()}
    verdict = compare(ints(kernel.run(inputs)), ints(evaluate_all(op, inputs)),
                      kernel.src.meta["reduction_length"])
    assert verdict.ok, f"{op.name}: {verdict}\n{kernel.src.text}"
    return kernel


ODD_OPS = {
    "index_compare": ("op tri(X: f32[N, N]) -> Y: f32[N, N]:\n"
                      "    Y[i, j] = where(j <= i and i - j < 3, X[i, j], 0.0)\n", {"N": 9}),
    "non_product_reduce": ("op lse2(X: f32[R, C]) -> Y: f32[R]:\n"
                           "    Y[r] = log(sum[c](exp(X[r, c]) + X[r, c] * X[r, c]))\n",
                           {"R": 5, "C": 11}),
    "written_extent": ("op head3(X: f32[R + 3, C]) -> Y: f32[C]:\n"
                       "    Y[c] = sum[r: 3](X[r, c])\n", {"R": 4, "C": 5}),
    "casts_and_ints": ("op bucket(X: f32[N], T: i32[N]) -> (Y: i32[N], Z: f32[N]):\n"
                       "    Y[i] = i32(X[i] * 4.0) + T[i] * 2\n"
                       "    Z[i] = f32(Y[i]) / 3\n", {"N": 13}),
    "pad_2d": ("op blur(X: f32[H, W]) -> Y: f32[H, W]:\n"
               "    Y[i, j] = (pad(X[i - 1, j], 0) + pad(X[i, j + 1], 0) + X[i, j]) / 3.0\n",
               {"H": 6, "W": 7}),
    "two_contractions_one_map": (
        "op gated(X: f32[M, K], A: f32[K, N], B: f32[K, N]) -> Y: f32[M, N]:\n"
        "    Y[m, n] = sum[k](X[m, k] * A[k, n]) * sigmoid(sum[k](X[m, k] * B[k, n]))\n",
        {"M": 5, "K": 7, "N": 3}),
    "bool_output_and_scan": ("op runs(X: f32[R, C]) -> (P: bool[R, C], S: f32[R, C]):\n"
                             "    P[r, c] = X[r, c] > 0.0\n"
                             "    S[r, c] = cumsum[c](where(P[r, c], X[r, c], 0.0))\n",
                             {"R": 4, "C": 9}),
}


@pytest.mark.parametrize("case", sorted(ODD_OPS))
def test_ops_matching_no_template_compile_and_verify(case):
    text, sizes = ODD_OPS[case]
    check(parse(text), sizes)


def test_softmax_is_one_pass_with_private_row_buffers():
    op = load_op("softmax")
    plan = plan_fusion(op, {"R": 64, "C": 100})
    assert len(plan.groups) == 1 and plan.groups[0].private == ["mx", "e"]
    src = check(op, {"R": 64, "C": 100}, {"generic": 1}).src  # the generic path, not the row template
    assert "#pragma omp parallel" in src.text and "#pragma omp simd reduction(max:" in src.text
    assert "malloc(sizeof(float) * 100)" in src.text  # one row of e per thread, not R x C


def test_attention_never_materialises_the_score_matrix():
    op = load_op("attention")
    sizes = {"S": 96, "T": 80, "D": 16, "E": 8}
    plan = plan_fusion(op, sizes)
    assert len(plan.groups) == 1 and set(plan.groups[0].private) == {"s", "mx", "p", "l"}
    src = check(op, sizes, {"generic": 1}).src  # the fused loop-nest path, not the flash template
    assert "malloc(sizeof(float) * 80)" in src.text and "* 7680)" not in src.text
    assert "private per thread: s, mx, p, l" in src.meta["fusion"]


def test_fusion_explains_a_refused_statement():
    op = parse("op rev(X: f32[N]) -> Y: f32[N]:\n    t[i] = X[i] * 2.0 + 1.0\n"
               "    Y[i] = t[N - 1 - i] + sum[j](t[j])\n")
    plan = plan_fusion(op, {"N": 10})
    assert len(plan.groups) == 2
    assert any("new pass" in r for r in plan.reasons)
    check(op, {"N": 10})


def test_fuse_off_gives_same_result_and_more_passes():
    op = load_op("layernorm")
    on = check(op, {"R": 7, "C": 33})
    off = check(op, {"R": 7, "C": 33}, {"fuse": 0})
    assert on.src.meta["groups"] == 1 and off.src.meta["groups"] == 3


@pytest.mark.parametrize("config", [{"chunk": 4}, {"vec": 16}, {"threads": 1}, {"simd": 0}])
def test_knobs_change_the_kernel_not_the_result(config):
    base = c_generic.emit(load_op("elementwise_chain6"), {"M": 9, "N": 37}, TARGET).text
    kernel = check(load_op("elementwise_chain6"), {"M": 9, "N": 37}, config)
    assert kernel.src.text != base


def test_f64_and_integer_labels():
    from uol_core.odl.ir import DType, retyped
    check(retyped(load_op("cross_entropy"), DType.f64), {"R": 6, "C": 10})
    check(load_op("cross_entropy_mean"), {"R": 17, "C": 5})


def test_pattern_space_names_constraints_with_target_numbers():
    op = load_op("softmax")
    space = build_pattern_space(op, {"R": 3, "C": 1000}, TARGET)
    names = {c.name for c in space.constraints}
    assert {"cores", "work per thread", "vector width", "private slices fit L2"} <= names
    assert any(c.removed > 0 for c in space.constraints)
    assert all(not space.violated(c) for c in space.configs)
    assert "1048576" in next(c.formula for c in space.constraints if "L2" in c.name)
    cfg, _ = choose_pattern_config(op, {"R": 3, "C": 1000}, TARGET, {"chunk": 1})
    assert cfg["chunk"] == 1


def test_line_map_points_at_statements():
    op = load_op("layernorm")
    src = c_generic.emit(op, {"R": 4, "C": 8}, TARGET)
    mapped = set(src.line_map.values())
    assert {s.line for s in op.stmts} <= mapped


def _layernorm_backward():
    from uol_core.odl.grad import derive_grad

    return derive_grad(load_op("layernorm")).op


def test_sibling_row_reductions_share_one_loop_and_verify():
    """Layer norm's backward reduces each row three times before it writes dX: one loop with
    three accumulators; a reduction that reads an earlier one's result (the forward's var reads
    mu) keeps its own loop, and one that reads it only after its loop (d_mu reads d_var) joins."""
    backward = check(_layernorm_backward(), {"R": 9, "C": 37}, {"generic": 1, "threads": 2})
    assert backward.src.text.count("sibling reductions in one loop") == 1
    assert "reduction(+:sib1) reduction(+:sib2) reduction(+:sib3)" in backward.src.text
    forward = check(load_op("layernorm"), {"R": 9, "C": 37}, {"generic": 1})
    assert "sibling" not in forward.src.text
    mixed = parse("op stats(X: f32[R, C]) -> (A: f32[R], B: f32[R], M: f32[R]):\n"
                  "    A[r] = max[c](X[r, c])\n"
                  "    B[r] = sum[c](X[r, c] * X[r, c])\n"
                  "    M[r] = mean[c](X[r, c]) + A[r] * B[r]\n")
    kernel = check(mixed, {"R": 5, "C": 33}, {"generic": 1, "threads": 2})
    assert "reduction(max:sib1) reduction(+:sib2) reduction(+:sib3)" in kernel.src.text


GOLDEN_CASES = {
    "map_elementwise_chain6": ("elementwise_chain6", {"M": 16, "N": 40}),
    "row_softmax": ("softmax", {"R": 32, "C": 100}),
    "fused_layernorm": ("layernorm", {"R": 8, "C": 64}),
    "fused_attention": ("attention", {"S": 32, "T": 48, "D": 16, "E": 16}),
    "stencil_stencil5": ("stencil5", {"H": 10, "W": 12}),
    "conv_depthwise_conv2d": ("depthwise_conv2d", {"N": 1, "C": 4, "H": 8, "W": 8, "R": 3, "S": 3}),
    "scan_cumsum": ("cumsum", {"R": 4, "C": 50}),
    "generic_cross_entropy_mean": ("cross_entropy_mean", {"R": 8, "C": 10}),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_emitted_c_matches_golden(case, golden):
    name, sizes = GOLDEN_CASES[case]
    text = c_generic.emit(load_op(name), sizes, TARGET, {"threads": 2}).text
    golden(f"c/pattern_{case}.c", text)


def test_layernorm_backward_golden(golden):
    text = c_generic.emit(_layernorm_backward(), {"R": 8, "C": 64}, TARGET, {"threads": 2}).text
    golden("c/pattern_generic_layernorm_backward.c", text)


def test_outputs_are_written_in_their_declared_dtype():
    op = parse("op sgn(X: f32[N]) -> Y: i32[N]:\n    Y[i] = where(X[i] > 0.0, 1, 0 - 1)\n")
    kernel = check(op, {"N": 8})
    x = torch.tensor([1.0, -2.0, 3.0, 0.5, -1.0, 2.0, -3.0, 4.0])
    assert kernel.run({"X": x})["Y"].tolist() == [1, -1, 1, 1, -1, 1, -1, 1]


@pytest.mark.parametrize("name", ["attention", "causal_attention", "attention_batched"])
def test_naive_attention_compiles_to_flash_tiles(name):
    op = load_op(name)
    sizes = {"attention": {"S": 70, "T": 45, "D": 8, "E": 5}, "causal_attention": {"S": 37, "D": 8},
             "attention_batched": {"B": 2, "NH": 3, "S": 33, "T": 20, "D": 8}}[name]
    kernel = check(op, sizes, {"bq": 8, "bk": 16})
    assert kernel.src.meta["generator"] == "uol-c-flash-1"
    assert "malloc" not in kernel.src.text  # scores live in per-thread tiles only


def test_flash_golden(golden):
    from uol_core.backends.c.route import emit_any
    text = emit_any(load_op("causal_attention"), {"S": 40, "D": 16}, TARGET, {"threads": 2}).text
    golden("c/pattern_flash_causal_attention.c", text)


@pytest.mark.parametrize("scan", ["cumsum", "cummax", "cumprod"])
def test_long_scans_run_in_parallel(scan):
    from uol_core.backends.c.scan import emitter as c_scan
    factor = " * 0.001 + 1.0" if scan == "cumprod" else ""
    op = parse(f"op s(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {scan}[i](X[i]{factor})\n")
    n = c_scan.SCAN_PARALLEL_MIN * 2 + 17
    kernel = check(op, {"N": n}, {"threads": 2})
    assert kernel.src.meta["generator"] == "uol-c-scan-1" and "#pragma omp barrier" in kernel.src.text


def test_every_library_op_compiles_through_the_api():
    import uol_core
    from uol_core.odl.shapes import ShapeError, bind_sizes
    from uol_core.ops import list_ops

    for name in list_ops():
        op = load_op(name)
        negative = {n for d in op.inputs + op.outputs for f in d.shape for n, c in f.terms if c < 0}
        sizes = {d: (2 if d in negative else 5) for d in op.dims}
        try:
            bind_sizes(op, sizes)
        except ShapeError:
            sizes = {d: v + 2 for d, v in sizes.items()}
        kernel = uol_core.compile(op, shapes=sizes, target=TARGET)
        inputs = random_inputs(op, kernel.sizes, seed=5)
        got = kernel(**inputs)
        got = got if isinstance(got, dict) else {op.outputs[0].name: got}
        verdict = compare(got, evaluate_all(op, inputs), kernel.kernel_source.meta.get(
            "reduction_length", 1))
        assert verdict.ok, f"{name}: {verdict}"
        assert kernel.explain().render()


def test_fusion_checks_reads_before_a_loop_of_another_extent():
    # dX reads g_Y at every k: it may share loop n with g_Y, never loop k, even though the
    # extents of loops 1 and 2 agree and loop 3 is the first that differs (a regression)
    from uol_core.odl.grad import derive_grad
    from uol_core.odl.shapes import bind_sizes
    op = derive_grad(load_op("conv2d_bias_relu")).op
    sizes = bind_sizes(op, {d: 7 for d in op.dims})
    assert "pass 1: g_Y (line 2), dX (line 3); 1 shared loop(s) [7]" in plan_fusion(op, sizes).explain(op)
    check(op, sizes, {"generic": 1, "fuse": 1, "threads": 2})


def test_column_reductions_ride_a_row_pass_only_over_its_own_rows():
    op = parse("op rr(X: f32[R, C], G: f32[C, C]) -> (Y: f32[R, C], s: f32[C], t: f32[C]):\n"
               "    Y[r, c] = X[r, c] * 2.0\n"
               "    s[c] = sum[r](Y[r, c] * X[r, c])\n"
               "    t[c] = sum[k](G[k, c]) + s[c]\n")
    plan = plan_fusion(op, {"R": 9, "C": 9})
    assert plan.groups[0].riders == [1]  # s sums over the pass's rows r
    assert 2 not in plan.groups[0].stmts  # t reads s, complete only after the pass
    for threads in (1, 2, 3):
        check(op, {"R": 9, "C": 9}, {"generic": 1, "threads": threads})
        check(op, {"R": 1, "C": 17}, {"generic": 1, "threads": threads})


def test_api_config_string_reaches_the_pattern_kernel():
    import uol_core
    kernel = uol_core.compile("softmax", shapes={"R": 6, "C": 40}, target=TARGET,
                              config="chunk=2,fuse=0")
    assert kernel.config["chunk"] == 2 and kernel.kernel_source.meta["groups"] == 3


COLUMN_SUM = ("op colsum(G: f32[M, N], b: f32[N]) -> (db: f32[N], mx: f32[N]):\n"
              "    db[b0] = sum[m](G[m, b0]) * 0.5 + b[b0]\n"
              "    mx[c] = max[m](G[m, c] * b[c])\n")


@pytest.mark.parametrize("shape", [(1, 1), (1, 13), (13, 1), (7, 31), (97, 5), (3, 263), (61, 257)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_column_reductions_run_rows_outside_at_odd_shapes(shape, threads):
    m, n = shape
    op = parse(COLUMN_SUM)
    kernel = check(op, {"M": m, "N": n}, {"threads": threads})
    text = kernel.src.text
    assert "column reduction: rows outside" in text
    # db's accumulation: the row loop is opened first, the column loop (stride 1) inside it
    lines = text[text.index("line 2: db[b0]"):text.index("line 3: mx[c]")].splitlines()
    update = next(n for n, t in enumerate(lines) if "] += t_G[" in t)
    row = max(n for n, t in enumerate(lines[:update]) if "for (int64_t i_m = 0;" in t)
    col = max(n for n, t in enumerate(lines[:update]) if "for (int64_t i_b0 = " in t)
    assert row < col < update
    assert "t_G[(i_m)" in lines[update] and "+ (i_b0)]" in lines[update]


@pytest.mark.parametrize("sizes", [{"R": 1, "C": 1}, {"R": 1, "C": 7}, {"R": 13, "C": 1},
                                   {"R": 17, "C": 31}, {"R": 2, "C": 263}, {"R": 61, "C": 3}])
def test_layernorm_backward_is_correct_and_fuses_its_row_pass(sizes):
    from uol_core.odl.grad import derive_grad
    op = derive_grad(load_op("layernorm")).op
    for threads in (1, 2, 3):
        kernel = check(op, sizes, {"generic": 1, "threads": threads})
        fusion = kernel.src.meta["fusion"]
        # one pass: the row reductions, dX, and dgamma and dbeta riding it as per-thread
        # partial column sums combined after the rows
        assert ("pass 1: d_var (line 2), z_var (line 3), d_mu (line 4), dX (line 5), "
                "dgamma (line 6), dbeta (line 7)") in fusion
        assert fusion.count("rides the pass of d_var") == 2
        assert "column reduction: rows outside" not in kernel.src.text


FLAT_MAPS = ("op step2(P: f32[N], G: f32[N], B: f32[N]) -> (P2: f32[N], B2: f32[N]):\n"
             "    B2[n] = 0.9 * B[n] + G[n]\n"
             "    P2[n] = P[n] - 0.1 * B2[n]\n")


def test_flat_maps_share_one_parallel_loop_when_the_work_pays_for_threads():
    op = parse(FLAT_MAPS)
    plan = plan_fusion(op, {"N": 1 << 20})
    assert [g.stmts for g in plan.groups] == [[0, 1]]
    assert "element-wise over the same one loop" in plan.explain(op)
    big, _ = choose_pattern_config(op, {"N": 1 << 20}, TARGET)
    small, _ = choose_pattern_config(op, {"N": 256}, TARGET)
    assert big["threads"] == TARGET.cores > 1 and small["threads"] == 1
    kernel = check(op, {"N": 1000}, {"threads": 2})
    assert "in one loop" in kernel.src.text and "parallel for simd num_threads(2)" in kernel.src.text
    # reading an earlier result at another element needs all of it first: a new pass
    shifted = parse(FLAT_MAPS.replace("0.1 * B2[n]", "0.1 * B2[N - 1 - n]"))
    assert [g.stmts for g in plan_fusion(shifted, {"N": 64}).groups] == [[0], [1]]
    check(shifted, {"N": 37}, {"threads": 2})


def test_maps_of_a_row_pass_share_its_inner_loop():
    op = parse("op rows3(X: f32[R, C], G: f32[C]) -> (A: f32[R, C], B: f32[R, C]):\n"
               "    t[r, c] = X[r, c] * G[c]\n"
               "    A[r, c] = t[r, c] + 1\n"
               "    B[r, c] = A[r, c] * t[r, c]\n")
    kernel = check(op, {"R": 6, "C": 35}, {"threads": 2})
    assert "lines 2, 3, 4: t, A, B[r, c] in one loop" in kernel.src.text
    separate = check(op, {"R": 6, "C": 35}, {"threads": 2, "fuse": 0})
    assert "in one loop" not in separate.src.text
