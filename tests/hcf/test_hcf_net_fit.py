"""The network a multi-node run got: NCCL's plugin latency in the tuner, and the two numbers
fitted on half of a log's sizes."""

import pytest

from hcf_sim.calibration.net_fit import AchievedNet, Prediction, adjusted_us, fit_achieved_net
from hcf_sim.collectives import nccl_model as nm
from hcf_sim.fabric.links import PRESETS
from hcf_sim.fabric.topology import build_topology
from hcf_sim.simulation.nccl_flow import fabric


def _cluster(link: str) -> nm.Cluster:
    return fabric(build_topology("rail", 16, link)).cluster


def test_efa_plugin_latency_enters_each_inter_node_step_twice_for_simple():
    efa, ib = _cluster("efa_400g"), _cluster("ib_ndr")
    assert efa.net_latency_us == PRESETS["efa_400g"].plugin_latency_us == 75.0
    assert ib.net_latency_us == 0.0
    for algo, proto in (("tree", "LL"), ("ring", "LL128"), ("nvls_tree", "Simple")):
        steps = nm.inter_steps(efa, "allreduce", algo) * (2 if proto == "Simple" else 1)
        assert steps > 0
        extra = nm.latency_us(efa, "allreduce", algo, proto) - nm.latency_us(ib, "allreduce", algo, proto)
        assert extra == pytest.approx(75.0 * steps)


def test_fit_recovers_the_network_it_was_given_and_leaves_the_other_sizes_out():
    c = _cluster("ib_ndr")
    preds = []
    for k in range(10, 34, 2):
        size = 1 << k
        best = nm.select(c, "allreduce", size).best
        preds.append(Prediction("allreduce", size, best.time_us, best.latency_us, best.algorithm, best.protocol))
    truth = AchievedNet(40.0, 0.6, frozenset())
    measured = [adjusted_us(c, p, truth) for p in preds]
    got = fit_achieved_net(c, preds, measured)
    assert got.step_us == pytest.approx(40.0, abs=1.0)
    assert got.efficiency == pytest.approx(0.6, abs=0.011)
    assert got.fitted_sizes == frozenset(p.size for p in preds[::2])
    # NICs at 0.6 of 8 x 48.5 GB/s (233) now bound the NVLS-tree, which NVLink (280) bounded
    assert measured[-1] / preds[-1].time_us == pytest.approx(370.8 * 0.85 * 8 / 9 / (8 * 48.5 * 0.6), rel=0.02)
