"""Host probe (quick sizes) on this machine: positive, cross-checked measurements, cached per
machine fingerprint. The cross-checks on recorded machines: test_hfl_probe_checks.py."""

from __future__ import annotations

import json
import platform
import re
import shutil
import time
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.hfl import load_target
from uol_core.hfl.crosscheck import FmaMeasurements
from uol_core.hfl.gpu import check_device
from uol_core.hfl.probe import (
    EFFORT,
    cache_level_bandwidth,
    cache_path,
    curve_top_bytes,
    probe_host,
)
from uol_core.hfl.probe_c import probe_assembly
from uol_core.hfl.sysinfo import host_info, isa_table, widest_vector_isa

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
    for field in ("peak_gflops.fp32", "peak_gflops.fp64", "mem_bandwidth_gbps", "l1d_bytes"):
        assert host.provenance(field).kind == "measured", field
    # a core fact is measured, or its provenance says which measurement was rejected and why
    for field in ("clock_ghz", "fma_units", "fma_latency_cycles"):
        prov = host.provenance(field)
        assert prov.kind == "measured" or "rejected:" in prov.source, (field, prov)
    assert host.l1d_bytes > 0 and host.l2_bytes > host.l1d_bytes
    # one fork and join of the host's cores: measured, from tens of cycles (one core) to a
    # few hundred thousand (a hundred cores waking on a loaded host)
    assert host.provenance("fork_join_cycles").kind == "measured"
    assert 10 <= host.fork_join_cycles <= 1_000_000


def test_fma_peaks_are_positive_and_scale_with_threads(host) -> None:
    """What holds on any machine: more threads never lose much and never gain more than
    linearly (2 vCPUs may be hyperthreads of one core: then 2 threads reach ~1x, not 2x),
    and fp64 has half the lanes of fp32."""
    fma = host.measurements["fma_gflops"]
    assert all(v > 0 for dtype in fma.values() for v in dtype.values())
    top = str(host.cores)
    assert host.peak_gflops["fp32"] == fma["fp32"][top]
    assert 0.3 < fma["fp64"]["1"] / fma["fp32"]["1"] < 0.7
    for dtype in ("fp32", "fp64"):
        for threads, gflops in fma[dtype].items():
            assert 0.6 < gflops / fma[dtype]["1"] < 1.15 * int(threads), (dtype, threads)


def test_host_facts_pass_their_cross_checks(host) -> None:
    m = host.measurements
    plausible = isa_table()["plausible"]
    os_ghz = m["os_clock"]["readings_ghz"].get(m["os_clock"]["reference"])
    clock_prov = host.provenance("clock_ghz")
    if os_ghz and "rejected:" not in clock_prov.source:
        low, high = plausible["clock_vs_os"]
        assert low <= host.clock_ghz / os_ghz <= high
    lat = widest_vector_isa(host.isa)["fma_latency_cycles"]
    assert lat["min"] <= host.fma_latency_cycles <= lat["max"]
    expected = host.fma_units * host.vector_bits / 32 * 2 * host.clock_ghz
    ratio = m["fma_gflops"]["fp32"]["1"] / expected
    low, high = plausible["peak_vs_theory"]
    warned = [c for c in m["cross_checks"] if c["fact"] == "peak_gflops.fp32"
              and c["verdict"] == "warning" and " 1 thread(s)" in c["detail"]]
    assert low <= ratio <= high or warned
    assert {c["fact"] for c in m["cross_checks"]} >= {"clock_ghz", "fma_latency_cycles",
                                                       "fma_units", "mem_bandwidth_gbps"}


def test_stream_is_below_l1_bandwidth_and_curve_shows_levels(host) -> None:
    m = host.measurements
    levels = m["cache_bandwidth_gbps"]
    assert host.mem_bandwidth_gbps > 0
    assert host.mem_bandwidth_gbps < levels["l1"]
    assert levels["l1"] > levels.get("dram", 0)
    sizes = [size for size, _ in m["bandwidth_curve"]]
    assert sizes == sorted(sizes) and sizes[0] <= host.l1d_bytes / 2
    llc = max(c["bytes"] for c in m["caches"].values())
    top = curve_top_bytes(llc, host_info().mem_available_bytes, quick=True)
    assert 2 * sizes[-1] > top  # the curve reaches the last octave below its budgeted top
    runs = m["stream_runs_gbps"]
    assert host.mem_bandwidth_gbps in runs or not m["stream_agreed"]
    assert 1 <= len(runs) <= EFFORT[True]["stream_max_runs"]


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
    for key in ("peak_gflops_fp32", "peak_gflops_fp64", "stream_gbps", "cores", "isa", "caches",
                "raw", "os_clock", "cross_checks", "rejected", "provenance"):
        assert key in data
    assert FmaMeasurements.from_probe_json(data).clock_ghz == data["raw"]["clock_ghz"]
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


# The kernels must time what they claim; gcc decides the instructions, so read what it emitted.
# Compiled for fixed x86-64 levels, not the host: these tests run on any x86-64 host with gcc.
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                              reason="checks x86-64 assembly (vfmadd, add)")


def _function_body(asm: str, name: str) -> list[str]:
    lines = asm.splitlines()
    start = lines.index(f"{name}:")
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(".size"))
    return [line.strip() for line in lines[start:end]]


def _longest_chain(body: list[str], pattern: str) -> int:
    """Longest run of consecutive matching instructions writing the same destination register,
    ignoring loop bookkeeping (the counter's add/cmp) in between."""
    best = run = 0
    last_dest = None
    for line in body:
        match = re.match(pattern, line)
        if match:
            dest = line.rsplit(",", 1)[-1].strip()
            run = run + 1 if dest == last_dest else 1
            last_dest = dest
            best = max(best, run)
        elif not re.match(r"(addq|subq|incq|decq|cmpq)\s+\$?-?\d*,?\s*%r\w+|(cmpq|jne|jb)\s", line):
            run, last_dest = 0, None
    return best


@x86_only
@pytest.mark.parametrize("march", ["haswell", "sapphirerapids"])
def test_clock_kernel_is_a_register_add_chain(march) -> None:
    """Recent cores fold chains of add-immediate at rename: the addend must be a register."""
    body = _function_body(probe_assembly(256, 12, march), "t_clock")
    chain = _longest_chain(body, r"addq\s+%\w+, %\w+$")
    assert chain >= 16, "\n".join(body)
    adds_immediate = [line for line in body if re.match(r"(addq|leaq)\s+\$?\d+\(?%", line)
                      and "rsp" not in line and "rip" not in line]
    assert len(adds_immediate) <= 2, adds_immediate  # only the loop counter


@x86_only
@pytest.mark.parametrize("march", ["haswell", "sapphirerapids"])
def test_latency_kernel_is_a_dependent_fma_chain(march) -> None:
    body = _function_body(probe_assembly(256, 12, march), "t_lat32")
    assert _longest_chain(body, r"vfmadd\d+ss\s") >= 16, "\n".join(body)


@x86_only
@pytest.mark.parametrize(("march", "bits", "reg"), [("haswell", 256, "ymm"),
                                                     ("sapphirerapids", 512, "zmm")])
def test_peak_kernel_runs_independent_vector_fma_chains(march, bits, reg) -> None:
    chains = {256: 12, 512: 28}[bits]
    asm = probe_assembly(bits, chains, march)
    fmas = [line for line in _function_body(asm, "t_fma32._omp_fn.0")
            if re.match(rf"vfmadd\d+ps\s.*%{reg}\d+$", line)]
    assert len({line.rsplit(",", 1)[-1] for line in fmas}) >= chains  # one register per chain
