"""The Studio's tune budget check and tune summary: limits named, counts from the measurements."""

from __future__ import annotations

import pytest

from app.callbacks.studio_run import budget_problem, tune_summary
from app.services.runner import MAX_TUNE_BUDGET


@pytest.mark.parametrize("typed", ["100000", "-3", "0", "abc", "", None, "2.5"])
def test_a_bad_budget_is_refused_with_its_limits(typed):
    value, problem = budget_problem(typed)
    assert value == 0
    assert f"from 1 to {MAX_TUNE_BUDGET}" in problem


@pytest.mark.parametrize("typed, expected", [("6", 6), (" 12 ", 12), (1, 1),
                                             (str(MAX_TUNE_BUDGET), MAX_TUNE_BUDGET)])
def test_a_good_budget_is_taken_as_typed(typed, expected):
    assert budget_problem(typed) == (expected, "")


def test_summary_counts_what_was_measured_not_the_budget():
    trail = [{"ok": True, "gflops": 3.0}, {"ok": False, "gflops": 0.0},
             {"ok": True, "gflops": 5.0}, {"ok": True, "gflops": 4.0},
             {"ok": True, "gflops": 1.0}]
    text = tune_summary(trail, 6, {"config": {"mr": 4, "nr": 32}, "gflops": 5.0})
    assert text.startswith("✓ 5 measured of a budget of 6, 4 verified")
    assert "best verified: 5.00 GFLOP/s with mr=4, nr=32" in text


def test_summary_without_a_verified_config_says_so():
    text = tune_summary([{"ok": False, "gflops": 0.0}], 6, None)
    assert text == "No verified config: 1 measured of a budget of 6, 0 verified."
