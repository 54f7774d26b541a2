"""Per-line hotspots of a generated C kernel, per kernel line and per ODL line, from one of two
sources: callgrind (instruction and cache-miss counts, exact and repeatable) where valgrind can
run the kernel, and cycle counters placed by the generator (profilers.cycle_counters) where it
cannot (AVX-512 or AMX code, or no valgrind). `kernel_hotspots` picks and says which it used.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profilers.callgrind import CallgrindProfile, CallgrindUnavailable, run_callgrind, valgrind_path
from profilers.flame import FlameNode
from uol_core.backends.base import KernelSource
from uol_core.runtime import build as kbuild

# Events shown by default; callgrind's cache simulator names its misses this way.
MAIN_EVENTS = ("Ir", "Dr", "Dw", "D1mr", "D1mw", "DLmr", "DLmw")
# -O3 as the real build, -g for line tables; no -march=native and no OpenMP: valgrind cannot
# decode AVX-512 and serialises threads anyway, so single-thread instruction counts are the
# honest, repeatable measure; -no-pie keeps addresses equal to file addresses for addr2line;
# -z now resolves libm symbols at load time so the dynamic linker does not show up in lines.
PROFILE_FLAGS = ("-O3", "-g", "-std=gnu11", "-fno-math-errno", "-Wno-unknown-pragmas", "-no-pie",
                 "-Wl,-z,now")
SOURCES = ("auto", "callgrind", "counters")
# Instructions valgrind cannot decode: AVX-512 (EVEX), AMX tiles, AVX512-BF16.
_UNDECODABLE = re.compile(r"_mm512_|__m512|_tile_|_mm256_\w*(?:bf16|pbh)")
_PROGRAMS = {"sanitize": "sanitizer program", "profile": "profiling program",
             "counters": "instrumented program"}
# One call of a small kernel lasts microseconds: the counters time at least this many calls.
MIN_COUNTER_REPS = 10


@dataclass
class LineCost:
    """Cost of one source line (kernel or ODL), with its text and the lines it maps to."""

    line: int
    text: str
    costs: dict[str, int]
    odl_line: int | None = None
    kernel_lines: list[int] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def share(self, total: Mapping[str, int], event: str = "Ir") -> float:
        """Fraction of the kernel total of `event` spent on this line."""
        return self.costs.get(event, 0) / total[event] if total.get(event) else 0.0


@dataclass
class HotspotReport:
    """Callgrind line costs of one kernel run, per kernel line and per ODL line."""

    op_name: str
    events: list[str]
    total: dict[str, int]
    kernel_lines: list[LineCost]
    odl_lines: list[LineCost]
    config: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def source(self) -> str:
        """'callgrind' or 'counters': what measured this report."""
        return str(self.meta.get("source", "callgrind"))

    def hottest(self, level: str = "kernel", event: str | None = None) -> LineCost:
        """The line with the largest cost of `event` (default: the first event) at 'kernel' or
        'odl' level."""
        event = event or self.events[0]
        rows = self.kernel_lines if level == "kernel" else self.odl_lines
        return max(rows, key=lambda r: r.costs.get(event, 0))

    def tree(self, event: str | None = None) -> FlameNode:
        """Flame tree: op -> ODL lines -> kernel lines, costs in `event` units (default: the
        first event)."""
        event = event or self.events[0]
        root = FlameNode(self.op_name, unit=event, meta={"config": self.config})
        by_line = {r.line: r for r in self.kernel_lines}
        for row in self.odl_lines:
            label = f"ODL {row.line}: {row.text.strip()}" if row.line else "(unmapped)"
            odl = root.child(label, "odl", row.line)
            for k in row.kernel_lines:
                krow = by_line[k]
                leaf = odl.child(f"C {k}: {krow.text.strip()[:60]}", "kernel.c", k)
                leaf.self_cost = float(krow.costs.get(event, 0))
        return root.fix_totals().sort()

    def to_dict(self) -> dict:
        """JSON-ready form (`uol hotspots --json`)."""
        rows = lambda rs: [r.__dict__ for r in rs]  # noqa: E731
        return {"op": self.op_name, "events": self.events, "total": self.total,
                "config": self.config, "meta": self.meta,
                "kernel_lines": rows(self.kernel_lines), "odl_lines": rows(self.odl_lines)}

    @classmethod
    def from_dict(cls, data: dict) -> HotspotReport:
        """Inverse of `to_dict`."""
        return cls(data["op"], list(data["events"]), dict(data["total"]),
                   [LineCost(**r) for r in data["kernel_lines"]],
                   [LineCost(**r) for r in data["odl_lines"]],
                   dict(data.get("config", {})), dict(data.get("meta", {})))


def driver_source(src: KernelSource, shapes: Mapping[str, Sequence[int]],
                  exact_allocation: bool = False, counters: int = 0) -> str:
    """A C main() that allocates every kernel argument (contiguous), fills it and calls the entry.

    `argv[1]` is the number of calls; inputs are filled with a fixed LCG, so counts repeat exactly.
    `exact_allocation` allocates exactly the tensor's bytes (no rounding to 64), so a sanitizer
    sees a read one element past the end. `counters` (the region count of an instrumented
    kernel) adds a warm-up call, clears the counters, times the calls and prints every counter.
    """
    alloc = ("malloc((size_t)(numel[i] * 4))" if exact_allocation
             else "aligned_alloc(64, (size_t)((numel[i] * 4 + 63) / 64 * 64))")
    args = list(src.meta.get("args") or shapes)
    missing = [a for a in args if a not in shapes]
    if missing:
        raise ValueError(f"shapes missing for kernel arguments {', '.join(missing)}")
    numel = [math.prod(shapes[a]) for a in args]
    strides: list[int] = []
    for a in args:
        shape = list(shapes[a])
        for axis in range(len(shape)):
            strides.append(math.prod(shape[axis + 1:]))
    return f"""\
/* profiling driver for {src.op_name}: args {", ".join(args)} */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
void {src.entry}(void **args, const int64_t *strides);
{_COUNTER_DECLS if counters else ""}static const int64_t numel[{len(args)}] = {{{", ".join(map(str, numel))}}};
static const int64_t strides[{max(1, len(strides))}] = {{{", ".join(map(str, strides or [0]))}}};
int main(int argc, char **argv)
{{
    int reps = argc > 1 ? atoi(argv[1]) : 1;
    void *args[{len(args)}];
    uint32_t seed = 12345u;
    for (int i = 0; i < {len(args)}; ++i) {{
        float *p = {alloc};
        for (int64_t j = 0; j < numel[i]; ++j) {{
            seed = seed * 1664525u + 1013904223u;
            p[j] = (float)(seed >> 8) / 16777216.0f - 0.5f;
        }}
        args[i] = p;
    }}
{_counted_calls(src.entry) if counters else _calls(src.entry)}
    printf("%g\\n", (double)((float *)args[{len(args) - 1}])[0]);{_COUNTER_REPORT if counters else ""}
    return 0;
}}
"""


def _calls(entry: str) -> str:
    return f"""    for (int r = 0; r < reps; ++r)
        {entry}(args, strides);"""


def _counted_calls(entry: str) -> str:
    # the warm-up call takes first-touch page faults and cold caches out of the counted calls
    return f"""    {entry}(args, strides);
    for (int k = 0; k < uol_prof_regions; ++k) uol_prof_ticks[k] = uol_prof_hits[k] = 0;
    struct timespec uol_w0, uol_w1;
    clock_gettime(CLOCK_MONOTONIC, &uol_w0);
    const uint64_t uol_t0 = uol_prof_clock();
    for (int r = 0; r < reps; ++r)
        {entry}(args, strides);
    const uint64_t uol_total = uol_prof_clock() - uol_t0;
    clock_gettime(CLOCK_MONOTONIC, &uol_w1);"""


_COUNTER_DECLS = """#include <time.h>
extern uint64_t uol_prof_ticks[], uol_prof_hits[];
extern const int uol_prof_regions;
extern const char *uol_prof_unit;
uint64_t uol_prof_clock(void);
uint64_t uol_prof_overhead(void);
"""
_COUNTER_REPORT = """
    printf("uol-prof unit %s\\n", uol_prof_unit);
    printf("uol-prof total %llu\\n", (unsigned long long)uol_total);
    printf("uol-prof wall_ns %lld\\n", (long long)(uol_w1.tv_sec - uol_w0.tv_sec) * 1000000000LL
           + (uol_w1.tv_nsec - uol_w0.tv_nsec));
    printf("uol-prof overhead %llu\\n", (unsigned long long)uol_prof_overhead());
    for (int k = 0; k < uol_prof_regions; ++k)
        printf("uol-prof region %d %llu %llu\\n", k, (unsigned long long)uol_prof_ticks[k],
               (unsigned long long)uol_prof_hits[k]);"""


def build_profile_binary(src: KernelSource, shapes: Mapping[str, Sequence[int]]) -> Path:
    """Compile kernel + driver with -g into the kernel cache; returns the executable's path."""
    if src.lang != "c":
        raise ValueError(f"line hotspots need a C kernel; this one is {src.lang}")
    return build_driver_binary(src, shapes, (*PROFILE_FLAGS, *_intrinsic_flags(src)), "profile")


def _intrinsic_flags(src: KernelSource) -> tuple[str, ...]:
    """Flags for the AVX2 intrinsics a template wrote without an `isa` in its config (a row
    template picks them for the host): the profile build has no -march=native to enable them."""
    if "isa" not in src.config and re.search(r"_mm256_|__m256", src.text):
        return kbuild.ISA_FLAGS["avx2"]
    return ()


def build_driver_binary(src: KernelSource, shapes: Mapping[str, Sequence[int]],
                        flags: Sequence[str], tag: str, exact_allocation: bool = False,
                        counters: int = 0, limits: kbuild.BuildLimits | None = None) -> Path:
    """Kernel + generated driver built with `flags` (plus the kernel's ISA flags) into a
    content-addressed folder of the kernel cache; returns the executable's path. The compiler
    runs under `limits` (default: from the environment, see uol_core.runtime.build)."""
    driver = driver_source(src, shapes, exact_allocation, counters)
    flags = (*flags, *kbuild.ISA_FLAGS.get(src.config.get("isa", "vecext"), ()))
    libs = ["-lm"] + (["-lgomp"] if "omp_" in src.text else [])
    key = hashlib.sha256("\0".join([src.text, driver, " ".join(flags), kbuild.compiler_version()])
                         .encode()).hexdigest()[:24]
    folder = kbuild.cache_dir() / f"{tag}-{src.op_name[:40]}-{key}"
    exe = folder / "prog"
    if exe.exists():
        return exe
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.c").write_text(src.text)
    (folder / "driver.c").write_text(driver)
    tmp = folder / f"prog.{os.getpid()}"
    proc = kbuild.run_compiler([*flags, str(folder / "kernel.c"), str(folder / "driver.c"),
                                "-o", str(tmp), *libs], src, limits,
                                what=_PROGRAMS.get(tag, f"{tag} program"))
    if proc.returncode != 0:
        raise kbuild.BuildError(kbuild.explain_compile_error(proc.stderr, src))
    os.replace(tmp, exe)  # atomic, as in the kernel cache
    return exe


def line_hotspots(src: KernelSource, shapes: Mapping[str, Sequence[int]], reps: int = 1,
                  odl_text: str | None = None, cache_sim: bool = True) -> HotspotReport:
    """Run the kernel under callgrind and attribute its cost to kernel lines and ODL lines."""
    exe = build_profile_binary(src, shapes)
    prof = run_callgrind([str(exe), str(reps)], cache_sim=cache_sim)
    report = attribute(src, prof, str(exe.parent / "kernel.c"), exe, odl_text)
    report.meta.update(source="callgrind", reps=reps, threads=1,
                       shapes={k: list(v) for k, v in shapes.items()})
    return report


def callgrind_blocker(src: KernelSource) -> str | None:
    """Why callgrind cannot profile `src` on this host, or None when it can."""
    if src.config.get("isa") == "avx512" or _UNDECODABLE.search(src.text):
        return "the kernel uses AVX-512/AMX instructions, which valgrind cannot decode"
    try:
        valgrind_path()
    except CallgrindUnavailable:
        return "valgrind is not installed"
    return None


def kernel_hotspots(src: KernelSource, shapes: Mapping[str, Sequence[int]], reps: int = 1,
                    odl_text: str | None = None, source: str = "auto") -> HotspotReport:
    """Per-line hotspots from `source`: 'callgrind', 'counters' (the instrumented build), or
    'auto': callgrind where valgrind can run the kernel, else the counters. The report's meta
    says which source it used (`source`) and, for the counters, why (`why`)."""
    if source not in SOURCES:
        raise ValueError(f"unknown hotspot source '{source}'; choose one of {', '.join(SOURCES)}")
    why = "cycle counters were asked for"
    if source != "counters":
        blocker = callgrind_blocker(src) if source == "auto" else None
        if blocker is None:
            try:
                return line_hotspots(src, shapes, reps=reps, odl_text=odl_text)
            except CallgrindUnavailable as exc:
                if source == "callgrind":
                    raise
                blocker = "callgrind failed: " + str(exc).splitlines()[0]
        why = blocker
    # deferred: at the top this import closes a circle, and fails while the modules load
    from profilers.cycle_counters import counter_hotspots

    report = counter_hotspots(src, shapes, reps=max(reps, MIN_COUNTER_REPS), odl_text=odl_text)
    report.meta.update(why=why, shapes={k: list(v) for k, v in shapes.items()})
    return report


def attribute(src: KernelSource, prof: CallgrindProfile, kernel_file: str,
              exe: Path | None = None, odl_text: str | None = None) -> HotspotReport:
    """Fold callgrind costs onto kernel lines (self + calls leaving the kernel) and ODL lines."""
    width = len(prof.events)
    per_line: dict[int, list[int]] = defaultdict(lambda: [0] * width)
    calls: dict[int, set[str]] = defaultdict(set)

    def mine(path: str) -> bool:
        return path == kernel_file or (not os.path.isabs(path) and kernel_file.endswith(path))

    for (path, line), costs in prof.self_cost.items():
        if mine(path):
            _add(per_line[line], costs)
    for (path, line), costs in prof.call_cost.items():
        targets = prof.callees.get((path, line), set())
        # calls into libm/libc count at the calling line; calls inside the kernel are already
        # counted as the callee's own lines
        if mine(path) and targets and not any(mine(f) for f, _ in targets):
            _add(per_line[line], costs)
            calls[line].update(fn for _, fn in targets)
    inlined = {k: v for k, v in prof.inlined.items() if mine(k[3]) and not mine(k[1])}
    if inlined:
        lines = _inline_sites(exe, sorted({k[0] for k in inlined}), kernel_file) if exe else {}
        for (addr, _, _, _), costs in inlined.items():
            _add(per_line[lines.get(addr, 0)], costs)
    text_lines = src.text.splitlines()
    total = {e: sum(c[i] for c in per_line.values()) for i, e in enumerate(prof.events)}
    krows = []
    for line in sorted(per_line):
        text = text_lines[line - 1] if 0 < line <= len(text_lines) else "(inlined, site unknown)"
        krows.append(LineCost(line, text, dict(zip(prof.events, per_line[line])),
                              src.odl_line(line), calls=sorted(calls.get(line, ()))))
    odl_src = (odl_text or "").splitlines()
    grouped: dict[int, list[LineCost]] = defaultdict(list)
    for row in krows:
        grouped[row.odl_line or 0].append(row)
    orows = []
    for odl_line in sorted(grouped):
        costs = {e: sum(r.costs[e] for r in grouped[odl_line]) for e in prof.events}
        text = odl_src[odl_line - 1] if 0 < odl_line <= len(odl_src) else ""
        orows.append(LineCost(odl_line, text, costs, odl_line,
                              kernel_lines=[r.line for r in grouped[odl_line]]))
    return HotspotReport(src.op_name, list(prof.events), total, krows, orows, dict(src.config),
                         {"program_totals": dict(zip(prof.events, prof.totals))})


def _inline_sites(exe: Path, addrs: list[int], kernel_file: str) -> dict[int, int]:
    """For each address of inlined code, the kernel line it was inlined at (addr2line -i)."""
    tool = shutil.which("addr2line")
    if not tool or not addrs:
        return {}
    proc = subprocess.run([tool, "-i", "-a", "-e", str(exe), *[hex(a) for a in addrs]],
                          capture_output=True, text=True, timeout=120)
    sites: dict[int, int] = {}
    current = None
    base = os.path.basename(kernel_file)
    for line in proc.stdout.splitlines():
        if line.startswith("0x"):
            current = int(line, 16)
            continue
        match = re.match(r"(.*):(\d+)", line.strip())
        if current is not None and current not in sites and match and \
                os.path.basename(match.group(1)) == base:
            sites[current] = int(match.group(2))
    return sites


def _add(into: list[int], costs: list[int]) -> None:
    for i, c in enumerate(costs):
        into[i] += c


def hotspots_for_op(op_spec: str, sizes: Mapping[str, int], target: str = "host",
                    config: dict | str | None = None, reps: int = 1,
                    source: str = "auto") -> HotspotReport:
    """Compile an operator (uol_core.compile, C backend) and profile its lines (`kernel_hotspots`:
    callgrind where it can run the kernel, cycle counters elsewhere)."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    import uol_core
    from profilers.pyinstrument_source import _compile_api, op_spec_text
    from uol_core.odl.shapes import shape_of

    text = op_spec_text(op_spec)
    op = uol_core.parse(text)
    kernel = _compile_api()(op, shapes=dict(sizes), target=target, backend="c", config=config)
    src = _kernel_source(kernel)
    shapes = {d.name: shape_of(op, d.name, sizes) for d in op.inputs + op.outputs}
    report = kernel_hotspots(src, shapes, reps=reps, odl_text=text, source=source)
    report.meta.update(target=target, sizes=dict(sizes))
    return report


def _kernel_source(kernel) -> KernelSource:
    """The KernelSource of a compiled kernel (`kernel_source`, or `source` when it is one)."""
    for name in ("kernel_source", "source"):
        value = getattr(kernel, name, None)
        if isinstance(value, KernelSource):
            return value
    raise TypeError("the compiled kernel exposes no KernelSource")


__all__ = ["SOURCES", "CallgrindUnavailable", "HotspotReport", "LineCost", "attribute",
           "build_driver_binary", "build_profile_binary", "callgrind_blocker", "driver_source",
           "hotspots_for_op", "kernel_hotspots", "line_hotspots"]
