"""Runs carry what they are (op, sizes, target, mode, machine) and only like is compared with like.

A 32^3 run against a 256^3 run is compared by GFLOP/s and says so; a profiled run never stands in a
timing comparison or on a roofline; an exported report never places a run above its roof; the
baseline of an operator report is named the reference evaluator; the Profiler takes the user's op.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.services import history
from profilers.compare import compare
from profilers.roofline_points import point
from profilers.runs import Run
from uol_core.ops import op_text

TIME, FLOP_RATE, NO_TIMING = "time", "flop rate", "none"  # Comparison.basis values

MATMUL = op_text("matmul")
SMALL, LARGE = {"M": 32, "N": 32, "K": 32}, {"M": 256, "N": 256, "K": 256}
# An op no library holds: the Profiler must take it as the user typed it.
PAIRDIST = """op pairdist(A: f32[N, D], B: f32[M, D]) -> Y: f32[N, M]:
    Y[n, m] = sum[d]((A[n, d] - B[m, d]) * (A[n, d] - B[m, d]))
"""


@pytest.fixture
def runs_db(tmp_path, monkeypatch):
    """A private history database and cache root for one test."""
    monkeypatch.setenv("UOL_IDE_RUNS_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "runs.sqlite"


def _at_half_roof(sizes: dict, target: str = "host") -> float:
    """Seconds for a matmul at `sizes` that put it at half its attainable rate on `target`."""
    import uol_core

    cost = uol_core.op_cost(uol_core.parse(MATMUL), sizes)
    roof = point("probe", cost.flops, cost.bytes, 1.0, target).attainable_gflops
    return cost.flops / (roof * 0.5 * 1e9)


def _record_matmul(sizes: dict, kind: str = "run", seconds: float | None = None,
                   mode: str = "measured") -> dict:
    import uol_core

    cost = uol_core.op_cost(uol_core.parse(MATMUL), sizes)
    seconds = seconds or _at_half_roof(sizes)
    result = {"ok": True, "op": "matmul", "sizes": sizes, "median_s": seconds,
              "flops": cost.flops, "bytes": cost.bytes, "gflops": cost.flops / seconds / 1e9,
              "gbs": cost.bytes / seconds / 1e9, "config": {}, "mode": mode}
    rid = history.record(kind, {"odl": MATMUL, "backend": "c", "target": "host",
                                "sizes": sizes, "config": {}}, result)
    return history.get(rid)


def test_a_run_carries_sizes_target_mode_and_machine(runs_db):
    timed = _record_matmul(SMALL)
    profiled = _record_matmul(SMALL, kind="profile", mode="measured (profile)")
    interpreted = history.get(history.record(
        "run", {"odl": MATMUL, "backend": "triton", "target": "h200-sxm", "sizes": SMALL},
        {"ok": True, "op": "matmul", "mode": "interpreted, no timing"}))
    assert (timed["mode"], profiled["mode"], interpreted["mode"]) == \
        ("timed", "profiled", "interpreted")
    assert timed["sizes"] == SMALL and timed["target"] == "host"
    assert timed["machine"] and timed["machine"] == history.this_machine()
    assert "M=32,N=32,K=32" in history.describe(timed) and "host" in history.describe(timed)


def test_an_older_history_database_gains_mode_with_profiles_marked_profiled(runs_db):
    old_columns = history.SCHEMA.split("kernel TEXT")[0] + "kernel TEXT NOT NULL DEFAULT '')"
    conn = sqlite3.connect(runs_db)
    conn.execute(old_columns)
    conn.execute("INSERT INTO runs (created, kind, op, backend, target, sizes, config, odl, ok, "
                 "median_s, result) VALUES (0, 'profile', 'matmul', 'c', 'host', '{}', '{}', "
                 "'', 1, 0.001, '{}')")
    conn.commit()
    conn.close()
    (row,) = history.runs()
    assert row["mode"] == "profiled"


def test_runs_of_different_sizes_compare_by_gflops_and_say_so():
    a = Run("A", "matmul", "host", sizes=LARGE, median_s=1e-3, flops=2 * 256 ** 3)
    b = Run("B", "matmul", "host", sizes=SMALL, median_s=1e-5, flops=2 * 32 ** 3)
    c = compare(a, b)
    assert c.basis == FLOP_RATE and c.time_change is None
    assert c.speedup == pytest.approx(b.gflops / a.gflops)  # not the time ratio of 100x
    assert "normalised by FLOPs" in c.verdict and "sizes differ" in c.verdict
    assert "faster" not in c.verdict


def test_runs_of_the_same_op_and_sizes_compare_by_time():
    a = Run("A", "matmul", "host", sizes=SMALL, median_s=2e-5, flops=2 * 32 ** 3)
    b = Run("B", "matmul", "host", config={"nr": 16}, sizes=SMALL, median_s=1e-5,
            flops=2 * 32 ** 3)
    c = compare(a, b)
    assert c.basis == TIME and c.speedup == pytest.approx(2.0)
    assert c.verdict == ("B is 2.00x faster than A by the medians "
                         "(no samples stored: significance unknown)")


def test_a_profiled_run_never_enters_a_timing_comparison():
    a = Run("A", "matmul", "host", sizes=SMALL, median_s=2e-5, flops=2 * 32 ** 3)
    b = Run("B", "matmul", "host", sizes=SMALL, median_s=1e-5, flops=2 * 32 ** 3,
            mode="profiled")
    c = compare(a, b)
    assert c.basis == NO_TIMING and c.speedup is None and c.gflops_b is None
    assert "profiled" in c.verdict and "faster" not in c.verdict


def test_profiled_runs_are_not_roofline_points_but_can_be_compared(runs_db):
    from app.services.profiling import comparable_runs, measured_runs, roofline_figure

    timed = _record_matmul(SMALL)
    profiled = _record_matmul(SMALL, kind="profile", mode="measured (profile)")
    assert [r["id"] for r in measured_runs()] == [timed["id"]]
    assert {r["id"] for r in comparable_runs()} == {timed["id"], profiled["id"]}
    fig = roofline_figure([timed, profiled])
    labels = [t for trace in fig.data for t in (trace.text or ()) if isinstance(t, str)]
    names = [trace.name or "" for trace in fig.data] + labels
    assert not any(f"#{profiled['id']} " in n for n in names)
    assert any(f"#{timed['id']} " in n for n in names)


def test_exported_comparison_of_two_sizes_stays_under_the_roof(runs_db):
    from app.services.reports import run_report

    small, large = _record_matmul(SMALL), _record_matmul(LARGE)
    report = run_report(large, small)
    points = report["roofline"]["points"]
    assert len(points) == 2
    for p in points:
        assert p["achieved_gflops"] <= p["attainable_gflops"]
        assert p["fraction"] == pytest.approx(0.5, rel=1e-6)  # each at its own size's rate
    assert report["comparison"]["basis"] == FLOP_RATE
    assert "normalised by FLOPs" in report["comparison"]["verdict"]
    assert {json.dumps(m["sizes"]) for m in report["measurements"]} == \
        {json.dumps(SMALL), json.dumps(LARGE)}


def test_a_run_above_its_roof_is_not_placed_and_the_report_says_why(runs_db):
    from app.services.reports import run_report

    impossible = _record_matmul(SMALL, seconds=_at_half_roof(SMALL) / 100)  # 50x the roof
    report = run_report(impossible)
    assert report["roofline"]["points"] == []
    assert any("above the roof" in n for n in report["notes"])


def test_a_profiled_run_is_not_placed_on_an_exported_roofline(runs_db):
    from app.services.reports import run_report

    profiled = _record_matmul(SMALL, kind="profile", mode="measured (profile)")
    report = run_report(profiled)
    assert report["roofline"]["points"] == []
    assert any("profiled" in n for n in report["notes"])


@pytest.fixture(scope="module")
def user_op_report():
    """An operator report of a typed op (not in the library), with per-line costs."""
    from profilers.report import operator_report

    return operator_report(PAIRDIST, {"N": 8, "M": 8, "D": 16}, repeats=1, hotspots=True)


def test_the_baseline_is_named_the_reference_evaluator(user_op_report):
    from profilers.report_render import to_markdown

    assert "faster than the reference evaluator" in user_op_report["comparison"]["verdict"] \
        or "slower than the reference evaluator" in user_op_report["comparison"]["verdict"]
    text = to_markdown(user_op_report)
    assert "baseline library (torch)" not in text
    assert "Comparison with the reference evaluator" in text


def test_the_profiler_takes_the_users_own_op(runs_db, user_op_report):
    from app.services.profiling import op_to_profile, profilable_ops

    assert user_op_report["op"]["name"] == "pairdist" and user_op_report["verification"]["ok"]
    rid = history.record("run", {"odl": PAIRDIST, "backend": "c", "target": "host",
                                 "sizes": {"N": 8, "M": 8, "D": 16}}, {"ok": True, "op": "pairdist"})
    options = profilable_ops()
    mine = [o for o in options if o["value"] == f"run:{rid}"]
    assert mine and "pairdist" in mine[0]["label"]
    assert {"softmax", "layernorm", "matmul"} <= {o["value"] for o in options}
    assert op_to_profile(f"run:{rid}") == PAIRDIST


def test_the_flame_graph_names_its_hotspot_source(runs_db, user_op_report):
    from app.callbacks.profiler import draw_flame, hotspot_source_text
    from app.services.profiling import _root

    (_root() / "7.json").write_text(json.dumps(user_op_report, default=str))
    fig, *_ = draw_flame({"id": 7}, "kernel", None, "time", None, 0, None, {})
    title = fig.layout.title.text
    # the same tree as a sandwich, cut at its heaviest function unless one is chosen
    sandwich, _, options, chosen, style = draw_flame({"id": 7}, "kernel", None, "sandwich",
                                                     None, 0, None, {})
    if options:
        assert chosen == options[0]["value"] and style["display"] == "block"
        assert [t.type for t in sandwich.data] == ["table", "icicle", "icicle"]
    assert "valgrind installed" not in title
    hot = user_op_report["hotspots"]
    if hot is None:  # no profiler at all here: the figure says why, in the report's words
        assert user_op_report["hotspots_missing"] in title
    elif hot["meta"]["source"] == "callgrind":
        assert "callgrind" in title
    else:  # the AVX-512 host: valgrind is present but cannot decode the kernel
        assert "cycle counters" in title and hot["meta"]["why"] in hotspot_source_text(
            user_op_report)
    missing = {**user_op_report, "hotspots": None,
               "hotspots_missing": "valgrind cannot decode AVX-512 instructions"}
    assert hotspot_source_text(missing) == \
        "no per-line profile: valgrind cannot decode AVX-512 instructions"


def test_an_edited_library_op_is_offered_as_edited(runs_db):
    from app.services.profiling import profilable_ops

    edited = MATMUL.replace("C[m, n] = sum", "C[m, n] = 2.0 * sum")
    assert edited.strip() != MATMUL.strip(), "the edit must change the ODL"
    same = history.record("run", {"odl": MATMUL, "backend": "c", "target": "host",
                                  "sizes": SMALL}, {"ok": True, "op": "matmul"})
    rid = history.record("run", {"odl": edited, "backend": "c", "target": "host",
                                 "sizes": SMALL}, {"ok": True, "op": "matmul"})
    values = {o["value"]: o["label"] for o in profilable_ops()}
    assert f"run:{same}" not in values  # the library's own text: offered once, by name
    assert "edited" in values[f"run:{rid}"]


def test_a_bf16_run_stands_under_its_targets_bf16_roof(runs_db):
    """The Profiler's chart and a report draw a roof per target and peak seen: the bf16 GEMM
    (recorded with the bf16 peak it was held to) beside an fp32 matmul on one target."""
    from app.services.profiling import roofline_figure
    from app.services.reports import run_report

    target = "epyc-turin-9755"  # a fixed target with a bf16 peak, twice its fp32 one
    bf16_odl = MATMUL.replace("f32[M, K]", "bf16[M, K]").replace("f32[K, N]", "bf16[K, N]")
    cost = __import__("uol_core").op_cost(__import__("uol_core").parse(bf16_odl), LARGE)
    seconds = cost.flops / 30000e9  # 30 TFLOP/s: above the fp32 roof, under the bf16 one
    result = {"ok": True, "op": "mm", "sizes": LARGE, "median_s": seconds, "flops": cost.flops,
              "bytes": cost.bytes, "gflops": 30000.0, "gbs": cost.bytes / seconds / 1e9,
              "config": {}, "mode": "measured", "roofline": {"dtype": "bf16"}}
    rid = history.record("run", {"odl": bf16_odl, "backend": "c", "target": target,
                                 "sizes": LARGE, "config": {}}, result)
    row = history.get(rid)
    assert history.peak_of(row) == "bf16"
    fig = roofline_figure([row])
    assert any(f"#{rid} " in (t.name or "") for t in fig.data)  # placed, not left out
    assert any("bf16 44,237 GFLOP/s" in (t.name or "") for t in fig.data)
    point_ = run_report(row)["roofline"]["points"][0]
    # at 64 FLOP/B it sits left of the bf16 ridge: the DRAM roof, above the fp32 peak
    assert point_["dtype"] == "bf16" and point_["attainable_gflops"] > 22118.4
    assert point_["fraction"] == pytest.approx(30000 / point_["attainable_gflops"])


def test_the_time_panel_of_unlike_runs_says_why_it_is_empty():
    from profilers.figures.charts import comparison_bars

    a = Run("A", "matmul", "host", sizes=SMALL, median_s=2e-5, flops=2 * 32 ** 3)
    b = Run("B", "matmul", "host", sizes=LARGE, median_s=1e-3, flops=2 * 256 ** 3)
    notes = [n.text for n in comparison_bars(compare(a, b)).layout.annotations]
    assert any(t.startswith("not compared: the runs do different work") for t in notes)
    same = Run("C", "matmul", "host", sizes=SMALL, median_s=1e-5, flops=2 * 32 ** 3)
    notes = [n.text for n in comparison_bars(compare(a, same)).layout.annotations]
    assert not any("not compared" in t for t in notes)
