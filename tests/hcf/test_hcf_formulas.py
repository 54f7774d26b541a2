"""Analytical cost formulas against hand-computed values, busbw definitions and the selector."""

import itertools
import math

import pytest

from hcf_sim.collectives.analytical import AlphaBeta, algbw, analytical_cost, bus_factor, busbw
from hcf_sim.collectives.selector import crossovers, select
from hcf_sim.errors import HcfError

AB = AlphaBeta(alpha=1e-5, beta=1e-9, gamma=2e-10)
S = 1 << 20


def test_ring_allreduce_by_hand():
    c = analytical_cost("allreduce", "ring", 4, S, AB)
    # 2(p-1) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma
    assert c.latency == pytest.approx(6e-5)
    assert c.bandwidth == pytest.approx(2 * 0.75 * S * 1e-9)
    assert c.reduction == pytest.approx(0.75 * S * 2e-10)
    assert c.steps == 6


def test_recursive_doubling_and_rabenseifner_by_hand():
    rd = analytical_cost("allreduce", "recursive_doubling", 8, 1000, AB)
    assert rd.total == pytest.approx(3e-5 + 3000e-9 + 3000 * 2e-10)
    rab = analytical_cost("allreduce", "rabenseifner", 8, 1000, AB)
    assert rab.total == pytest.approx(6e-5 + 2 * 7 / 8 * 1000e-9 + 7 / 8 * 1000 * 2e-10)
    # MPICH non-power-of-two: (2 floor(lgp)+2) alpha + (2(p'-1)/p' + 2) n beta
    rab6 = analytical_cost("allreduce", "rabenseifner", 6, 1000, AlphaBeta(1e-5, 1e-9))
    assert rab6.total == pytest.approx(6e-5 + (2 * 3 / 4 + 2) * 1000e-9)


def test_tree_allgather_alltoall_broadcast_by_hand():
    ab = AlphaBeta(1e-5, 1e-9)
    assert analytical_cost("allreduce", "tree", 5, 1000, ab).total == pytest.approx(6e-5 + 6000e-9)
    assert analytical_cost("allgather", "ring", 4, 4000, ab).total == pytest.approx(3e-5 + 3000e-9)
    assert analytical_cost("allgather", "recursive_doubling", 8, 8000, ab).total == pytest.approx(3e-5 + 7000e-9)
    assert analytical_cost("reducescatter", "recursive_halving", 8, 8000, ab).total == pytest.approx(3e-5 + 7000e-9)
    assert analytical_cost("alltoall", "pairwise", 4, 4000, ab).total == pytest.approx(3e-5 + 3000e-9)
    assert analytical_cost("alltoall", "bruck", 8, 4000, ab).total == pytest.approx(3e-5 + 3 * 2000e-9)
    assert analytical_cost("broadcast", "tree", 8, 1000, ab).total == pytest.approx(3e-5 + 3000e-9)


def test_hierarchical_is_sum_of_levels():
    intra, inter = AlphaBeta(2e-6, 1e-11), AlphaBeta(1e-5, 2e-11)
    c = analytical_cost("allreduce", "hierarchical", 16, S, intra, inter, group=4)
    expect = (3 * 2e-6 + 0.75 * S * 1e-11) * 2 + 6 * 1e-5 + 2 * 0.75 * (S / 4) * 2e-11
    assert c.total == pytest.approx(expect)
    with pytest.raises(HcfError, match="divisible"):
        analytical_cost("allreduce", "hierarchical", 10, S, intra, inter, group=4)


def test_busbw_definitions_match_nccl_tests():
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == pytest.approx(0.875)
    assert bus_factor("broadcast", 8) == 1.0
    assert algbw(1e9, 0.5) == 2e9
    assert busbw("allreduce", 4, 1e9, 1.0) == pytest.approx(1.5e9)


def test_selector_small_vs_large_and_crossover():
    ab = AlphaBeta(1e-5, 1e-10)
    assert select("allreduce", 64, 8, ab).best in ("recursive_doubling", "rabenseifner", "tree")
    assert select("allreduce", 64, 1 << 30, ab).best in ("ring", "rabenseifner")
    # recursive doubling vs ring at p=4 cross at S* = 8 alpha / beta
    s_star = 8 * ab.alpha / ab.beta
    ring = analytical_cost("allreduce", "ring", 4, s_star, ab).total
    rd = analytical_cost("allreduce", "recursive_doubling", 4, s_star, ab).total
    assert math.isclose(ring, rd, rel_tol=1e-9)
    xs = crossovers("allreduce", 4, ab, ab, 1)
    assert all(a.size < b.size for a, b in itertools.pairwise(xs))
    assert "latency" in select("allreduce", 4, 8, ab).reason


def test_bad_parameters_raise_hcf_error():
    with pytest.raises(HcfError, match="beta"):
        AlphaBeta(1e-6, -1.0)
    with pytest.raises(HcfError, match="ranks"):
        analytical_cost("allreduce", "ring", 0, 100, AB)
    with pytest.raises(HcfError, match="1 TiB"):
        analytical_cost("allreduce", "ring", 4, 2.0 ** 41, AB)
    with pytest.raises(HcfError, match="no algorithm"):
        analytical_cost("allreduce", "bogus", 4, 100, AB)
