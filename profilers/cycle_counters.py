"""Per-ODL-line time from the instrumented build: timer reads the generator placed around each
statement's loop nest (uol_core.backends.c.instrument), on any ISA the host runs natively.

This is the hotspot source where callgrind cannot go: valgrind does not decode AVX-512 (or AMX),
so on such hosts the kernels the ACG picks for the host can only be measured natively. The
build uses the normal build's machine flags (-march=native plus the kernel's ISA) and, like the
callgrind build, one thread (`-fopenmp-simd` keeps the `omp simd` loops vectorised).
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence

from profilers.hotspots import HotspotReport, LineCost, build_driver_binary
from uol_core.backends.base import KernelSource
from uol_core.backends.c.instrument import InstrumentedKernel, instrument
from uol_core.runtime import build as kbuild

# The normal build's optimisation and math flags, one thread (no -fopenmp: the counters are
# plain globals), simd pragmas kept.
COUNTER_FLAGS = ("-O3", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd",
                 "-Wno-unknown-pragmas")
_RESULT = re.compile(r"^uol-prof (\w+) (.*)$", re.MULTILINE)
OUTSIDE = "(outside the timed regions: setup, loop control)"


class CounterRunError(RuntimeError):
    """The instrumented program failed or ran too long; the message says which."""


def counter_hotspots(src: KernelSource, shapes: Mapping[str, Sequence[int]], reps: int = 10,
                     odl_text: str | None = None, timeout: float = 300.0) -> HotspotReport:
    """Build `src` with cycle counters, run it (one warm-up call, then `reps` timed calls; the
    least disturbed of PASSES runs) and report time per region (kernel level) and per ODL line.

    The same program without the timer reads runs too: its time per call is the kernel's own
    (`meta.plain_per_call`), and the ratio (`meta.slowdown`) says how much the reads disturbed
    it (a read waits for the work before it, so statements of a few dozen cycles each, a row
    loop over short rows, slow down several times: their shares are then approximate)."""
    inst = instrument(src)
    outputs = [_least_disturbed(variant, shapes, reps, timeout)
               for variant in (inst, instrument(src, reads=False))]
    report = counter_report(src, inst, outputs[0], reps, odl_text)
    plain = _number(outputs[1], "total")
    report.meta["plain_per_call"] = plain / reps
    report.meta["slowdown"] = report.meta["measured_total"] / plain if plain else None
    return report


# Runs of each program; the one with the smallest total is reported. Other jobs on the host
# only ever add time, and one preemption inside a region of a kernel of a few microseconds
# made that region the hotspot (a softmax's row max at 60% of the time, its exp at 26%).
PASSES = 3


def _least_disturbed(inst: InstrumentedKernel, shapes: Mapping[str, Sequence[int]], reps: int,
                     timeout: float) -> str:
    """Build one variant and run it PASSES times; the stdout of the least disturbed run (the
    smallest total)."""
    src = inst.source
    exe = build_driver_binary(src, shapes, (*COUNTER_FLAGS, *kbuild.TARGET_FLAGS), "counters",
                              counters=len(inst.regions))
    return min((_run(exe, src.op_name, reps, timeout) for _ in range(PASSES)),
               key=lambda out: _number(out, "total") or float("inf"))


def _run(exe, op_name: str, reps: int, timeout: float) -> str:
    """One run of a built variant; its stdout."""
    try:
        proc = subprocess.run([str(exe), str(reps)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CounterRunError(f"the instrumented {op_name} kernel ran past {timeout:.0f} s; "
                              "use smaller sizes or fewer --reps") from None
    if proc.returncode != 0:
        raise CounterRunError(f"the instrumented {op_name} kernel exited with status "
                              f"{proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def _number(stdout: str, key: str) -> int:
    match = re.search(rf"^uol-prof {key} (\d+)$", stdout, re.MULTILINE)
    return int(match.group(1)) if match else 0


def counter_report(src: KernelSource, inst: InstrumentedKernel, stdout: str, reps: int,
                   odl_text: str | None = None) -> HotspotReport:
    """The HotspotReport of one instrumented run from the lines it printed.

    Each timer pair costs about `overhead` ticks (measured by the program): that much is taken
    off each region per entry, and as much again (the half of each read outside its region)
    off the untimed rest, so the rows add up to the measured total less the timer reads.
    `total` is that sum; `meta` keeps the raw total, the timer cost and ns per tick.
    """
    fields: dict[str, list[str]] = defaultdict(list)
    for key, value in _RESULT.findall(stdout):
        fields[key].append(value)
    if not fields.get("total"):
        raise CounterRunError(f"the instrumented {src.op_name} kernel printed no counters")
    unit = fields["unit"][0].strip()
    raw_total, overhead = int(fields["total"][0]), int(fields["overhead"][0])
    wall_ns = int(fields["wall_ns"][0]) if fields.get("wall_ns") else 0
    measured = {int(k): (int(t), int(h)) for k, t, h in (r.split() for r in fields["region"])}
    events = [unit, "hits"]
    krows: list[LineCost] = []
    raw_timed = hits_total = 0
    for region in inst.regions:
        ticks, hits = measured.get(region.index, (0, 0))
        raw_timed, hits_total = raw_timed + ticks, hits_total + hits
        krows.append(LineCost(region.first_line, region.text,
                              {unit: max(0, ticks - hits * overhead), "hits": hits},
                              region.odl_line,
                              kernel_lines=list(range(region.first_line, region.last_line + 1))))
    rest = max(0, raw_total - raw_timed - hits_total * overhead)
    krows.append(LineCost(0, OUTSIDE, {unit: rest, "hits": 0}, None))
    odl_src = (odl_text or "").splitlines()
    grouped: dict[int, list[LineCost]] = defaultdict(list)
    for row in krows:
        grouped[row.odl_line or 0].append(row)
    orows = []
    for odl_line in sorted(grouped):
        costs = {e: sum(r.costs[e] for r in grouped[odl_line]) for e in events}
        text = odl_src[odl_line - 1] if 0 < odl_line <= len(odl_src) else (
            OUTSIDE if odl_line == 0 else "")
        orows.append(LineCost(odl_line, text, costs, odl_line or None,
                              kernel_lines=[r.line for r in grouped[odl_line]]))
    total = {unit: sum(r.costs[unit] for r in krows), "hits": hits_total}
    meta = {"source": "counters", "unit": unit, "reps": reps, "threads": 1,
            "measured_total": raw_total, "timer_overhead": overhead,
            "timer_cost": raw_total - total[unit],
            "ns_per_tick": wall_ns / raw_total if raw_total and wall_ns else None,
            "fused": {r.odl_line: [x for x in r.odl_lines if x != r.odl_line]
                      for r in inst.regions if len(r.odl_lines) > 1},
            "regions": [{"index": r.index, "odl_line": r.odl_line, "odl_lines": list(r.odl_lines),
                         "first_line": r.first_line, "last_line": r.last_line}
                        for r in inst.regions]}
    return HotspotReport(src.op_name, events, total, krows, orows, dict(src.config), meta)


__all__ = ["COUNTER_FLAGS", "CounterRunError", "counter_hotspots", "counter_report"]
