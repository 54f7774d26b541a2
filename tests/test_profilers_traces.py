"""Traces, roofline points, timing records and run comparisons."""

from __future__ import annotations

import json

import pytest

from profilers.compare import compare, render_text
from profilers.figures import comparison_bars, roofline_chart, timeline_chart
from profilers.roofline_points import RoofCurve, point, roof_curve
from profilers.runs import Run, load_run
from profilers.timing import KernelTiming, time_kernel
from profilers.traces import (
    Timeline,
    from_chrome_trace,
    from_rows,
    from_tuning_rows,
    to_chrome_trace,
    torch_reference_timeline,
)


def test_chrome_trace_round_trip_keeps_lanes_and_times(tmp_path):
    tl = from_rows([{"rank": 0, "op": "send", "start": 0.0, "duration": 1e-3, "kind": "comm"},
                    ("rank 1", "gemm", 5e-4, 2e-3, "comp")], "hcf")
    trace = to_chrome_trace(tl)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["dur"] for e in spans] == [1000.0, 2000.0]  # microseconds
    back = from_chrome_trace(json.loads(json.dumps(trace)))
    assert back.lanes == ["0", "rank 1"]
    assert back.events[1].start_s == pytest.approx(5e-4)
    assert Timeline.from_dict(back.to_dict()).span_s == pytest.approx(2.5e-3)
    assert timeline_chart(back).data


def test_tuning_rows_become_a_timeline():
    rows = [{"ts": 100.0, "config": "mr=6", "status": "ok", "median_s": 1e-3, "gflops": 5.0},
            {"ts": 101.0, "config": "mr=4", "status": "crash", "median_s": None}]
    tl = from_tuning_rows(rows)
    assert [e.category for e in tl.events] == ["ok", "crash"]
    assert tl.events[0].args["gflops"] == 5.0


def test_torch_profiler_trace_reads_into_the_timeline():
    tl = torch_reference_timeline("softmax", {"R": 8, "C": 16}, repeats=1)
    assert tl.events and any("aten::" in e.name for e in tl.events)


def test_roofline_point_bound_and_fraction():
    curve = RoofCurve("toy", "fp32", 100.0, 10.0)  # ridge at 10 FLOP/B
    assert curve.ridge == 10 and curve.attainable(1.0) == 10.0
    target_point = point("k", 2e9, 1e8, 1.0, "avx2-desktop")
    assert target_point.bound == "compute" and 0 < target_point.fraction <= 1
    fig = roofline_chart([roof_curve("avx2-desktop"), roof_curve("h100-sxm")], [target_point])
    assert len(fig.data) == 3


def test_timing_record_from_the_shared_harness():
    t = time_kernel(lambda: sum(range(1000)), "sum", "python", repeats=5, flops=1000)
    assert t.repeats >= 5 and t.median_s > 0 and t.method == "perf_counter"
    assert t.gflops is not None
    assert KernelTiming.from_dict(t.to_dict()).median_s == t.median_s


def test_compare_two_run_files(tmp_path):
    hot = lambda a, b: {"total": {"Ir": a + b}, "odl_lines": [  # noqa: E731
        {"line": 2, "text": "s", "costs": {"Ir": a}}, {"line": 3, "text": "y", "costs": {"Ir": b}}]}
    a = Run("mr=4", "matmul", "host", config={"mr": 4, "nr": 16}, median_s=2e-3, flops=2e6,
            hotspots=hot(10, 90))
    b = Run("mr=6", "matmul", "host", config={"mr": 6, "nr": 16}, median_s=1e-3, flops=2e6,
            hotspots=hot(30, 70))
    diff = compare(load_run(str(a.save(tmp_path / "a.json"))),
                   load_run(str(b.save(tmp_path / "b.json"))))
    assert diff.speedup == pytest.approx(2.0)
    assert diff.config_changes == {"mr": (4, 6)}
    assert "2.00x faster" in diff.verdict
    assert diff.lines[0].change == pytest.approx(0.2)
    assert "mr" in render_text(diff) and comparison_bars(diff).data
    with pytest.raises(FileNotFoundError):
        load_run("no-such-run.json")
