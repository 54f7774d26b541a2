"""Host probe: measure FMA peaks, STREAM triad and a bandwidth curve, cross-check them
(hfl/crosscheck.py), cache a `host` target."""

from __future__ import annotations

import json
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uol_core.hfl.crosscheck import (
    Check,
    CoreFacts,
    FmaMeasurements,
    SettledBandwidth,
    check_core_facts,
    settle_bandwidth,
)
from uol_core.hfl.gpu import check_gpus
from uol_core.hfl.matrix import peak_from, unit_for
from uol_core.hfl.probe_c import CFLAGS, ProbeProgram
from uol_core.hfl.schema import HflError, Target, validate
from uol_core.hfl.sysinfo import (
    HostInfo,
    OsClock,
    host_info,
    isa_table,
    read_os_clock,
    widest_vector_isa,
)
from uol_core.runtime.usercache import private_dir, write_atomic

PROBE_VERSION = 3  # bump when what is measured changes: old caches are then ignored
Progress = Callable[[str, float], None]  # (step description, fraction done 0..1)

# Effort per mode: seconds each timing aims for, best-of repetitions, curve points per octave,
# STREAM array size as a multiple of the last-level cache, and the most one array may take.
# The cap matters: a VM may report its host's whole L3 (480 MiB on one 2-vCPU guest), and 4x
# that per array, three arrays, is more than a small machine should be asked for.
# STREAM runs repeat until two agree (isa.toml [plausible]), at most stream_max_runs times.
EFFORT = {
    True: {"target_s": 0.04, "reps": 5, "per_octave": 1, "stream_llc_factor": 2,
           "max_array_bytes": 128 << 20, "stream_max_runs": 3},
    False: {"target_s": 0.1, "reps": 5, "per_octave": 2, "stream_llc_factor": 4,
            "max_array_bytes": 1 << 30, "stream_max_runs": 5},
}
MEMORY_SHARE = 4  # all probe buffers together take at most 1/MEMORY_SHARE of available memory
MIN_STREAM_BYTES = 32 << 20  # per array, when the OS reports no last-level cache
CURVE_MIN_BYTES = 4 << 10
# a multi-thread FMA peak above this many times threads x the one-thread peak is impossible: the
# one-thread run was disturbed, and is measured again up to this many times
SUPERLINEAR_SLACK = 1.1
RETRIES_SUPERLINEAR = 2
# a multi-thread peak run that got less than isa.toml's peak_min_cpu_utilization of its CPUs,
# or scaled below its peak_min_scaling (one host record held a 2-thread fp32 peak equal to its
# 1-thread one, and every kernel's cost model read it): measured again up to this many times,
# the best kept
RETRIES_STARVED = 3


def cache_dir() -> Path:
    """Where probe results live: the private per-user cache root (usercache: $UOL_CACHE_DIR,
    else $XDG_CACHE_HOME/uol, else ~/.cache/uol), checked to be ours and not writable by
    others, since a probe result becomes the `host` target every kernel is built for."""

    return private_dir()


def cache_path(info: HostInfo) -> Path:
    """The cache file for this machine's fingerprint."""
    return cache_dir() / f"host-{info.fingerprint()}-v{PROBE_VERSION}.json"


def cached_host() -> Target | None:
    """The cached host target for this machine, or None if it was never probed."""
    path = cache_path(host_info())
    try:
        return validate(json.loads(path.read_text()), path.name)
    except (OSError, ValueError, KeyError, HflError):
        return None


def probe_host(quick: bool = False, refresh: bool = False,
               progress: Progress | None = None) -> Target:
    """The `host` target: from the cache when this machine was probed before, else measured.

    A cached quick probe satisfies a quick request; a full request re-measures once.
    """
    info = host_info()
    path = cache_path(info)
    cached = None if refresh else _cached_record(path, quick)
    if cached is not None:
        return cached
    # one measurement at a time in a process: a request that arrives while the server's start
    # probes the host waits for that probe and reads its record instead of measuring again
    with _MEASURING:
        cached = None if refresh else _cached_record(path, quick)
        if cached is not None:
            return cached
        record = measure(info, quick=quick, progress=progress)
        # atomic (a concurrent reader sees the old file or the new one), mode 0600
        write_atomic(path, json.dumps(record, indent=1).encode())
    return validate(record, path.name)


_MEASURING = threading.Lock()


def _cached_record(path: Path, quick: bool) -> Target | None:
    """The cached probe at `path` when it satisfies the request (a quick one any record)."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if quick or not record["measurements"]["quick"]:
            return validate(record, path.name)
    except (ValueError, KeyError, HflError):
        pass  # a stale or damaged cache is simply measured again
    return None


def _entry(value: Any, source: str, prov: str = "measured") -> dict[str, Any]:
    return {"value": value, "prov": prov, "source": source}


def _thread_counts(cores: int) -> list[int]:
    counts = {1, cores}
    t = 2
    while t < cores:
        counts.add(t)
        t *= 2
    return sorted(counts)


def stream_array_bytes(llc: int, mem_available: int, quick: bool) -> int:
    """Bytes per STREAM array: a multiple of the LLC, within the effort cap and the memory budget
    (three arrays share 1/MEMORY_SHARE of available memory)."""
    effort = EFFORT[quick]
    size = min(max(effort["stream_llc_factor"] * llc, MIN_STREAM_BYTES), effort["max_array_bytes"])
    if mem_available:
        size = min(size, mem_available // (3 * MEMORY_SHARE))
    return size // 4096 * 4096


def curve_top_bytes(llc: int, mem_available: int, quick: bool) -> int:
    """Largest working set of the bandwidth curve: twice the LLC, within the same budget."""
    top = min(max(2 * llc, MIN_STREAM_BYTES), 2 * EFFORT[quick]["max_array_bytes"])
    return min(top, mem_available // MEMORY_SHARE) if mem_available else top


def _curve_sizes(top: int, per_octave: int) -> list[int]:
    """Working sets from 4 KiB to `top`, `per_octave` points per doubling."""
    sizes, k = [], 0
    while True:
        size = int(CURVE_MIN_BYTES * 2 ** (k / per_octave)) // 512 * 512  # whole vector blocks
        if size > top:
            return sizes
        sizes.append(size)
        k += 1


def cache_level_bandwidth(curve: list[list[float]], caches: dict[str, dict[str, int]],
                          cores: int) -> dict[str, float]:
    """Median bandwidth of the curve points that sit clearly inside each cache level, and DRAM.

    A point belongs to a level when it is at most half that level (per-core share for shared
    caches is not applied: the curve runs one thread) and above twice the level below.
    """
    out: dict[str, float] = {}
    below = 0
    for level in ("l1d", "l2", "l3"):
        if level not in caches:
            continue
        size = caches[level]["bytes"]
        points = [gbps for ws, gbps in curve if 2 * below < ws <= size / 2]
        if points:
            out[level.rstrip("d")] = round(statistics.median(points), 2)
        below = size
    dram = [gbps for ws, gbps in curve if ws >= 2 * below] if below else []
    if dram:
        out["dram"] = round(statistics.median(dram), 2)
    return out


def measure(info: HostInfo, quick: bool = True, progress: Progress | None = None) -> dict:
    """Run every microbenchmark, cross-check what it measured, return the host record (the TOML
    layout, as a dict)."""
    effort = EFFORT[quick]
    report = progress or (lambda _step, _frac: None)
    vec = widest_vector_isa(info.flags)
    table = isa_table()
    chains = vec["vector_registers"] - 4  # accumulators; leave room for operands and the loop
    threads = _thread_counts(info.cores)
    llc = max((c["bytes"] for c in info.caches.values()), default=0)
    curve_sizes = _curve_sizes(curve_top_bytes(llc, info.mem_available_bytes, quick),
                               effort["per_octave"])
    steps = 3 + 2 * len(threads) + effort["stream_max_runs"] + len(curve_sizes)
    done = 0

    def step(text: str) -> None:
        nonlocal done
        report(text, min(done / steps, 1.0))
        done += 1

    step("compiling the probe (gcc -O3 -march=native -fopenmp)")
    started = time.perf_counter()
    prog = ProbeProgram(vec["vector_bits"], chains)
    try:
        t, r = effort["target_s"], effort["reps"]
        step("measuring the clock and the FMA latency")
        os_clock = read_os_clock(prog.cpuid_mhz())
        adds, secs, _ = prog.run("clock", t, r)
        clock_ghz = adds * table["int_add_latency_cycles"]["value"] / secs / 1e9
        fmas, secs_lat, _ = prog.run("lat32", t, r)
        lanes32 = vec["vector_bits"] // 32
        peaks: dict[str, dict[str, float]] = {"fp32": {}, "fp64": {}}
        min_util = table["plausible"]["peak_min_cpu_utilization"]
        min_scaling = table["plausible"]["peak_min_scaling"]
        for dtype, lanes in (("fp32", lanes32), ("fp64", lanes32 // 2)):
            def peak(n: int, dtype: str = dtype, lanes: int = lanes) -> float:
                def once() -> tuple[float, float]:
                    vfmas, secs, util = prog.run(f"fma{dtype[2:]}", t, r, threads=n)
                    return round(vfmas * lanes * 2 / secs / 1e9, 2), util
                one = peaks[dtype].get("1")
                floor = min_scaling * n * one if one and n > 1 else 0.0
                return best_unstarved(once, min_util, floor)

            for n in threads:
                step(f"FMA peak {dtype}, {n} thread{'s' if n > 1 else ''}")
                peaks[dtype][str(n)] = peak(n)
            # n threads cannot beat n single threads: a gain above that means another process
            # held the core through the whole single-thread run, so measure it again (best kept)
            for _ in range(RETRIES_SUPERLINEAR):
                if all(v <= SUPERLINEAR_SLACK * int(k) * peaks[dtype]["1"]
                       for k, v in peaks[dtype].items()):
                    break
                peaks[dtype]["1"] = max(peaks[dtype]["1"], peak(1))
        raw = FmaMeasurements(clock_ghz, secs_lat / fmas * 1e9, peaks, vec["vector_bits"])
        core = check_core_facts(raw, os_clock, vec, table["plausible"])
        stream_bytes = stream_array_bytes(llc, info.mem_available_bytes, quick)
        stream, stream_util = _settled_stream(prog, info.cores, stream_bytes, t, r,
                                              effort["stream_max_runs"], table["plausible"],
                                              step)
        step(f"fork and join of {info.cores} threads")
        regions, fj_secs, _ = prog.run("forkjoin", t / 4, r, threads=info.cores)
        curve: list[list[float]] = []
        for size in curve_sizes:
            step(f"bandwidth curve, working set {_human(size)}")
            moved, secs, _ = prog.run("read", t / 2, r, nbytes=size)
            curve.append([size, round(moved / secs / 1e9, 2)])
    finally:
        prog.close()
    report("done", 1.0)
    return _record(info, quick, vec, {
        "core": core, "raw": raw, "os_clock": os_clock, "peaks": peaks, "stream": stream,
        "stream_bytes": stream_bytes, "stream_util": stream_util, "curve": curve,
        "chains": chains, "llc": llc, "fork_join_ns": fj_secs / regions * 1e9,
        "seconds": time.perf_counter() - started})


def best_unstarved(measure: Callable[[], tuple[float, float]], min_util: float,
                   floor: float = 0.0, retries: int = RETRIES_STARVED) -> float:
    """The best figure of `measure` (figure, CPU utilisation), run again while a run got less
    than `min_util` of its CPUs or the best is below `floor`, at most `retries` more times."""
    best = 0.0
    for _ in range(1 + retries):
        figure, util = measure()
        best = max(best, figure)
        if util >= min_util and best >= floor:
            break
    return best


def _settled_stream(prog: ProbeProgram, cores: int, nbytes: int, target_s: float, reps: int,
                    max_runs: int, plausible: dict, step: Callable[[str], None]
                    ) -> tuple[SettledBandwidth, float]:
    """STREAM triad repeated until two runs agree (isa.toml [plausible]): one run can land on a
    busy moment, two agreeing ones rarely do. Returns the figure and its run's utilisation."""
    runs: list[float] = []
    utils: list[float] = []
    for k in range(max_runs):
        step(f"STREAM triad run {k + 1}, {cores} threads, 3 x {nbytes >> 20} MiB")
        moved, secs, util = prog.run("triad", target_s, reps, threads=cores, nbytes=nbytes)
        runs.append(round(moved / secs / 1e9, 2))
        utils.append(util)
        settled = settle_bandwidth(runs, plausible["bandwidth_agreement"], utils,
                                   plausible["bandwidth_min_cpu_utilization"])
        if settled.agreed:
            break
    return settled, utils[runs.index(settled.gbps)] if settled.gbps in runs else min(utils)


def _human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} B"


def _stream_check(stream: SettledBandwidth, nbytes: int, llc: int) -> Check:
    detail = stream.detail
    if 3 * nbytes < 2 * llc:  # the memory budget kept the arrays near the LLC's size
        detail += (f"; 3 arrays of {nbytes >> 20} MiB are less than twice the reported "
                   f"{llc >> 20} MiB last-level cache (memory budget): some traffic may hit it")
    return Check("mem_bandwidth_gbps", "ok" if stream.agreed else "warning", detail)


def _record(info: HostInfo, quick: bool, vec: dict, m: dict) -> dict:
    """Assemble the host record with a provenance on every number."""
    core: CoreFacts = m["core"]
    raw: FmaMeasurements = m["raw"]
    os_clock: OsClock = m["os_clock"]
    stream: SettledBandwidth = m["stream"]
    top = str(max(int(k) for k in m["peaks"]["fp32"]))
    fma_src = (f"host probe: {m['chains']} independent {vec['flag']} FMA chains per thread, "
               f"{top} threads, per-thread CPU-time rates summed, best of timed runs")
    checks = [*core.checks, _stream_check(stream, m["stream_bytes"], m["llc"])]
    sysfs = "sysfs /sys/devices/system/cpu/cpu0/cache"
    caches = info.caches
    record: dict[str, Any] = {
        "name": "host", "kind": "cpu",
        "description": f"{info.model}, {info.cores} cores ({'quick' if quick else 'full'} probe)",
        "isa": _entry(info.flags, "/proc/cpuinfo flags"),
        "cores": _entry(info.cores, "sched_getaffinity (CPUs this process may use)"),
        "clock_ghz": core.clock_ghz.entry(),
        "vector_bits": _entry(vec["vector_bits"], vec["source"], "datasheet"),
        "vector_registers": _entry(vec["vector_registers"], vec["source"], "datasheet"),
        "fma_units": core.fma_units.entry(),
        "fma_latency_cycles": core.fma_latency_cycles.entry(),
        "peak_gflops": {"fp32": _entry(m["peaks"]["fp32"][top], fma_src),
                        "fp64": _entry(m["peaks"]["fp64"][top], fma_src)},
        "mem_bandwidth_gbps": _entry(stream.gbps, f"host probe: STREAM triad, {info.cores} "
                                                  f"threads, 3 arrays of "
                                                  f"{m['stream_bytes'] >> 20} MiB, 24 B/element;"
                                                  f" {stream.detail}"),
    }
    record["fork_join_cycles"] = _entry(
        max(1, round(m["fork_join_ns"] * float(core.clock_ghz.value))),
        f"host probe: {m['fork_join_ns']:.0f} ns per empty OpenMP region of {info.cores} "
        f"threads (warm pool), best of timed runs, x the measured clock")
    _matrix_facts(record, info.flags, info.cores, core)
    for level in ("l1d", "l2", "l3"):
        if level in caches:
            record[f"{level}_bytes"] = _entry(caches[level]["bytes"], sysfs)
    line = next(iter(caches.values()), {}).get("line_bytes")
    if line:
        record["line_bytes"] = _entry(line, sysfs)
    missing = [f for f in ("l1d_bytes", "l2_bytes", "line_bytes") if f not in record]
    if missing:
        raise HflError("host", missing[0], "the OS reports no cache sizes (no sysfs cache "
                                           "entries, no sysconf values); cannot build a host record")
    record["measurements"] = {
        "quick": quick, "probe_version": PROBE_VERSION, "fingerprint": info.fingerprint(),
        "machine": platform.machine(), "model": info.model,
        "compiler": " ".join(["gcc", *CFLAGS]), "vector_isa": vec["flag"],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "probe_seconds": round(m["seconds"], 2),
        "raw": {"clock_ghz": round(raw.clock_ghz, 4),
                "fma_latency_ns": round(raw.fma_latency_ns, 5)},
        "os_clock": {"readings_ghz": os_clock.readings, "reference": os_clock.reference_source},
        "cross_checks": [{"fact": c.fact, "verdict": c.verdict, "detail": c.detail}
                         for c in checks],
        "fma_gflops": m["peaks"], "stream_triad_gbps": stream.gbps,
        "stream_runs_gbps": stream.runs, "stream_agreed": stream.agreed,
        "stream_threads": info.cores, "stream_cpu_utilization": round(m["stream_util"], 3),
        "bandwidth_curve": m["curve"], "curve_threads": 1,
        "cache_bandwidth_gbps": cache_level_bandwidth(m["curve"], caches, info.cores),
        "caches": caches, "gpu": _gpu_check(),
    }
    return record


def _matrix_facts(record: dict, flags: list[str], cores: int, core: CoreFacts) -> None:
    """bf16 peak and tile shape of the host's matrix unit (isa.toml [[matrix_isa]]), computed
    from the documented rate at the measured clock; the benchmark measures the real one."""

    unit = unit_for(list(flags), "bf16")
    if unit is None:
        return
    value, how = peak_from(cores, float(core.clock_ghz.value),
                           float(core.fma_units.value or 1), unit)
    record["peak_gflops"]["bf16"] = _entry(round(value, 1), how, "assumed")
    if "mnk" in unit.facts:
        record["mma_shapes"] = {"bf16": _entry([unit.fact("mnk")], unit.source, "datasheet")}


def _gpu_check() -> list[dict]:
    """GPU properties checked against the matching record; empty without torch or a GPU."""

    return check_gpus()
