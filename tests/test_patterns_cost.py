"""Pattern classification and FLOP/byte counts, checked against hand-computed values."""

import pytest

from uol_core import classify, op_cost, parse
from uol_core.odl.builder import OpBuilder, call, sum_

MATMUL = "op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n    C[m, n] = sum[k](A[m, k] * B[k, n])\n"


def pattern_of(text):
    return classify(parse(text))


def test_matmul_is_a_contraction_with_roles():
    p = pattern_of(MATMUL)
    assert p.kind == "contraction"
    roles = p.main_statement.contraction
    assert (roles.lhs, roles.rhs, roles.m, roles.n, roles.k) == ("A", "B", ("m",), ("n",), ("k",))
    assert roles.batch == () and not roles.windowed


def test_batched_transposed_contraction():
    p = pattern_of("op bmm(A: f32[B, M, K], W: f32[B, N, K]) -> C: f32[B, M, N]:\n"
                   "    C[b, m, n] = sum[k](A[b, m, k] * W[b, n, k])\n")
    roles = p.main_statement.contraction
    assert roles.batch == ("b",) and roles.m == ("m",) and roles.n == ("n",)


def test_epilogue_is_recognised():
    p = pattern_of("op lin(A: f32[M, K], W: f32[K, N], b: f32[N]) -> Y: f32[M, N]:\n"
                   "    Y[m, n] = relu(sum[k](A[m, k] * W[k, n]) + b[n])\n")
    assert p.kind == "contraction"
    assert p.main_statement.epilogue == ("relu", "add")


def test_map_reduce_scan_stencil():
    assert pattern_of("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = exp(X[i]) * 2\n").kind == "map"
    assert pattern_of("op f(X: f32[R, C]) -> Y: f32[R]:\n    Y[r] = max[c](X[r, c])\n").kind == "reduce"
    assert pattern_of("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = cumsum[i](X[i])\n").kind == "scan"
    p = pattern_of("op s(X: f32[N + 2]) -> Y: f32[N]:\n    Y[i] = X[i] + X[i + 1] + X[i + 2]\n")
    assert p.kind == "stencil" and p.main_statement.offsets == {"X": ("X[i + 1]", "X[i + 2]")}
    pool = pattern_of("op p(X: f32[2*N], F: f32[2]) -> Y: f32[N]:\n    Y[i] = max[r](X[2*i + r] + F[r])\n")
    assert pool.kind == "stencil"


def test_conv_is_a_windowed_contraction_and_softmax_fuses_three_statements():
    conv = pattern_of("op conv(X: f32[N, C, H, W], F: f32[K, C, R, S]) -> Y: f32[N, K, H - R + 1, W - S + 1]:\n"
                      "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s])\n")
    assert conv.kind == "contraction" and conv.main_statement.contraction.windowed
    soft = pattern_of("op softmax(X: f32[R, C]) -> Y: f32[R, C]:\n    mx[r] = max[c](X[r, c])\n"
                      "    e[r, c] = exp(X[r, c] - mx[r])\n    Y[r, c] = e[r, c] / sum[c](e[r, c])\n")
    assert [s.kind for s in soft.statements] == ["reduce", "map", "reduce"]
    assert soft.kind == "reduce"


@pytest.mark.parametrize("m, n, k", [(64, 32, 16), (1, 1, 1), (7, 13, 5)])
def test_matmul_cost_is_2mnk_and_compulsory_bytes(m, n, k):
    cost = op_cost(parse(MATMUL), {"M": m, "N": n, "K": k})
    assert cost.flops == 2 * m * n * k
    assert cost.bytes == 4 * (m * k + k * n + m * n)
    assert cost.intensity == pytest.approx(cost.flops / cost.bytes)


def test_softmax_cost_by_hand():
    r, c = 4, 8
    cost = op_cost(parse("op softmax(X: f32[R, C]) -> Y: f32[R, C]:\n    mx[r] = max[c](X[r, c])\n"
                         "    e[r, c] = exp(X[r, c] - mx[r])\n    Y[r, c] = e[r, c] / sum[c](e[r, c])\n"),
                   {"R": r, "C": c})
    # max: R*C combines; exp(X - mx): 2 per element; e / sum: R*C sums (the row sum depends on
    # r only, so it is counted once per row, as a compiled kernel hoists it) + R*C divisions.
    assert cost.flops == r * c + 2 * r * c + (r * c + r * c)
    assert cost.bytes == 2 * r * c * 4
    assert cost.unfused_bytes == (r * c * 4 + r * 4) + (r * c * 4 + r * 4 + r * c * 4) + 2 * r * c * 4


def test_builder_mirrors_text():
    b = OpBuilder("lin")
    A = b.input("A", "f32", "M", "K")
    W = b.input("W", "f32", "K", "N")
    bias = b.input("b", "f32", "N")
    Y = b.output("Y", "f32", "M", "N")
    m, n, k = b.indices("m n k")
    b.assign(Y[m, n], call("relu", sum_([k], A[m, k] * W[k, n]) + bias[n]))
    text = parse("op lin(A: f32[M, K], W: f32[K, N], b: f32[N]) -> Y: f32[M, N]:\n"
                 "    Y[m, n] = relu(sum[k](A[m, k] * W[k, n]) + b[n])\n")
    assert b.build() == text


def test_a_map_splits_across_threads_only_when_its_share_outlasts_a_fork_and_join():
    """The pattern model charges one fork and join (HFL fork_join_cycles) to a split: a small
    add stays on one thread, a large one takes every core, and the threshold moves with the
    target's figure."""
    from uol_core.acg.fixtures import fixed_target
    from uol_core.backends.c.space import choose_pattern_config, predict_seconds
    from uol_core.ops import load_op

    op, target = load_op("add"), fixed_target()
    small, large = {"M": 8, "N": 512}, {"M": 1024, "N": 1024}
    assert choose_pattern_config(op, small, target)[0]["threads"] == 1
    assert choose_pattern_config(op, large, target)[0]["threads"] == 2
    one = {"threads": 1, "chunk": 0, "vec": 0, "fuse": 1}
    two = {**one, "threads": 2}
    fork_join = target.fork_join_cycles / (target.clock_ghz * 1e9)
    # two threads read at full bandwidth, one at three quarters of it (space.predict_seconds)
    assert predict_seconds(op, small, target, two) - fork_join < \
        predict_seconds(op, small, target, one) < predict_seconds(op, small, target, two)
    cheap = fixed_target("test-cheap-fork", fork_join_cycles=1)
    assert choose_pattern_config(op, small, cheap)[0]["threads"] == 2


def test_a_small_but_arithmetic_heavy_convolution_still_splits():
    """Few bytes, many FLOPs: the model's compute term (FLOPs over the threads' share of the
    peak) outweighs the fork and join that the traffic alone would not."""
    from uol_core.acg.fixtures import fixed_target
    from uol_core.backends.c.space import choose_pattern_config
    from uol_core.ops import load_op

    op = load_op("conv2d")
    sizes = {"N": 1, "C": 32, "H": 10, "W": 10, "K": 32, "R": 3, "S": 3}
    assert choose_pattern_config(op, sizes, fixed_target())[0]["threads"] == 2
