"""Topology builders, link presets and their error messages."""

import pytest

from hcf_sim.errors import HcfError, parse_size, parse_sizes
from hcf_sim.fabric import topology as T
from hcf_sim.fabric.links import PRESETS, custom_link


def test_builders_have_expected_counts():
    ft = T.fat_tree(4).summary()
    assert (ft["gpus"], ft["switches"]) == (16, 20)
    assert T.torus((4, 4)).graph.number_of_edges() == 32
    assert T.torus((2, 3, 4)).summary()["gpus"] == 24
    rail = T.rail_optimized(2, 8).summary()
    assert (rail["gpus"], rail["nics"], rail["group_size"]) == (16, 16, 8)
    assert T.dragonfly(3, 2, 2).summary()["gpus"] == 12
    assert T.ring(5).graph.number_of_edges() == 5
    assert T.fully_connected(5).graph.number_of_edges() == 10
    assert T.build_topology("fat-tree", 100).summary()["gpus"] == 100


def test_oversubscription_thins_uplinks():
    ft = T.fat_tree(4, oversubscription=2.0)
    assert ft.link("edge0_0", "agg0_0")["bandwidth"] == pytest.approx(ft.link("gpu0", "edge0_0")["bandwidth"] / 2)


def test_presets_carry_sources():
    for p in PRESETS.values():
        assert {"line_rate", "efficiency", "hop_latency", "step_latency"} <= set(p.sources)
        assert 0 < p.efficiency <= 1
    assert PRESETS["ib_ndr"].bandwidth == pytest.approx(48.5e9)


def test_custom_json_roundtrip_and_errors():
    t = T.from_json(T.ring(4).to_json())
    assert len(t.gpus) == 4
    bad = {"nodes": [{"id": "a"}, {"id": "b"}, {"id": "c"}],
           "links": [{"src": "a", "dst": "b", "bandwidth_gbps": 10, "latency_us": 1}]}
    with pytest.raises(HcfError, match="disconnected"):
        T.from_json(bad)
    with pytest.raises(HcfError, match="bandwidth"):
        custom_link(-5, 1)
    with pytest.raises(HcfError, match=">= 1"):
        T.build_topology("ring", 0)
    with pytest.raises(HcfError, match="unknown topology"):
        T.build_topology("hypercube", 8)


def test_size_parsing():
    assert parse_size("4MiB") == 4 << 20
    assert parse_size("1e3") == 1000
    assert parse_sizes("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    with pytest.raises(HcfError, match="cannot read"):
        parse_size("lots")
    with pytest.raises(HcfError, match="1 TiB"):
        parse_size("2TiB")
