"""Callgrind line attribution: a kernel with a known hot loop, mapped back to ODL lines."""

from __future__ import annotations

import shutil

import pytest

from profilers.callgrind import CallgrindUnavailable, parse_callgrind, valgrind_path
from profilers.hotspots import HotspotReport, driver_source, line_hotspots
from uol_core.backends.base import KernelSource

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
