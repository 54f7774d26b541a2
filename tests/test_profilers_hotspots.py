"""Line hotspots: a kernel with a known hot loop, mapped back to ODL lines by callgrind and by
the cycle counters of the instrumented build, and the choice between the two."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from profilers.callgrind import CallgrindUnavailable, parse_callgrind, valgrind_path
from profilers.hotspots import (
    HotspotReport,
    callgrind_blocker,
    driver_source,
    hotspots_for_op,
    kernel_hotspots,
    line_hotspots,
)
from uol_core.backends.base import KernelSource

HOST_FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind not installed")

# Line 9 runs 64 times, line 12 runs 64 x 200 times and calls expf: line 12 is the hot loop.
HOT_C = """#include <stdint.h>
#include <math.h>
void uol_hot(void **args, const int64_t *strides)
{
    const float *x = (const float *)args[0];
    float *y = (float *)args[1];
    float s = 0.0f;
    for (int64_t i = 0; i < 64; ++i)
        s += x[i];
    for (int64_t r = 0; r < 200; ++r)
        for (int64_t i = 0; i < 64; ++i)
            y[i] = y[i] * 0.5f + expf(x[i]) * s;
}
"""
ODL = """op hot(X: f32[N]) -> Y: f32[N]:
    s[] = sum[i](X[i])
    Y[i] = Y[i] * 0.5 + exp(X[i]) * s[]
"""


def hot_source() -> KernelSource:
    line_map = {i: 1 for i in range(1, 14)}
    line_map.update({7: 2, 8: 2, 9: 2, 10: 3, 11: 3, 12: 3})
    return KernelSource(HOT_C, "c", "uol_hot", "hot", {}, line_map, {"args": ["X", "Y"]})


@needs_valgrind
def test_the_hot_loop_line_and_its_odl_line_get_the_cost():
    rep = line_hotspots(hot_source(), {"X": (64,), "Y": (64,)}, odl_text=ODL)
    hottest = rep.hottest("kernel")
    assert hottest.line == 12 and "expf" in hottest.text
    assert hottest.share(rep.total) > 0.5
    assert any("expf" in c for c in hottest.calls)  # libm cost counted at the calling line
    odl = rep.hottest("odl")
    assert odl.line == 3 and "exp(" in odl.text and 12 in odl.kernel_lines
    by_odl = {r.line: r.costs["Ir"] for r in rep.odl_lines}
    assert by_odl[3] > 50 * by_odl[2]  # 200x more iterations
    assert {"Ir", "D1mr"} <= set(rep.events)
    tree = rep.tree()
    assert tree.unit == "Ir" and tree.children[0].line == 3


@needs_valgrind
def test_counts_repeat_exactly_and_scale_with_calls():
    src, shapes = hot_source(), {"X": (64,), "Y": (64,)}
    one = line_hotspots(src, shapes, reps=1, cache_sim=False)
    again = line_hotspots(src, shapes, reps=1, cache_sim=False)
    two = line_hotspots(src, shapes, reps=2, cache_sim=False)
    assert one.total["Ir"] == again.total["Ir"]
    assert abs(two.total["Ir"] - 2 * one.total["Ir"]) < 0.01 * one.total["Ir"]
    back = HotspotReport.from_dict(one.to_dict())
    assert back.hottest().line == 12


def test_driver_allocates_every_argument_in_order():
    text = driver_source(hot_source(), {"X": (64,), "Y": (64,)})
    assert "void uol_hot(void **args, const int64_t *strides);" in text
    assert "numel[2] = {64, 64}" in text


def test_missing_valgrind_gives_a_clear_message(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("UOL_VALGRIND", raising=False)
    with pytest.raises(CallgrindUnavailable, match="valgrind is not installed"):
        valgrind_path()


def test_parser_reads_compressed_names_calls_and_inlined_files():
    text = """version: 1
positions: line
events: Ir Dr
fl=(1) /k/kernel.c
fn=(1) uol_f
3 10 2
+2 5
cfi=(2) /lib/libm.c
cfn=(2) expf
calls=4 0
* 40 8
fi=(3) /usr/include/x.h
7 3 1
fe=(1)
-1 1
totals: 59 11
"""
    prof = parse_callgrind(text)
    assert prof.events == ["Ir", "Dr"]
    assert prof.self_cost[("/k/kernel.c", 3)] == [10, 2]
    assert prof.self_cost[("/k/kernel.c", 5)] == [5, 0]
    assert prof.call_cost[("/k/kernel.c", 5)] == [40, 8]
    assert prof.callees[("/k/kernel.c", 5)] == {("/lib/libm.c", "expf")}
    assert prof.self_cost[("/usr/include/x.h", 7)] == [3, 1]
    assert prof.self_cost[("/k/kernel.c", 6)] == [1, 0]
    assert prof.totals == [59, 11]


# --- the source choice and the cycle counters (any ISA, valgrind or not) ---

def hot_source_by_statement() -> KernelSource:
    """HOT_C with the op on line 1: lines 7-9 implement ODL line 2, lines 10-12 ODL line 3."""
    line_map = {i: 1 for i in range(1, 14)}
    line_map.update({7: 2, 8: 2, 9: 2, 10: 3, 11: 3, 12: 3})
    return KernelSource(HOT_C, "c", "uol_hot", "hot", {}, line_map, {"args": ["X", "Y"]})


def test_cycle_counters_put_the_time_on_the_hot_statement():
    rep = kernel_hotspots(hot_source_by_statement(), {"X": (64,), "Y": (64,)}, reps=20,
                          odl_text=ODL, source="counters")
    assert rep.source == "counters" and rep.events[0] in ("cycles", "ns")
    assert rep.meta["why"] == "cycle counters were asked for" and rep.meta["reps"] == 20
    assert rep.meta["plain_per_call"] > 0 and rep.meta["slowdown"] > 0.5
    unit = rep.events[0]
    by_odl = {r.line: r for r in rep.odl_lines}
    assert by_odl[2].costs["hits"] == 20 and by_odl[3].costs["hits"] == 20  # one entry per call
    assert by_odl[3].costs[unit] > 20 * by_odl[2].costs[unit]  # 200x the iterations, and expf
    assert rep.hottest("odl").line == 3 and "exp(" in by_odl[3].text
    assert sum(r.costs[unit] for r in rep.odl_lines) == rep.total[unit]
    hot_region = rep.hottest("kernel")
    assert (hot_region.line, hot_region.kernel_lines[-1]) == (10, 12)
    assert rep.tree().children[0].line == 3
    assert HotspotReport.from_dict(rep.to_dict()).source == "counters"


def test_avx512_kernels_are_sent_to_the_counters():
    avx512 = KernelSource(HOT_C.replace("float s = 0.0f;", "__m512 v = _mm512_setzero_ps();"),
                          "c", "uol_hot", "hot", {}, {}, {})
    assert "AVX-512" in callgrind_blocker(avx512)
    by_config = KernelSource(HOT_C, "c", "uol_hot", "hot", {"isa": "avx512"}, {}, {})
    assert "AVX-512" in callgrind_blocker(by_config)


def test_without_valgrind_auto_uses_the_counters(monkeypatch, tmp_path):
    which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda name, *a, **k: None if name == "valgrind" else which(name, *a, **k))
    monkeypatch.delenv("UOL_VALGRIND", raising=False)
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))  # a fresh build, not a cached one
    src = hot_source_by_statement()
    assert callgrind_blocker(src) == "valgrind is not installed"
    rep = kernel_hotspots(src, {"X": (64,), "Y": (64,)}, odl_text=ODL)
    assert rep.source == "counters" and rep.meta["why"] == "valgrind is not installed"


@needs_valgrind
def test_auto_uses_callgrind_where_valgrind_runs_the_kernel():
    src = hot_source_by_statement()
    assert callgrind_blocker(src) is None
    rep = kernel_hotspots(src, {"X": (64,), "Y": (64,)}, odl_text=ODL)
    assert rep.source == "callgrind" and "Ir" in rep.events and rep.hottest("odl").line == 3


def test_uol_hotspots_works_on_this_host_and_says_its_source():
    """softmax: the row template picks AVX-512 intrinsics on AVX-512 hosts (counters there),
    AVX2 or vector extensions elsewhere (callgrind when valgrind is installed)."""
    from typer.testing import CliRunner

    from uol_cli.main import app

    result = CliRunner().invoke(app, ["hotspots", "softmax", "--shape", "R=64,C=256",
                                      "--reps", "20"])
    assert result.exit_code == 0, result.output
    source = "cycle counters" if "source: cycle counters" in result.output else "callgrind"
    assert f"source: {source}" in result.output
    rows = {}
    for line in result.output.split("per ODL line:")[1].split("hottest")[0].splitlines():
        match = re.match(r"\s*([\d.]+)%\s+line\s+(\d+)", line)
        if match:
            rows[int(match.group(2))] = float(match.group(1))
    statements = {line: rows[line] for line in (3, 4, 5)}  # callgrind may add line 2 (helpers)
    assert max(statements, key=statements.get) == 4  # exp costs most whatever the source


@needs_valgrind
@pytest.mark.skipif(" avx2" not in HOST_FLAGS, reason="the host has no AVX2")
def test_avx2_kernels_go_to_callgrind_on_any_avx2_capable_host():
    """What an AVX2-only machine does for the host target: the template's AVX2 intrinsics build
    for the profile (no -march=native there) and valgrind runs them."""
    rep = hotspots_for_op("softmax", {"R": 16, "C": 64}, target="avx2-desktop")
    assert rep.source == "callgrind" and any("_mm256_" in r.text for r in rep.kernel_lines)
    assert {3, 4, 5} <= {r.line for r in rep.odl_lines}
