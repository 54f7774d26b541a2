"""Cross-checks of the host probe's measurements: nothing measured enters a target unchecked.

Pure functions over what the probe measured and what the OS reports, so recorded outputs of
real machines can be replayed in tests on any host. The plausible ranges and fallback values
come from the ISA table (isa.toml), never from this file.

The three core facts pin each other down:
  clock      dependent register adds per second; checked against the OS frequency and
             against the 1-thread FMA peak, which must need a whole number of FMA units
  latency    one dependent FMA chain (seconds) x clock; checked against the ISA's range
  units      FMAs in flight (throughput x latency, needs no clock) / latency in cycles
When the clock fails, FMAs in flight still say how many units x how many cycles the core
has; the one split that fits the ISA's documented ranges gives units, latency and the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from uol_core.hfl.sysinfo import OsClock


@dataclass
class FmaMeasurements:
    """What the probe's core-local kernels measured, before any check."""

    clock_ghz: float  # dependent register adds per nanosecond
    fma_latency_ns: float  # one step of a dependent scalar FMA chain
    fma_gflops: dict[str, dict[str, float]]  # dtype -> thread count -> GFLOP/s
    vector_bits: int

    @classmethod
    def from_probe_json(cls, data: dict[str, Any]) -> FmaMeasurements:
        """From `uol hw probe --json` output: its `raw` block, or (older probes, which printed
        only derived figures) back from clock_ghz and fma_latency_cycles."""
        if "raw" in data:
            raw = data["raw"]
            return cls(raw["clock_ghz"], raw["fma_latency_ns"], data["fma_gflops"],
                       data["vector_bits"])
        return cls(data["clock_ghz"], data["fma_latency_cycles"] / data["clock_ghz"],
                   data["fma_gflops"], data["vector_bits"])


@dataclass
class Check:
    """One cross-check: the fact, 'ok' | 'rejected' | 'warning', and what was compared."""

    fact: str
    verdict: str
    detail: str


@dataclass
class CheckedFact:
    """A value ready for the target record: value, HFL provenance kind and source."""

    value: float
    prov: str
    source: str

    def entry(self) -> dict[str, Any]:
        """The `{value, prov, source}` entry of an HFL record."""
        return {"value": self.value, "prov": self.prov, "source": self.source}


@dataclass
class CoreFacts:
    """Clock, FMA latency and units after their cross-checks, and the checks themselves."""

    clock_ghz: CheckedFact
    fma_latency_cycles: CheckedFact
    fma_units: CheckedFact
    checks: list[Check] = field(default_factory=list)

    def rejected(self) -> list[str]:
        """Facts whose measurement was rejected."""
        return [c.fact for c in self.checks if c.verdict == "rejected"]

    def checks_json(self) -> list[dict[str, str]]:
        """The checks as JSON-ready dicts."""
        return [asdict(c) for c in self.checks]


def _within(value: float, bounds: list[float]) -> bool:
    return bounds[0] <= value <= bounds[1]


def _rate1(m: FmaMeasurements) -> float:
    """1-thread vector FMA instructions per nanosecond (fp32 peak / (lanes x 2))."""
    return m.fma_gflops["fp32"]["1"] / (2 * (m.vector_bits // 32))


def check_core_facts(m: FmaMeasurements, os_clock: OsClock, vec: dict[str, Any],
                     plausible: dict[str, Any]) -> CoreFacts:
    """Clock, FMA latency and FMA units from raw measurements, each checked (see module doc).

    `vec` is the host's vector ISA entry of isa.toml (ranges and typical values), `plausible`
    its [plausible] table.
    """
    lanes = m.vector_bits // 32
    lat_range, unit_range = vec["fma_latency_cycles"], vec["fma_units"]
    peak_bounds, clock_bounds = plausible["peak_vs_theory"], plausible["clock_vs_os"]
    peak1, rate1 = m.fma_gflops["fp32"]["1"], _rate1(m)
    os_ghz = os_clock.reference_ghz
    in_flight = rate1 * m.fma_latency_ns  # FMAs the core keeps busy: units x latency cycles
    checks: list[Check] = []
    isa_note = f"isa.toml {vec['flag']}: {vec['fma_source']}"

    def fitting_units(clock: float) -> list[tuple[float, int]]:
        """(distance from 1, units) for each unit count that explains peak1 at this clock."""
        out = []
        for units in range(unit_range["min"], unit_range["max"] + 1):
            ratio = peak1 / (units * lanes * 2 * clock)
            if _within(ratio, peak_bounds):
                out.append((abs(1 - ratio), units))
        return sorted(out)

    reasons = []
    if os_ghz is not None:
        vs_os = m.clock_ghz / os_ghz
        if not _within(vs_os, clock_bounds):
            reasons.append(f"{vs_os:.2g}x the OS frequency {os_clock.describe()}, outside "
                           f"{clock_bounds[0]}-{clock_bounds[1]}x")
    else:
        checks.append(Check("clock_ghz", "warning", "the OS reports no CPU frequency: the clock "
                                                    "is checked against the FMA peak only"))
    if not fitting_units(m.clock_ghz):
        reasons.append(f"the 1-thread FMA peak {peak1:g} GFLOP/s would need "
                       f"{peak1 / (lanes * 2 * m.clock_ghz):.2g} FMA units at this clock "
                       f"({vec['flag']} cores have {unit_range['min']}-{unit_range['max']})")
    if not reasons:
        clock = CheckedFact(round(m.clock_ghz, 3), "measured",
                            "host probe: dependent register adds per second (1 cycle each, "
                            "isa.toml), checked against the OS frequency and the FMA peak")
        units = fitting_units(m.clock_ghz)[0][1]
        how = "the add-chain measurement, checked"
        checks.append(Check("clock_ghz", "ok", f"measured {m.clock_ghz:.3g} GHz"
                            + (f" = {m.clock_ghz / os_ghz:.2f}x the OS frequency "
                               f"{os_clock.describe()}" if os_ghz else "")
                            + f"; the 1-thread FMA peak {peak1:g} GFLOP/s fits {units} units"))
    else:
        rejected = f"measured {m.clock_ghz:.3g} GHz rejected: {'; '.join(reasons)}"
        clock, units, how = _clock_without_measurement(m, os_clock, vec, clock_bounds, in_flight,
                                                       rejected, fitting_units)
        checks.append(Check("clock_ghz", "rejected", f"{rejected}; using {clock.value} GHz "
                                                     f"({how})"))
    clock_ghz = float(clock.value)
    latency = _check_latency(m.fma_latency_ns * clock_ghz, m.fma_latency_ns, lat_range,
                             isa_note, checks)
    units_fact = _check_units(units, in_flight, m.fma_latency_ns * clock_ghz, unit_range,
                              isa_note, how, checks)
    checks += check_peaks(m.fma_gflops, int(units_fact.value), lanes, clock_ghz, plausible)
    return CoreFacts(clock, latency, units_fact, checks)


def _clock_without_measurement(m: FmaMeasurements, os_clock: OsClock, vec: dict[str, Any],
                               clock_bounds: list[float], in_flight: float, rejected: str,
                               fitting_units: Callable[[float], list[tuple[float, int]]]
                               ) -> tuple[CheckedFact, int | None, str]:
    """The clock when its measurement was rejected: from the FMA peak when FMAs in flight split
    into units x latency inside the ISA's ranges (and the OS agrees), else the OS frequency."""
    lat_range, unit_range = vec["fma_latency_cycles"], vec["fma_units"]
    lanes, rate1, os_ghz = m.vector_bits // 32, _rate1(m), os_clock.reference_ghz
    bounds = [lat_range["min"] - 0.5, lat_range["max"] + 0.5]  # a latency rounds to whole cycles
    splits = []
    for units in range(unit_range["min"], unit_range["max"] + 1):
        latency, clock = in_flight / units, rate1 / units
        os_ok = os_ghz is None or _within(clock / os_ghz, clock_bounds)
        if _within(latency, bounds) and os_ok:
            splits.append((abs(latency - lat_range["typical"]), units, clock))
    if splits:
        _, units, clock = min(splits)
        return (CheckedFact(round(clock, 3), "measured",
                            f"host probe: 1-thread FMA peak / ({units} units x {lanes} lanes x 2);"
                            f" {in_flight:.3g} FMAs in flight (throughput x latency) = {units} "
                            f"units x {in_flight / units:.3g} cycles; {rejected}"),
                units, f"1-thread FMA peak / ({units} units x {lanes} lanes x 2)")
    if os_ghz is not None:
        fact = CheckedFact(os_ghz, "datasheet", f"{os_clock.reference_source}; {rejected}")
        how = f"the OS frequency, {os_clock.reference_source}"
    else:
        typical = unit_range["typical"]
        fact = CheckedFact(round(rate1 / typical, 3), "assumed",
                           f"1-thread FMA peak / ({typical} units (isa.toml typical) x {lanes} "
                           f"lanes x 2); {rejected}")
        how = f"FMA peak with the ISA's typical {typical} units"
    fits = fitting_units(float(fact.value))
    return fact, (fits[0][1] if fits else None), how


def _check_latency(cycles: float, latency_ns: float, lat_range: dict[str, int], isa_note: str,
                   checks: list[Check]) -> CheckedFact:
    """FMA latency in whole cycles when inside the ISA's documented range, else the table's."""
    whole = round(cycles)
    span = f"{lat_range['min']}-{lat_range['max']} cycles"
    if lat_range["min"] <= whole <= lat_range["max"]:
        checks.append(Check("fma_latency_cycles", "ok", f"{latency_ns:.3g} ns x clock = "
                            f"{cycles:.3g} cycles, inside the ISA's documented {span}"))
        return CheckedFact(whole, "measured", f"host probe: dependent FMA chain "
                                              f"({latency_ns:.3g} ns per FMA) x clock")
    reason = f"measured {cycles:.3g} cycles rejected: outside the ISA's documented {span}"
    checks.append(Check("fma_latency_cycles", "rejected",
                        f"{reason}; using the ISA table's {lat_range['typical']}"))
    return CheckedFact(lat_range["typical"], "datasheet", f"{isa_note}; {reason}")


def _check_units(units: int | None, in_flight: float, latency_cycles: float,
                 unit_range: dict[str, int], isa_note: str, how: str,
                 checks: list[Check]) -> CheckedFact:
    """FMA units = FMAs in flight / latency in cycles, when a whole count in the ISA's range."""
    per_cycle = in_flight / latency_cycles if latency_cycles > 0 else 0.0
    span = f"{unit_range['min']}-{unit_range['max']}"
    if units is not None:
        checks.append(Check("fma_units", "ok", f"{in_flight:.3g} FMAs in flight / "
                            f"{latency_cycles:.3g} cycles = {per_cycle:.2f} per cycle -> {units} "
                            f"units (ISA range {span})"))
        return CheckedFact(units, "measured", f"host probe: FMAs in flight (1-thread throughput x "
                                              f"dependent-chain latency) / latency in cycles; "
                                              f"clock: {how}")
    reason = (f"measured {per_cycle:.2f} per cycle rejected: no whole count in the ISA's range "
              f"{span} explains the 1-thread FMA peak")
    checks.append(Check("fma_units", "rejected",
                        f"{reason}; using the ISA table's {unit_range['typical']}"))
    return CheckedFact(unit_range["typical"], "datasheet", f"{isa_note}; {reason}")


def check_peaks(fma_gflops: dict[str, dict[str, float]], units: int, lanes32: int,
                clock_ghz: float, plausible: dict[str, Any]) -> list[Check]:
    """Each measured peak against units x lanes x 2 x clock x threads, and fp64 against fp32.

    A multi-thread peak below the range is reported, not corrected: it is what those threads
    attain when the CPUs share FMA units (SMT siblings, vCPUs of one physical core) or others
    hold the cores, and the scaling over 1 thread says which it looks like. (The probe has
    measured again a run that got less than its CPUs: `probe.best_unstarved`.)
    """
    bounds, fp64_bounds = plausible["peak_vs_theory"], plausible["fp64_vs_fp32"]
    checks = []
    for dtype, per_threads in fma_gflops.items():
        lanes = lanes32 if dtype == "fp32" else lanes32 // 2
        for threads, gflops in per_threads.items():
            theory = units * lanes * 2 * clock_ghz * int(threads)
            ratio = gflops / theory
            text = (f"{dtype} {threads} thread(s): {gflops:g} GFLOP/s = {ratio:.2f}x of {units} "
                    f"units x {lanes} lanes x 2 x {clock_ghz:g} GHz x {threads}")
            if _within(ratio, bounds):
                checks.append(Check(f"peak_gflops.{dtype}", "ok", text))
                continue
            if int(threads) > 1 and "1" in per_threads:
                scaling = gflops / per_threads["1"]
                text += (f"; {threads} threads reach {scaling:.2f}x of 1 thread: the CPUs share "
                         "FMA units (SMT siblings, or vCPUs on one physical core) or other "
                         "processes held them")
            checks.append(Check(f"peak_gflops.{dtype}", "warning",
                                text + f" (expected {bounds[0]}-{bounds[1]}x)"))
    for threads, fp64 in fma_gflops.get("fp64", {}).items():
        fp32 = fma_gflops.get("fp32", {}).get(threads)
        if fp32 and not _within(fp64 / fp32, fp64_bounds):
            checks.append(Check("peak_gflops.fp64", "warning",
                                f"{threads} thread(s): fp64 peak is {fp64 / fp32:.2f}x fp32 "
                                f"(half the lanes: expected {fp64_bounds[0]}-{fp64_bounds[1]}x)"))
    return checks


@dataclass
class SettledBandwidth:
    """STREAM figure from repeated runs: the value, whether two runs agreed, the spread."""

    gbps: float
    agreed: bool
    runs: list[float]
    detail: str

    @property
    def spread(self) -> float:
        """(max - min) / max of all runs."""
        return (max(self.runs) - min(self.runs)) / max(self.runs) if self.runs else 0.0


def agreeing_pair(runs: list[float], tolerance: float) -> tuple[float, float] | None:
    """The highest two runs that differ by at most `tolerance` of the larger, or None."""
    best = None
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            if abs(a - b) <= tolerance * max(a, b) and (best is None or min(a, b) > min(best)):
                best = (a, b)
    return best


def settle_bandwidth(runs: list[float], tolerance: float, utils: list[float] | None = None,
                     min_util: float = 0.0) -> SettledBandwidth:
    """The bandwidth two runs agree on (the higher of the pair: a run can only lose time to
    interference), else the median of all runs with the spread stated.

    With `utils` (each run's CPU utilisation), runs below `min_util` (other processes held our
    cores) never settle the figure (two busy runs agreeing prove little) and count only when
    no run got its cores.
    """
    clean = [r for r, u in zip(runs, utils or [1.0] * len(runs)) if u >= min_util]
    considered = clean or runs
    busy = len(runs) - len(clean)
    note = f"; {busy} run(s) below {min_util:.0%} CPU utilisation left out" if busy else ""
    if not clean:
        note = f"; every run got less than {min_util:.0%} of its cores"
    pair = agreeing_pair(clean, tolerance)
    shown = ", ".join(f"{r:g}" for r in runs)
    if pair:
        return SettledBandwidth(max(pair), True, runs,
                                f"{len(runs)} runs ({shown} GB/s): two agree within "
                                f"{tolerance:.0%}{note}")
    ordered = sorted(considered)
    median = ordered[len(ordered) // 2]
    spread = (ordered[-1] - ordered[0]) / ordered[-1] if ordered else 0.0
    return SettledBandwidth(median, False, runs,
                            f"{len(runs)} runs ({shown} GB/s) never agreed within {tolerance:.0%}"
                            f" (spread {spread:.0%}): the median is used; the machine was busy "
                            f"or its memory is shared{note}")
