"""Host probe (quick sizes): positive, consistent measurements, cached per machine fingerprint."""

from __future__ import annotations

import json
import shutil
import time
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.hfl import load_target
from uol_core.hfl.gpu import check_device
from uol_core.hfl.probe import cache_level_bandwidth, cache_path, probe_host
from uol_core.hfl.sysinfo import host_info, widest_vector_isa

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the probe needs gcc")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("uol-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UOL_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def host(cache_dir):
    start = time.perf_counter()
    target = probe_host(quick=True, refresh=True)
    assert time.perf_counter() - start < 30  # the quick probe is meant to take ~5-15 s
    return target


def test_host_record_is_measured_and_complete(host) -> None:
    assert host.name == "host" and host.kind == "cpu"
    assert host.cores == host_info().cores
    assert host.vector_bits == widest_vector_isa(host.isa)["vector_bits"]
    for field in ("peak_gflops.fp32", "peak_gflops.fp64", "mem_bandwidth_gbps", "clock_ghz",
                  "fma_units", "fma_latency_cycles", "l1d_bytes"):
        assert host.provenance(field).kind == "measured", field
    assert host.l1d_bytes > 0 and host.l2_bytes > host.l1d_bytes


def test_fma_peaks_are_positive_and_scale_with_threads(host) -> None:
    fma = host.measurements["fma_gflops"]
    assert all(v > 0 for dtype in fma.values() for v in dtype.values())
    top = str(host.cores)
    assert host.peak_gflops["fp32"] == fma["fp32"][top]
    # fp64 has half the lanes of fp32: its peak is about half (never above)
    assert 0.3 < fma["fp64"]["1"] / fma["fp32"]["1"] < 0.7
    if host.cores >= 2:
        assert fma["fp32"]["2"] > fma["fp32"]["1"]
        assert fma["fp64"]["2"] > fma["fp64"]["1"]
    # hand check: 1-thread peak = FMA units x lanes x 2 x clock, within 25 %
    expected = host.fma_units * host.vector_bits / 32 * 2 * host.clock_ghz
    assert 0.75 < fma["fp32"]["1"] / expected < 1.25


def test_stream_is_below_l1_bandwidth_and_curve_shows_levels(host) -> None:
    m = host.measurements
    levels = m["cache_bandwidth_gbps"]
    assert host.mem_bandwidth_gbps > 0
    assert host.mem_bandwidth_gbps < levels["l1"]
    assert levels["l1"] > levels.get("dram", 0)
    sizes = [size for size, _ in m["bandwidth_curve"]]
    assert sizes == sorted(sizes) and sizes[0] <= host.l1d_bytes / 2
    assert sizes[-1] >= 2 * max(c["bytes"] for c in m["caches"].values())


def test_second_call_is_cached_and_instant(host, cache_dir) -> None:
    start = time.perf_counter()
    again = load_target("host")
    assert time.perf_counter() - start < 1.0
    assert again.peak_gflops == host.peak_gflops
    assert cache_path(host_info()).parent == cache_dir


def test_cli_probe_json_has_the_promised_keys(host) -> None:
    result = CliRunner().invoke(app, ["hw", "probe", "--json", "--quick"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in ("peak_gflops_fp32", "peak_gflops_fp64", "stream_gbps", "cores", "isa", "caches"):
        assert key in data
    assert data["peak_gflops_fp32"] == host.peak_gflops["fp32"]


def test_cache_level_bandwidth_uses_points_inside_each_level() -> None:
    caches = {"l1d": {"bytes": 32768}, "l2": {"bytes": 524288}, "l3": {"bytes": 8 << 20}}
    curve = [[4096, 200], [8192, 210], [16384, 190], [65536, 90], [131072, 100],
             [262144, 95], [1 << 20, 60], [4 << 20, 50], [16 << 20, 20], [32 << 20, 18]]
    # l1: ws <= 16 KiB; l2: 64 KiB < ws <= 256 KiB; l3: 1 MiB < ws <= 4 MiB; dram: ws >= 16 MiB
    assert cache_level_bandwidth(curve, caches, 2) == {"l1": 200, "l2": 97.5, "l3": 50,
                                                        "dram": 19}


def test_gpu_properties_are_checked_against_the_matching_record() -> None:
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132,
                            warp_size=32, regs_per_multiprocessor=65536,
                            shared_memory_per_block_optin=232448, L2_cache_size=52428800)
    report = check_device(props)
    assert report["target"] == "h100-sxm"
    assert report["checks"] and all(c["ok"] for c in report["checks"])
    odd = check_device(SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=114))
    assert odd["checks"] == [{"field": "cores", "record": 132, "device": 114, "ok": False}]
    assert check_device(SimpleNamespace(name="Some Other GPU"))["target"] is None
