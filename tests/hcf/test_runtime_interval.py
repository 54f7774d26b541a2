"""The gloo all-reduce validation gives each held-out prediction an interval from the host's
spread: the model's misses and the calls' spread on the held-in sizes, CPU steal, late wake-ups."""

import pytest

from hcf_sim.calibration.alpha_beta import spread, validate
from hcf_sim.runtime.host_noise import HostNoise

QUIET = HostNoise(wake_median_s=5e-5, wake_p90_s=6e-5, steal_share=0.0, loadavg=0.1, cores=2)


def test_spread_covers_the_models_misses_and_the_calls_jitter():
    steady = [(1.0, {"median": 1.05, "p10": 1.0, "p90": 1.1})]
    jittery = [(1.0, {"median": 1.05, "p10": 0.7, "p90": 1.6})]
    low, high = spread(2, steady, QUIET)
    assert high == pytest.approx(max(0.05, 1.1 / 1.05 - 1))
    assert low == pytest.approx(1 - 1.0 / 1.05)
    wide_low, wide_high = spread(2, jittery, QUIET)
    assert wide_high > high and wide_low > low  # a noisier host: a wider interval


@pytest.mark.timeout(240)
def test_validate_gives_every_held_out_row_an_interval_around_its_prediction():
    v = validate([2], [4096, 16384, 65536, 262144], iters=3)
    assert v["host_noise"]["cores"] >= 1 and 0 <= v["inside_interval"] <= 1
    for row in v["rows"]:
        low, high = row["interval"]
        assert 0 < low <= row["predicted"] <= high
        assert row["inside_interval"] == (low <= row["measured"] <= high)
