"""One question, one answer: simulate, sweep, predict, pipeline and the Communication page give the
same algorithm, protocol and time for the same collective on the same machine (issue: 8 H100s,
1 GiB all-reduce, predict said NVLS 3,858 us while simulate said rabenseifner 5,088 us)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.services import comm
from hcf_sim.collectives import nccl_model as nm
from hcf_sim.fabric.topology import build_topology
from hcf_sim.service import simulate
from hcf_sim.simulation.nccl_flow import fabric
from uol_cli.hcf_cmd import app

TOPOLOGIES = [("rail", 8, False), ("rail", 16, False), ("rail", 16, True), ("fat-tree", 16, False),
              ("torus2d", 16, False)]
COLLECTIVES = ("allreduce", "allgather", "reducescatter")
SIZES = (1 << 10, 1 << 20, 256 << 20)
# the published logs' rows (log -> size bands) that meet issue 52's goal (docs/hcf.md's table)
BOTH = (">= 1 MiB", "< 1 MiB")
GOAL_MET = {"all_gather_h100_nvls_8.txt": BOTH, "all_gather_h100_ring_8.txt": BOTH,
            "all_reduce_a100_ib_sharp_32.txt": BOTH, "all_reduce_a100_nvswitch_8.txt": (">= 1 MiB",),
            "all_reduce_a100_pcie_ib_hdr_2.txt": (">= 1 MiB",), "all_reduce_a3mega_2x8_h100.txt": ("< 1 MiB",),
            "all_reduce_h100_efa_p5_16.txt": BOTH, "all_reduce_h100_ib_sharp_96.txt": (">= 1 MiB",),
            "all_reduce_h100_nvls_8.txt": BOTH,
            "all_reduce_h100_ring_8.txt": BOTH, "reduce_scatter_h100_nvls_8.txt": BOTH,
            "reduce_scatter_h100_ring_8.txt": BOTH}
PUBLISHED_NVLS_BUSBW = 480.0  # GB/s, NVIDIA/nccl-tests#212 (nccl_constants.json "published")


def _cli(*args: str) -> dict | list:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _same(a: float, b: float, notes: list[str]) -> bool:
    # the flow model may only differ from NCCL's analytical cost when it says why (shared links)
    return a == pytest.approx(b, rel=1e-9) or any("NCCL's analytical" in n for n in notes)


@pytest.mark.parametrize("kind,gpus,sharp", TOPOLOGIES)
def test_every_view_gives_the_same_pick_and_time(kind, gpus, sharp):
    topo = build_topology(kind, gpus, sharp=sharp)
    cluster = fabric(topo).cluster
    page_topo = comm.build(kind, gpus)
    for coll in COLLECTIVES:
        for size in SIZES:
            nccl = nm.select(cluster, coll, size).best
            flow = simulate(topo, coll, size, "auto", "flow", routing="spread")
            analytical = simulate(topo, coll, size, "auto", "analytical")
            where = (topo.name, coll, size)
            assert (flow.algorithm, flow.protocol) == (nccl.algorithm, nccl.protocol), where
            assert (analytical.algorithm, analytical.protocol) == (nccl.algorithm, nccl.protocol), where
            assert analytical.time * 1e6 == pytest.approx(nccl.time_us, rel=1e-12), where
            assert _same(flow.time * 1e6, nccl.time_us, flow.notes), where
            if not sharp:  # the page has no SHARP switch; otherwise the same question
                page = comm.simulate(page_topo, coll, size, "auto")
                assert (page["algorithm"], page["protocol"]) == (flow.algorithm, flow.protocol), where
                assert page["time"] == pytest.approx(flow.time, rel=1e-12), where
                assert page["model"] == flow.model


def test_the_cli_views_agree_with_each_other():
    sizes = "1KiB,1MiB,256MiB"
    for kind, gpus, sharp in (("rail", 16, True), ("fat-tree", 16, False)):
        extra = ["--sharp"] if sharp else []
        pred = _cli("predict", "--topology", kind, "--gpus", str(gpus), "--sizes", sizes, *extra)
        swept = _cli("sweep", "--topology", kind, "--nodes", str(gpus), "--sizes", sizes, "--algorithms", "ring",
                     *extra)["best"]
        for p, s in zip(pred, swept, strict=True):
            sim = _cli("simulate", "--topology", kind, "--nodes", str(gpus), "--size", str(p["size"]), *extra)
            pick = (p["best"]["algorithm"], p["best"]["protocol"])
            assert (sim["algorithm"], sim["protocol"]) == pick == (s["algorithm"], s["protocol"])
            assert s["time"] * 1e6 == pytest.approx(p["best"]["time_us"], rel=1e-9)  # sweep: analytical
            assert _same(sim["time"] * 1e6, p["best"]["time_us"], sim["notes"])
    # the pipeline's DP all-reduce is simulate's answer to the same question
    pipe = _cli("pipeline", "--dp", "16", "--grad-mb", "100")["dp_allreduce"]
    sim = _cli("simulate", "--topology", "fat-tree", "--nodes", "16", "--size", "100000000")
    assert (pipe["algorithm"], pipe["protocol"], pipe["time"]) == (sim["algorithm"], sim["protocol"], sim["time"])


def test_a_dgx_h100_preset_is_the_rail_topology():
    """`predict --cluster dgx-h100` and `simulate --topology rail` describe the same machine."""
    for nodes in (1, 2, 4):
        preset, derived = nm.cluster("dgx-h100", nodes), fabric(build_topology("rail", 8 * nodes)).cluster
        for field in ("gpus_per_node", "nodes", "intra_busbw", "nic_gbps", "nics_per_node", "nvls", "sharp",
                      "generation", "cpu_vendor", "intra_hw"):
            assert getattr(preset, field) == getattr(derived, field), (nodes, field)


def test_eight_h100s_all_reduce_1gib_is_nvls_near_the_published_480():
    topo = build_topology("rail", 8)
    flow = simulate(topo, "allreduce", 1 << 30, "auto", "flow")
    pred = nm.select(nm.cluster("dgx-h100", 1), "allreduce", 1 << 30).best
    page = comm.simulate(comm.build("rail", 8), "allreduce", 1 << 30, "auto")
    for algo, busbw in ((flow.algorithm, flow.busbw / 1e9),
                        (pred.algorithm, nm.busbw_gbps("allreduce", 8, 1 << 30, pred.time_us)),
                        (page["algorithm"], page["busbw"] / 1e9)):
        assert algo == "nvls"
        assert busbw == pytest.approx(PUBLISHED_NVLS_BUSBW, rel=0.10)


def test_congestion_is_said_and_the_pick_stays_nccls():
    """An oversubscribed fat-tree: the flow time exceeds NCCL's cost and the result says why."""
    topo = build_topology("fat-tree", 16, oversubscription=4.0)
    res = simulate(topo, "allreduce", 256 << 20, "auto", "flow", routing="ecmp")
    nccl = nm.select(fabric(topo).cluster, "allreduce", 256 << 20).best
    assert (res.algorithm, res.protocol) == (nccl.algorithm, nccl.protocol)
    if res.time * 1e6 > nccl.time_us * 1.02:
        assert any("assumes no shared links" in n for n in res.notes)


def test_a_fabric_that_cannot_run_an_algorithm_names_it():
    from hcf_sim.errors import HcfError

    with pytest.raises(HcfError, match="nvls cannot run allreduce on fat-tree"):
        simulate(build_topology("fat-tree", 16), "allreduce", 1 << 20, "nvls")


def test_published_logs_are_predicted_and_errors_are_reported_apart_from_the_fit():
    from pathlib import Path

    from hcf_sim.calibration import nvls_fit
    from hcf_sim.calibration.published import FIT_LOG, GOAL, table

    folder = Path(__file__).parent / "fixtures" / "published"
    logs = sorted(folder.glob("*.txt"))
    assert FIT_LOG in [p.name for p in logs]
    launch, checks = table(folder)
    assert 0 < launch < 20  # us per extra GPU a thread launches on: a kernel launch, not a fudge
    assert [c["file"] for c in checks] == [p.name for p in logs]  # every fixture reported
    modelled = [c for c in checks if "not_modelled" not in c]
    assert all(c["not_modelled"] for c in checks if c not in modelled)  # a log left out says why
    for c in modelled:
        assert c["source"].startswith("https://"), c["file"]  # every fixture names its source
        assert c["rows"] and (c["median_error_ge_1mib"] is not None or c["median_error_lt_1mib"] is not None)
        fitted = {r["size"] for r in c["rows"] if r["fitted"]}
        sizes = sorted({r["size"] for r in c["rows"]})
        if c["net"] is not None:  # a multi-node log: its network fitted on every other size, the rest checked
            assert fitted == set(sizes[::2]) == c["net"].fitted_sizes, c["file"]
        elif c["nvls"] is not None:  # the NVLS step's fit log: every other size fitted, the rest checked
            assert c["file"] == nvls_fit.FIT_LOG and fitted == set(sizes[::2]) == c["nvls"].fitted_sizes
        else:  # one node: only the launch fit log has fitted sizes
            assert bool(fitted) == (c["file"] == FIT_LOG), c["file"]
    by_file = {c["file"]: c for c in modelled}
    # every row that meets issue 52's goal today keeps meeting it (held-out sizes only)
    for name, bands in GOAL_MET.items():
        for band in bands:
            key = "median_error_ge_1mib" if band == ">= 1 MiB" else "median_error_lt_1mib"
            assert by_file[name][key] <= GOAL[band], (name, band, by_file[name][key])
    # the NVLS step the simulator uses is the one fitted here, and only the fit log was fitted on
    assert by_file[nvls_fit.FIT_LOG]["nvls"].step_us == nvls_fit.stored_step_us()
    assert [c["file"] for c in modelled if c["nvls"]] == [nvls_fit.FIT_LOG]
    # the run's NCCL_ALGO=RING is honoured: the model runs the ring, not NVLS
    ring = by_file["all_reduce_h100_ring_8.txt"]
    assert {r["pick"].split("/")[0] for r in ring["rows"]} == {"ring"}
    # and NCCL_ALGO=COLLNETCHAIN runs the CollNet chain, whose NICs bound nothing (rate not fitted)
    chain = by_file["all_reduce_h100_ib_sharp_96.txt"]
    assert {r["pick"] for r in chain["rows"]} == {"collnet_chain/Simple"} and not chain["net"].nic_bound


def test_the_published_table_command_reports_every_fixture():
    import subprocess
    import sys
    from pathlib import Path

    folder = Path(__file__).parent / "fixtures" / "published"
    out = subprocess.run([sys.executable, "-m", "hcf_sim.calibration.published", str(folder)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for path in folder.glob("*.txt"):
        assert f"| {path.name}" in out.stdout, path.name
    assert "fitted on every other size" in out.stdout


def test_a_published_log_without_its_system_line_names_the_file(tmp_path):
    from hcf_sim.calibration.published import check
    from hcf_sim.errors import HcfError

    bad = tmp_path / "log.txt"
    bad.write_text("# hcf system: rail --nodes sixteen\n")
    with pytest.raises(HcfError, match=r"log.txt:1: expected '# hcf system"):
        check(bad)


def test_a100_servers_on_nvlink3_run_the_ring_at_nccls_nvlink_rate():
    from hcf_sim.fabric.topology import build_topology
    from hcf_sim.service import simulate

    res = simulate(build_topology("rail", 8, intra="nvlink3"), "allreduce", 1 << 30)
    assert res.algorithm == "ring"  # Ampere has no NVLS
    assert res.busbw / 1e9 == pytest.approx(240.0, rel=0.05)  # NCCL's SM80 20 GB/s x 12 links


def test_two_nvswitch_nodes_without_sharp_reduce_by_nvls_tree_above_the_rings_nic_bound():
    from hcf_sim.fabric.topology import build_topology
    from hcf_sim.service import simulate

    topo = build_topology("rail", 16, "ib_ndr")
    res = simulate(topo, "allreduce", 8 << 30)
    assert res.algorithm == "nvls_tree"
    ring = simulate(topo, "allreduce", 8 << 30, "ring")
    assert res.busbw > ring.busbw * 1.2  # the ring is bound by the NICs; the tree crosses them once


def test_nccl_proto_restricts_the_protocol_as_it_restricts_nccl():
    from hcf_sim.calibration.published import allowed_protocols
    from hcf_sim.errors import HcfError
    from hcf_sim.service import tuned

    assert allowed_protocols({}) is None and allowed_protocols({"NCCL_PROTO": "LL,LL128,Simple"}) is None
    assert allowed_protocols({"NCCL_PROTO": "Simple"}) == {"Simple"}
    assert allowed_protocols({"NCCL_PROTO": "^LL"}) == {"LL128", "Simple"}
    with pytest.raises(HcfError, match="unknown protocol 'll256'"):
        allowed_protocols({"NCCL_PROTO": "LL256"})
    topo = build_topology("rail", 16)
    free = tuned(topo, "allreduce", 1 << 10)
    assert free.protocol != "Simple"  # 1 KiB is latency-bound: NCCL picks LL or LL128
    forced = tuned(topo, "allreduce", 1 << 10, protocol="Simple")
    assert forced.protocol == "Simple" and forced.time > free.time and "forced" in forced.selection
    with pytest.raises(HcfError, match="with LL on"):
        tuned(topo, "allreduce", 1 << 10, "nvls_tree", protocol="LL")


def test_collnet_chain_is_timed_at_the_node_nvlink_rate_and_every_view_agrees():
    topo = build_topology("rail", 32, "ib_ndr", sharp=True)
    cluster = fabric(topo).cluster
    res = simulate(topo, "allreduce", 1 << 30, "collnet_chain")
    assert res.algorithm == "collnet_chain" and res.protocol == "Simple"
    # the chain sends every byte up and the result down each GPU's NVLink: half the node's bus rate
    assert nm.algbw_gbps(cluster, "allreduce", "collnet_chain", "Simple") == pytest.approx(cluster.intra_busbw / 2)
    assert res.time * 1e6 == pytest.approx(res.terms["nccl_time"] * 1e6, rel=0.02)  # free links: NCCL's own time
    assert "collnet_chain" in {c.algorithm for c in nm.select(cluster, "allreduce", 1 << 30).candidates}
    assert "collnet_chain" in nm.select(fabric(build_topology("rail", 32, "ib_ndr")).cluster,
                                        "allreduce", 1 << 30).excluded
