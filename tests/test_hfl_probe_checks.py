"""The probe's cross-checks as pure functions, fed with what real machines recorded
(tests/data/hosts): they pass on any host, with or without gcc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from uol_core.hfl.crosscheck import (
    FmaMeasurements,
    agreeing_pair,
    check_core_facts,
    check_peaks,
    settle_bandwidth,
)
from uol_core.hfl.probe import EFFORT, curve_top_bytes, stream_array_bytes
from uol_core.hfl.sysinfo import OsClock, isa_table, os_clock_from, widest_vector_isa

HOSTS = Path(__file__).parent / "data" / "hosts"
TABLE = isa_table()
PLAUSIBLE = TABLE["plausible"]
MiB = 1 << 20


def _recorded(host: str, probe_file: str = "probe.json") -> tuple[FmaMeasurements, OsClock, dict]:
    data = json.loads((HOSTS / host / probe_file).read_text())
    cpufreq_absent = "cannot access" in (HOSTS / host / "cpufreq-sysfs.txt").read_text()
    assert cpufreq_absent  # both recorded guests expose no cpufreq; the parser sees {}
    os_clock = os_clock_from((HOSTS / host / "cpuinfo-cpu0.txt").read_text(), {})
    return FmaMeasurements.from_probe_json(data), os_clock, widest_vector_isa(data["isa"])


def _verdicts(facts) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for check in facts.checks:
        out.setdefault(check.fact, set()).add(check.verdict)
    return out


def _assert_done_when(facts, os_clock: OsClock, m: FmaMeasurements, vec: dict) -> None:
    """The issue's bar: clock 0.7-2.0x the OS (or the rejection said), latency in the ISA's
    range, the 1-thread peak 0.6-1.1x of units x lanes x 2 x clock."""
    clock = facts.clock_ghz.value
    low, high = PLAUSIBLE["clock_vs_os"]
    assert low <= clock / os_clock.reference_ghz <= high
    lat = vec["fma_latency_cycles"]
    assert lat["min"] <= facts.fma_latency_cycles.value <= lat["max"]
    theory = facts.fma_units.value * (m.vector_bits // 32) * 2 * clock
    low, high = PLAUSIBLE["peak_vs_theory"]
    assert low <= m.fma_gflops["fp32"]["1"] / theory <= high


def test_xeon_amx_recording_rejects_its_22_ghz_clock() -> None:
    m, os_clock, vec = _recorded("xeon-avx512-amx")
    assert os_clock.reference_source == "/proc/cpuinfo cpu MHz"
    assert os_clock.reference_ghz == pytest.approx(2.6, abs=0.01)
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert facts.rejected() == ["clock_ghz"]
    assert "measured 22.2 GHz rejected: 8.5x the OS frequency 2.6 GHz" in facts.clock_ghz.source
    # 246.71 GFLOP/s on one thread = 2 units x 16 lanes x 2 x 3.85 GHz; latency 4 cycles
    assert facts.clock_ghz.value == pytest.approx(3.855, abs=0.01)
    assert (facts.fma_units.value, facts.fma_latency_cycles.value) == (2, 4)
    assert facts.clock_ghz.prov == "measured" and facts.fma_units.prov == "measured"
    _assert_done_when(facts, os_clock, m, vec)
    assert _verdicts(facts)["peak_gflops.fp32"] == {"ok"}  # 2 vCPUs there are 2 cores


def test_figures_quoted_in_the_bug_report_give_the_same_verdict() -> None:
    """clock 22.1 GHz, OS 2.6 GHz, 246.9 GFLOP/s on one thread, latency 21, units 1."""
    m = FmaMeasurements(22.1, 21 / 22.1, {"fp32": {"1": 246.9, "2": 493.6},
                                          "fp64": {"1": 123.2, "2": 246.7}}, 512)
    os_clock = OsClock({"/proc/cpuinfo cpu MHz": 2.6}, "/proc/cpuinfo cpu MHz")
    vec = widest_vector_isa(["avx512f"])
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert "clock_ghz" in facts.rejected()
    assert (facts.fma_units.value, facts.fma_latency_cycles.value) == (2, 4)
    _assert_done_when(facts, os_clock, m, vec)


def test_emerald_rapids_recordings_before_and_after_the_fix() -> None:
    m, os_clock, vec = _recorded("xeon-avx512-emr", "probe-v1.json")
    assert m.clock_ghz > 7 and os_clock.reference_ghz == pytest.approx(2.1)
    before = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert before.rejected() == ["clock_ghz"]
    assert before.fma_units.value == 2
    _assert_done_when(before, os_clock, m, vec)
    m, os_clock, vec = _recorded("xeon-avx512-emr")
    after = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert after.rejected() == []
    assert after.clock_ghz.value == pytest.approx(m.clock_ghz, abs=0.001)
    _assert_done_when(after, os_clock, m, vec)


def test_zen5_recording_keeps_its_clock_and_reports_a_contended_minute() -> None:
    """An AMD Zen 5 guest: 3.62 GHz against an OS base of 2.6 GHz (boost, kept), 2 units of
    512 bits at 4 cycles; its 2-thread peak equal to its 1-thread one is said, not hidden."""
    m, os_clock, vec = _recorded("epyc-zen5-avx512")
    assert os_clock.reference_ghz == pytest.approx(2.596, abs=0.01)
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert facts.rejected() == []
    assert facts.clock_ghz.value == pytest.approx(3.616, abs=0.01)
    assert (facts.fma_units.value, facts.fma_latency_cycles.value) == (2, 4)
    _assert_done_when(facts, os_clock, m, vec)
    two_threads = [c for c in facts.checks
                   if c.fact == "peak_gflops.fp32" and "2 thread" in c.detail]
    assert [c.verdict for c in two_threads] == ["warning"]
    assert "share FMA units" in two_threads[0].detail


def test_avx2_recording_peaks_match_units_lanes_and_clock() -> None:
    facts = json.loads((HOSTS / "avx2-dev" / "facts.json").read_text())
    lanes = facts["vector_bits"] // 32
    checks = check_peaks(facts["fma_gflops"], facts["fma_units"], lanes, facts["clock_ghz"],
                         PLAUSIBLE)
    assert [c.verdict for c in checks] == ["ok", "ok"]
    vec = widest_vector_isa(facts["isa"])
    assert vec["flag"] == "avx2"
    assert vec["fma_latency_cycles"]["min"] <= facts["fma_latency_cycles"] \
        <= vec["fma_latency_cycles"]["max"]
    # the same peaks read with 1 unit would be twice the theory: the check would say so
    assert {c.verdict for c in check_peaks(facts["fma_gflops"], 1, lanes, facts["clock_ghz"],
                                           PLAUSIBLE)} == {"warning"}


# Constructed cases (not recordings): each moves one measurement of the recorded AMX Xeon
# out of its range, to show which check catches it and what replaces it.

def _xeon() -> tuple[FmaMeasurements, OsClock, dict]:
    return _recorded("xeon-avx512-amx")


def test_two_hyperthreads_of_one_core_are_reported_not_hidden() -> None:
    m, os_clock, vec = _xeon()
    m.fma_gflops = {"fp32": {"1": 246.71, "2": 250.0}, "fp64": {"1": 123.17, "2": 125.0}}
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    two = [c for c in facts.checks if c.fact == "peak_gflops.fp32" and " 2 thread(s)" in c.detail]
    assert two[0].verdict == "warning" and "share FMA units" in two[0].detail
    assert "1.01x of 1 thread" in two[0].detail
    _assert_done_when(facts, os_clock, m, vec)  # the 1-thread facts are unaffected


def test_latency_outside_the_isa_range_falls_back_to_the_table() -> None:
    m, os_clock, vec = _xeon()
    m.clock_ghz = 3.8  # a good clock, then a 12-cycle FMA (a folded or interrupted chain)
    m.fma_latency_ns = 12 / 3.8
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert facts.rejected() == ["fma_latency_cycles"]
    assert facts.fma_latency_cycles.value == vec["fma_latency_cycles"]["typical"]
    assert facts.fma_latency_cycles.prov == "datasheet"
    assert "measured 12 cycles rejected: outside the ISA's documented 3-6 cycles" \
        in facts.fma_latency_cycles.source
    assert "isa.toml avx512f" in facts.fma_latency_cycles.source


def test_without_an_os_frequency_the_fma_peak_still_checks_the_clock() -> None:
    m, _, vec = _xeon()
    silent = OsClock({}, "")
    facts = check_core_facts(m, silent, vec, PLAUSIBLE)
    assert "rejected" in _verdicts(facts)["clock_ghz"]  # 22 GHz needs 0.17 FMA units
    assert "warning" in _verdicts(facts)["clock_ghz"]
    assert facts.clock_ghz.value == pytest.approx(3.855, abs=0.01)


def test_when_nothing_fits_the_os_frequency_is_used_and_units_come_from_the_table() -> None:
    m, os_clock, vec = _xeon()
    m.fma_latency_ns = 0.05  # no units x latency split fits the ISA ranges
    facts = check_core_facts(m, os_clock, vec, PLAUSIBLE)
    assert facts.clock_ghz.value == pytest.approx(2.6, abs=0.01)
    assert facts.clock_ghz.prov == "datasheet"
    assert facts.clock_ghz.source.startswith("/proc/cpuinfo cpu MHz; measured 22.2 GHz rejected")
    assert set(facts.rejected()) >= {"clock_ghz", "fma_latency_cycles", "fma_units"}
    assert facts.fma_units.value == vec["fma_units"]["typical"]


def test_os_clock_prefers_the_nominal_base_and_ignores_momentary_mhz_under_cpufreq() -> None:
    text = "processor\t: 0\nmodel name\t: Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz\ncpu MHz\t\t: 800.0\n"
    clock = os_clock_from(text, {"cpuinfo_max_freq": 3900000, "scaling_max_freq": 3900000})
    assert (clock.reference_source, clock.reference_ghz) == ("/proc/cpuinfo model name", 3.4)
    no_brand = os_clock_from("cpu MHz\t\t: 800.0\n", {"cpuinfo_max_freq": 3900000})
    assert no_brand.reference_source == "cpufreq cpuinfo_max_freq"  # 800 MHz is idle, not base
    vm = os_clock_from("cpu MHz\t\t: 2599.998\n", {}, cpuid_mhz=None)
    assert vm.reference_source == "/proc/cpuinfo cpu MHz"
    cpuid = os_clock_from("cpu MHz\t\t: 2599.998\n", {}, cpuid_mhz=(2600, 3900))
    assert (cpuid.reference_source, cpuid.reference_ghz) == ("cpuid 0x16 base", 2.6)
    assert os_clock_from("", {}).describe() == "the OS reports no CPU frequency"


def test_bandwidth_settles_on_two_agreeing_runs_or_reports_the_spread() -> None:
    tolerance = PLAUSIBLE["bandwidth_agreement"]
    # two probes minutes apart on the AMX Xeon: 29.7 and 10.7 GB/s
    unsettled = settle_bandwidth([29.7, 10.7], tolerance)
    assert not unsettled.agreed and "spread 64%" in unsettled.detail
    settled = settle_bandwidth([29.7, 10.7, 11.5], tolerance)
    assert settled.agreed and settled.gbps == 11.5
    assert agreeing_pair([10.0, 12.0, 30.0, 31.0], tolerance) == (30.0, 31.0)
    assert agreeing_pair([10.0, 12.0], tolerance) is None
    # this machine, full probe: a clean 13.2 GB/s run, then two at 19% CPU that agree
    min_util = PLAUSIBLE["bandwidth_min_cpu_utilization"]
    busy = settle_bandwidth([13.16, 3.75, 3.44], tolerance, [0.95, 0.19, 0.19], min_util)
    assert not busy.agreed and busy.gbps == 13.16
    assert "2 run(s) below 90% CPU utilisation left out" in busy.detail
    all_busy = settle_bandwidth([3.75, 3.44], tolerance, [0.19, 0.2], min_util)
    assert not all_busy.agreed and "every run got less than 90%" in all_busy.detail
    clean = settle_bandwidth([13.16, 3.75, 12.5], tolerance, [0.95, 0.19, 0.97], min_util)
    assert clean.agreed and clean.gbps == 13.16 and "left out" in clean.detail


def test_stream_arrays_fit_the_memory_budget_of_a_small_machine() -> None:
    llc = 480 * MiB  # what the 2-vCPU AMX guest reports
    for quick in (True, False):
        size = stream_array_bytes(llc, 8 << 30, quick)
        assert size <= EFFORT[quick]["max_array_bytes"] and 3 * size <= (8 << 30) // 4
        assert curve_top_bytes(llc, 8 << 30, quick) <= (8 << 30) // 4
    assert stream_array_bytes(llc, 1 << 30, quick=False) * 12 <= 1 << 30
    assert stream_array_bytes(8 * MiB, 64 << 30, quick=False) == 32 * MiB  # 4x LLC when it fits
    assert stream_array_bytes(0, 0, quick=True) == 32 * MiB  # no LLC, no meminfo: the floor


@pytest.mark.parametrize("flag", [v["flag"] for v in TABLE["vector_isa"]])
def test_every_vector_isa_documents_its_fma_ranges(flag) -> None:
    vec = widest_vector_isa([flag])
    for key in ("fma_latency_cycles", "fma_units"):
        entry = vec[key]
        assert 1 <= entry["min"] <= entry["typical"] <= entry["max"], (flag, key)
    assert vec["fma_source"]


def test_a_starved_peak_run_is_measured_again_and_the_best_kept() -> None:
    from uol_core.hfl.probe import RETRIES_STARVED, best_unstarved

    def runs(*results):
        queue = list(results)
        calls = []

        def measure():
            calls.append(1)
            return queue.pop(0)
        return measure, calls

    # the 2-thread run that read one core's figure while another process held the other
    measure, calls = runs((240.3, 0.52), (461.0, 0.99), (999.0, 1.0))
    assert best_unstarved(measure, 0.9) == 461.0 and len(calls) == 2
    measure, calls = runs(*[(240.0 + i, 0.5) for i in range(RETRIES_STARVED + 2)])
    assert best_unstarved(measure, 0.9) == 240.0 + RETRIES_STARVED
    assert len(calls) == RETRIES_STARVED + 1
    # a run with its whole share of CPU time that still did not scale (a hypervisor's steal,
    # a neighbour on the physical core): measured again while below the floor
    measure, calls = runs((240.3, 1.0), (459.6, 1.0), (999.0, 1.0))
    assert best_unstarved(measure, 0.9, floor=0.75 * 2 * 235.7) == 459.6 and len(calls) == 2
    # SMT siblings never scale: the retries end and the best stays
    measure, calls = runs(*[(236.0 + i, 1.0) for i in range(RETRIES_STARVED + 2)])
    assert best_unstarved(measure, 0.9, floor=353.0) == 236.0 + RETRIES_STARVED
    # a good first run is the answer
    measure, calls = runs((470.0, 1.0), (480.0, 1.0))
    assert best_unstarved(measure, 0.9, floor=353.0) == 470.0 and len(calls) == 1
