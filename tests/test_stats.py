"""Timings one can trust (uol_core.runtime.stats): a median with its bootstrap 95% CI, a
comparison that says "no significant difference" for two runs of one distribution and names a
real speedup with its CI, and a noisy flag that says which threshold was passed."""

from __future__ import annotations

import random

import pytest

from uol_core.runtime import stats


def _draw(seed: int, n: int = 60, scale: float = 1e-3, sigma: float = 0.08) -> list[float]:
    rng = random.Random(seed)
    return [scale * rng.lognormvariate(0.0, sigma) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_distribution_is_no_significant_difference(seed):
    verdict = stats.compare(_draw(seed), _draw(seed + 100), a_label="#1", b_label="#2")
    assert verdict.significant is False
    assert verdict.text.startswith("no significant difference between #2 and #1")
    assert verdict.low <= 1.0 <= verdict.high


def test_a_clear_speedup_is_named_with_its_interval():
    slow, fast = _draw(7), [t / 1.3 for t in _draw(8)]
    verdict = stats.compare(slow, fast, a_label="#1", b_label="#2")
    assert verdict.significant is True
    assert 1.0 < verdict.low <= verdict.ratio <= verdict.high
    assert verdict.text.startswith("#2 is 1.")
    assert "x faster than #1 (95% CI 1." in verdict.text
    back = stats.compare(fast, slow, a_label="#2", b_label="#1")
    assert back.significant and "x slower than #2 (95% CI 1." in back.text


def test_a_tiny_shift_is_no_significant_difference():
    base = _draw(9, n=400, sigma=0.01)
    verdict = stats.compare(base, [t / 1.01 for t in base])
    assert verdict.significant is False and "under the 3%" in verdict.text


def test_without_samples_the_significance_is_unknown():
    verdict = stats.compare(None, _draw(1), a_median=1.2e-3)
    assert verdict.significant is None and verdict.low is None
    assert stats.NO_SAMPLES in verdict.text


def test_estimate_brackets_the_median_and_is_seeded():
    samples = _draw(3)
    est = stats.estimate(samples)
    assert est.n == len(samples)
    assert est.ci_low_s <= est.median_s <= est.ci_high_s
    assert stats.estimate(samples) == est  # a report rebuilt reads the same


def test_high_iqr_is_flagged_noisy_with_threshold_and_value():
    wide = [1e-3] * 10 + [1.5e-3] * 10 + [2e-3] * 10
    summary = stats.summary(wide)
    assert summary["noisy"] is True
    assert "IQR/median" in summary["noise_reason"] and "> 10%" in summary["noise_reason"]
    quiet = stats.summary(_draw(4, sigma=0.01), load={"load_per_core": 0.2, "steal": 0.0})
    assert quiet["noisy"] is False
    assert "load per core 0.20 (limit 1.00)" in quiet["noise_reason"]


def test_machine_load_flags_a_run():
    noise = stats.judge_noise(0.01, {"load_per_core": 2.5, "steal": 0.12})
    assert noise.noisy
    assert "load per core 2.50 > 1.00" in noise.reason and "CPU steal 12.0% > 5.0%" in noise.reason


def test_thin_keeps_the_distribution():
    samples = list(range(10_000))
    kept = stats.thin(samples, 256)
    assert len(kept) == 256 and kept[0] == 0 and kept[-1] == 9_999
    assert abs(stats.estimate(kept).median_s - 4_999.5) < 40


def test_load_during_reads_the_machine():
    load = stats.load_during(stats.load_snapshot())
    assert load["cores"] >= 1
