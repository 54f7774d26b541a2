"""Host probe: measure FMA peaks, STREAM triad and a bandwidth curve; cache a `host` target."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uol_core.hfl.probe_c import CFLAGS, ProbeProgram
from uol_core.hfl.schema import HflError, Target, validate
from uol_core.hfl.sysinfo import HostInfo, host_info, isa_table, widest_vector_isa

PROBE_VERSION = 1  # bump when what is measured changes: old caches are then ignored
Progress = Callable[[str, float], None]  # (step description, fraction done 0..1)

# Effort per mode: seconds each timing aims for, best-of repetitions, curve points per octave,
# and STREAM array size as a multiple of the last-level cache.
EFFORT = {
    True: {"target_s": 0.04, "reps": 5, "per_octave": 1, "stream_llc_factor": 2},
    False: {"target_s": 0.1, "reps": 5, "per_octave": 2, "stream_llc_factor": 4},
}
MIN_STREAM_BYTES = 32 << 20  # per array, when the OS reports no last-level cache
CURVE_MIN_BYTES = 4 << 10


def cache_dir() -> Path:
    """Where probe results live: $UOL_CACHE_DIR, else ~/.cache/uol-studio."""
    root = os.environ.get("UOL_CACHE_DIR") or Path.home() / ".cache" / "uol-studio"
    return Path(root)


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
    if not refresh and path.is_file():
        try:
            record = json.loads(path.read_text())
            if quick or not record["measurements"]["quick"]:
                return validate(record, path.name)
        except (ValueError, KeyError, HflError):
            pass  # a stale or damaged cache is simply measured again
    record = measure(info, quick=quick, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    return validate(record, path.name)


def _entry(value: Any, source: str, prov: str = "measured") -> dict[str, Any]:
    return {"value": value, "prov": prov, "source": source}


def _thread_counts(cores: int) -> list[int]:
    counts = {1, cores}
    t = 2
    while t < cores:
        counts.add(t)
        t *= 2
    return sorted(counts)


def _curve_sizes(llc: int, per_octave: int) -> list[int]:
    """Working sets from 4 KiB to twice the last-level cache, `per_octave` points per doubling."""
    top = max(2 * llc, MIN_STREAM_BYTES)
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
    """Run every microbenchmark and return the host record (the TOML layout, as a dict)."""
    effort = EFFORT[quick]
    report = progress or (lambda _step, _frac: None)
    vec = widest_vector_isa(info.flags)
    table = isa_table()
    chains = vec["vector_registers"] - 4  # accumulators; leave room for operands and the loop
    threads = _thread_counts(info.cores)
    llc = max((c["bytes"] for c in info.caches.values()), default=0)
    curve_sizes = _curve_sizes(llc, effort["per_octave"])
    steps = 2 + 2 * len(threads) + 1 + len(curve_sizes)
    done = 0

    def step(text: str) -> None:
        nonlocal done
        report(text, done / steps)
        done += 1

    step("compiling the probe (gcc -O3 -march=native -fopenmp)")
    started = time.perf_counter()
    prog = ProbeProgram(vec["vector_bits"], chains)
    try:
        t, r = effort["target_s"], effort["reps"]
        step("measuring the clock and the FMA latency")
        adds, secs, _ = prog.run("clock", t, r)
        clock_ghz = adds * table["int_add_latency_cycles"]["value"] / secs / 1e9
        fmas, secs_lat, _ = prog.run("lat32", t, r)
        latency = max(1, round(secs_lat / fmas * clock_ghz * 1e9))
        lanes32 = vec["vector_bits"] // 32
        peaks: dict[str, dict[str, float]] = {"fp32": {}, "fp64": {}}
        for dtype, lanes in (("fp32", lanes32), ("fp64", lanes32 // 2)):
            for n in threads:
                step(f"FMA peak {dtype}, {n} thread{'s' if n > 1 else ''}")
                vfmas, secs, _ = prog.run(f"fma{dtype[2:]}", t, r, threads=n)
                peaks[dtype][str(n)] = round(vfmas * lanes * 2 / secs / 1e9, 2)
        per_cycle = peaks["fp32"]["1"] / clock_ghz
        fma_units = max(1, round(per_cycle / (2 * lanes32)))
        stream_bytes = max(effort["stream_llc_factor"] * llc, MIN_STREAM_BYTES)
        if info.mem_available_bytes:  # never ask for more than a quarter of free memory
            stream_bytes = min(stream_bytes, info.mem_available_bytes // 12)
        stream_bytes = stream_bytes // 4096 * 4096
        step(f"STREAM triad, {info.cores} threads, 3 x {stream_bytes >> 20} MiB")
        moved, secs, stream_util = prog.run("triad", t, r, threads=info.cores,
                                               nbytes=stream_bytes)
        stream = round(moved / secs / 1e9, 2)
        curve: list[list[float]] = []
        for size in curve_sizes:
            step(f"bandwidth curve, working set {_human(size)}")
            moved, secs, _ = prog.run("read", t / 2, r, nbytes=size)
            curve.append([size, round(moved / secs / 1e9, 2)])
    finally:
        prog.close()
    report("done", 1.0)
    return _record(info, quick, vec, table, {
        "clock_ghz": clock_ghz, "latency": latency, "fma_units": fma_units, "peaks": peaks,
        "stream": stream, "stream_bytes": stream_bytes, "stream_util": stream_util, "curve": curve, "chains": chains,
        "seconds": time.perf_counter() - started})


def _human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} B"


def _record(info: HostInfo, quick: bool, vec: dict, table: dict, m: dict) -> dict:
    """Assemble the host record with a provenance on every number."""
    top = str(max(int(k) for k in m["peaks"]["fp32"]))
    fma_src = (f"host probe: {m['chains']} independent {vec['flag']} FMA chains per thread, "
               f"{top} threads, per-thread CPU-time rates summed, best of timed runs")
    sysfs = "sysfs /sys/devices/system/cpu/cpu0/cache"
    caches = info.caches
    record: dict[str, Any] = {
        "name": "host", "kind": "cpu",
        "description": f"{info.model}, {info.cores} cores ({'quick' if quick else 'full'} probe)",
        "isa": _entry(info.flags, "/proc/cpuinfo flags"),
        "cores": _entry(info.cores, "sched_getaffinity (CPUs this process may use)"),
        "clock_ghz": _entry(round(m["clock_ghz"], 3),
                            "host probe: dependent integer adds per second (1 cycle each, "
                            "isa.toml)"),
        "vector_bits": _entry(vec["vector_bits"], vec["source"], "datasheet"),
        "vector_registers": _entry(vec["vector_registers"], vec["source"], "datasheet"),
        "fma_units": _entry(m["fma_units"], "host probe: 1-thread fp32 FMA peak / "
                                            "(clock x lanes x 2)"),
        "fma_latency_cycles": _entry(m["latency"], "host probe: dependent fp32 FMA chain x "
                                                   "measured clock"),
        "peak_gflops": {"fp32": _entry(m["peaks"]["fp32"][top], fma_src),
                        "fp64": _entry(m["peaks"]["fp64"][top], fma_src)},
        "mem_bandwidth_gbps": _entry(m["stream"], f"host probe: STREAM triad, {info.cores} "
                                                  f"threads, 3 arrays of "
                                                  f"{m['stream_bytes'] >> 20} MiB, 24 B/element"),
    }
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
        "fma_gflops": m["peaks"], "stream_triad_gbps": m["stream"],
        "stream_threads": info.cores, "stream_cpu_utilization": round(m["stream_util"], 3),
        "bandwidth_curve": m["curve"], "curve_threads": 1,
        "cache_bandwidth_gbps": cache_level_bandwidth(m["curve"], caches, info.cores),
        "caches": caches, "gpu": _gpu_check(),
    }
    return record


def _gpu_check() -> list[dict]:
    """GPU properties checked against the matching record; empty without torch or a GPU."""
    from uol_core.hfl.gpu import check_gpus

    return check_gpus()
