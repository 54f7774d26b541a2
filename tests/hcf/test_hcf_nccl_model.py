"""NCCL-style model (NCCL tuning constants, NVLS, SHARP) against published figures; ASTRA-sim export."""

import pytest

from hcf_sim.collectives.nccl_model import (
    busbw_gbps,
    cluster,
    compare_published,
    constants,
    latency_us,
    select,
)
from hcf_sim.fabric.topology import rail_optimized
from hcf_sim.interchange import astra_network

# ASTRA-sim examples/network/analytical/HGX-H100-validated.yml, as published in their repository
ASTRA_HGX_H100 = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [400.0], "latency": [936.25]}


def test_astra_export_of_one_hgx_h100_matches_their_validated_file():
    assert astra_network(rail_optimized(1, 8)) == ASTRA_HGX_H100
    two = astra_network(rail_optimized(2, 8))
    assert two["topology"] == ["Switch", "Switch"] and two["npus_count"] == [8, 2]


def test_latencies_follow_nccls_formulas_by_hand():
    c = cluster("dgx-h100")
    assert latency_us(c, "allreduce", "ring", "LL") == pytest.approx(6.6 + 14 * 0.6)
    assert latency_us(c, "allreduce", "ring", "Simple") == pytest.approx(8.4 + 14 * 3.4)
    assert latency_us(c, "allreduce", "tree", "LL128") == pytest.approx(14.0 + 2 * 7 * 1.25)
    assert latency_us(c, "allreduce", "nvls", "Simple") == pytest.approx(25.0)
    assert latency_us(c, "allgather", "ring", "LL") == pytest.approx(6.6 + 7 * 0.6)


def test_every_constant_has_a_source():
    t = constants()["nccl_tuning"]
    assert "tuning.cc" in t["source"]
    for key, entry in t.items():
        if isinstance(entry, dict) and "value" in entry:
            assert entry.get("source"), key
    for c in constants()["clusters"].values():
        assert c["intra_busbw_gbps"]["source"] and c["nic_gbps"]["source"]
    assert all(p["source"] for p in constants()["published"])


def test_dgx_h100_allreduce_goals_against_published_figures():
    c = cluster("dgx-h100")
    for size in (256 << 20, 1 << 30):
        ch = select(c, "allreduce", size)
        assert ch.best.algorithm == "nvls" and "nvls" in ch.reason
        assert busbw_gbps("allreduce", 8, size, ch.best.time_us) == pytest.approx(480.0, rel=0.10)
    for size, published_us in ((1024, 16.38), (4096, 16.69)):
        ch = select(c, "allreduce", size)
        assert ch.best.protocol == "LL" and "latency-bound" in ch.reason
        assert ch.best.time_us == pytest.approx(published_us, rel=0.25)


def test_selector_excludes_what_the_machine_lacks_and_sharp_needs_nodes():
    multi = select(cluster("dgx-h100", 4), "allreduce", 1 << 30)
    assert "nvls" in multi.excluded and "collnet_direct" in multi.excluded
    sharp = select(cluster("dgx-h100-sharp", 4), "allreduce", 1 << 30)
    assert {c.algorithm for c in sharp.candidates} >= {"nvls", "collnet_direct", "ring", "tree"}
    ag = select(cluster("dgx-h100"), "allgather", 1 << 30)
    assert ag.best.algorithm == "ring"


def test_published_comparison_rows_carry_their_sources():
    rows = compare_published()
    assert rows and all(r["source"] and r["ours_time_us"] > 0 for r in rows)
