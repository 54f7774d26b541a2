"""Two runs of one config are "no significant difference" wherever the IDE compares them (the
Studio's history diff, the Profiler's compare, the exported report), a real speedup carries
its 95% CI, older runs without samples say their significance is unknown, and a pinned run is
the baseline comparisons use."""

from __future__ import annotations

import random

import pytest

from app.services import history

MATMUL = """op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""
SIZES = {"M": 32, "K": 32, "N": 32}


@pytest.fixture
def runs_db(tmp_path, monkeypatch):
    """A private history database and cache root for one test."""
    monkeypatch.setenv("UOL_IDE_RUNS_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "runs.sqlite"


def _samples(seed: int, scale: float = 1e-4, n: int = 60) -> list[float]:
    rng = random.Random(seed)
    return sorted(scale * rng.lognormvariate(0.0, 0.08) for _ in range(n))


def _record(samples: list[float] | None, median: float | None = None,
            config: dict | None = None) -> dict:
    """A timed matmul run as the runner records it (samples, n, CI and noise with it)."""
    import statistics

    import uol_core
    from uol_core.runtime import stats

    cost = uol_core.op_cost(uol_core.parse(MATMUL), SIZES)
    seconds = statistics.median(samples) if samples else median
    result = {"ok": True, "op": "matmul", "sizes": SIZES, "median_s": seconds,
              "iqr_s": seconds * 0.05, "flops": cost.flops, "bytes": cost.bytes,
              "gflops": cost.flops / seconds / 1e9, "gbs": cost.bytes / seconds / 1e9,
              "config": config or {"ku": 1}, "mode": "measured"}
    if samples:
        result["samples"] = samples
        result.update(stats.summary(samples, median_s=seconds, iqr_s=result["iqr_s"]))
    rid = history.record("run", {"odl": MATMUL, "backend": "c", "target": "host",
                                 "sizes": SIZES, "config": result["config"]}, result, "k;")
    return history.get(rid)


def test_two_runs_of_one_config_are_no_significant_difference_everywhere(runs_db):
    from app.components.studio_parts import run_diff
    from app.services.profiling import run_of
    from app.services.reports import export, run_report
    from profilers.compare import compare

    first, second = _record(_samples(1)), _record(_samples(2))
    assert "no significant difference between #2 and #1" in history.compare_rows(first, second)
    summary = run_diff(first, second).children[1].children
    assert "no significant difference" in summary and "x faster" not in summary
    profiler = compare(run_of(first), run_of(second))
    assert profiler.verdict.startswith("no significant difference")
    report = run_report(second, first)
    assert report["comparison"]["verdict"].startswith("no significant difference")
    assert report["comparison"]["significance"]["significant"] is False
    assert all(m["ci_95"].endswith(" ms") for m in report["measurements"])
    html, _ = export(second, "html", first)
    assert b"no significant difference" in html and b"x faster" not in html


def test_a_real_speedup_is_named_with_its_interval(runs_db):
    from app.services.reports import run_report

    slow, fast = _record(_samples(3)), _record(_samples(4, scale=0.75e-4), config={"ku": 4})
    verdict = run_report(fast, slow)["comparison"]["verdict"]
    assert " is 1.3" in verdict and "x faster than " in verdict and "(95% CI 1." in verdict


def test_runs_without_samples_compare_by_median_with_unknown_significance(runs_db):
    old, new = _record(None, median=2e-4), _record(_samples(5))
    text = history.compare_rows(old, new)
    assert "by the medians" in text and "no samples stored: significance unknown" in text
    assert history.timing(old).get("ci_low_s") is None


def test_a_pinned_run_is_the_baseline_of_the_history_diff(runs_db):
    from app.components.studio_parts import history_panel

    base, _mid, last = _record(_samples(6)), _record(_samples(7)), _record(_samples(8))
    assert history.baseline_for(last) is None
    history.pin(base["id"])
    assert history.baseline_for(last)["id"] == base["id"]
    panel = history_panel(history.runs(op="matmul"))
    diff = panel[-1]
    assert diff.id == "run-diff"
    assert diff.children[0].children == f"Diff: run #{base['id']} (pinned baseline) → #{last['id']}"
    history.pin(last["id"])  # one baseline per op, sizes, backend and target
    assert not history.get(base["id"])["pinned"] and history.get(last["id"])["pinned"]
    with pytest.raises(KeyError):
        history.pin(10_000)


def test_the_result_panel_shows_the_interval_and_why_a_run_is_noisy():
    from app.components.studio_parts import run_result
    from uol_core.runtime import stats

    wide = [1e-3] * 10 + [1.5e-3] * 10 + [2e-3] * 10
    res = {"ok": True, "id": 3, "median_s": 1.5e-3, "iqr_s": 1e-3, "gflops": 1.0,
           **stats.summary(wide)}
    panel = run_result(res)
    metrics = [getattr(c, "children", c) for c in panel[1].children]
    assert any(isinstance(m, str) and "(95% CI " in m and "n=30" in m for m in metrics)
    badge = next(c for c in panel[1].children if getattr(c, "id", None) == "run-noise")
    assert badge.children == "⚠ noisy" and "IQR/median 67% > 10%" in badge.title
