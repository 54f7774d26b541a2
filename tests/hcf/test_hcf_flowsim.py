"""Flow-level simulation: agreement with the analytical model without congestion, max-min sharing, faults."""

import itertools

import numpy as np
import pytest

from hcf_sim.errors import HcfError
from hcf_sim.fabric import topology as T
from hcf_sim.faults import fail_link, fault_scenario, recovery_time
from hcf_sim.service import simulate
from hcf_sim.simulation.flowsim import Router, maxmin_rates

S = 8 << 20


@pytest.mark.parametrize("algo", ["ring", "recursive_doubling", "rabenseifner", "tree"])
def test_flow_matches_analytical_without_congestion(algo):
    # fully connected: every pair has its own link in each direction, so nothing is shared
    r = simulate(T.fully_connected(8), "allreduce", S, algo, "flow")
    assert r.time == pytest.approx(r.terms["total"], rel=1e-9)


@pytest.mark.parametrize("coll,algo", [("allgather", "ring"), ("reducescatter", "ring"),
                                       ("alltoall", "pairwise"), ("broadcast", "tree"),
                                       ("allgather", "recursive_doubling")])
def test_other_collectives_agree(coll, algo):
    r = simulate(T.fully_connected(8), coll, S, algo, "flow")
    assert r.time == pytest.approx(r.terms["total"], rel=1e-9)


def test_ring_on_ring_and_hierarchical_on_rail_agree():
    r = simulate(T.ring(6), "allreduce", S, "ring", "flow")
    assert r.time == pytest.approx(r.terms["total"], rel=1e-9)
    h = simulate(T.rail_optimized(4, 4), "allreduce", S, "hierarchical", "flow")
    assert h.time == pytest.approx(h.terms["total"], rel=1e-9)


def test_congestion_slows_recursive_doubling_on_a_ring():
    # partners 2 and 4 hops away share ring links: flow-level must be slower than the formula
    r = simulate(T.ring(8), "allreduce", S, "recursive_doubling", "flow")
    assert r.time > 1.5 * r.terms["total"]
    assert r.notes


def test_maxmin_by_hand():
    # f0 uses link 0 (cap 10); f1 uses links 0 and 1 (cap 4): f1 is held to 4, f0 takes the other 6
    rates = maxmin_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), 2, np.array([10.0, 4.0]))
    assert rates.tolist() == pytest.approx([6.0, 4.0])
    equal = maxmin_rates(np.array([0, 1, 2]), np.array([0, 0, 0]), 3, np.array([9.0]))
    assert equal.tolist() == pytest.approx([3.0, 3.0, 3.0])


def test_failed_link_changes_routes():
    topo = T.fat_tree(4)
    before = Router(topo).path_nodes(0, 15)
    u, v = before[2], before[3]  # an aggregation-to-core hop
    broken = fail_link(topo, u, v)
    after = Router(broken).path_nodes(0, 15)
    assert after != before
    assert (u, v) not in itertools.pairwise(after)
    assert len(after) == len(before)  # the fat-tree has an equal-length detour


def test_fault_scenario_reports_slowdown_and_recovery():
    topo = T.rail_optimized(4, 4)
    rep = fault_scenario(topo, "link", "nic0_0,rail0", "allreduce", S, "hierarchical")
    assert rep.rerouted_pairs >= 1 and rep.slowdown >= 1.0
    node = fault_scenario(topo, "node", "gpu1_1", "allreduce", S, "auto", checkpoint=(3600, 60, 300))
    assert node.after.ranks == 15 and node.recovery.total == pytest.approx(1800 + 300)
    with pytest.raises(HcfError, match="disconnected"):
        fail_link(T.ring(2), "gpu0", "gpu1")
    assert recovery_time(100, 2, 10, mtbf_s=5000).optimal_interval == pytest.approx((2 * 2 * 5000) ** 0.5)
