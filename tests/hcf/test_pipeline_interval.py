"""The pipeline step prediction with its interval on this host: every run's check is well formed and
its prediction is not off by half; a noisier host (more CPU steal, a longer wake-up tail) widens the
interval instead of failing. How many runs of five pass depends on the host's load while they run,
so that count is a benchmark figure (`benchmarks/pipeline_check.py`), not a test."""

import json

import pytest
from typer.testing import CliRunner

from hcf_sim.pipelines.rank_events import read_events
from hcf_sim.pipelines.real_pipeline import run_pipeline
from hcf_sim.pipelines.stage_model import PipeConfig
from hcf_sim.pipelines.uncertainty import step_check
from hcf_sim.runtime.host_noise import HostNoise, HostProbe, quantile
from uol_cli.hcf_cmd import app

pytestmark = pytest.mark.timeout(300)

SMALL = dict(stages=2, microbatches=8, layers=4, d_model=32, seq=8, batch=16, steps=5)


def test_three_runs_give_well_formed_checks_near_the_measured_step(tmp_path):
    checks = [run_pipeline(PipeConfig(**SMALL), tmp_path / f"run{i}", timeout_s=90)["check"] for i in range(3)]
    for c in checks:
        low, high = c["interval_s"]
        assert 0 < low <= c["predicted_step_s"] <= high
        assert c["inside_interval"] == (low <= c["measured_step_s"] <= high)
        assert c["passes"] == (c["inside_interval"] or abs(c["error"]) <= c["tolerance"])
        assert c["host_noise"]["cores"] >= 1 and c["critical_handovers"] > 0
    # Seen on loaded 2-vCPU hosts: -2% to -28%. A model off by half is broken, not noisy.
    errors = [round(c["error"], 3) for c in checks]
    assert all(abs(e) < 0.5 for e in errors), errors


def test_a_noisier_host_widens_the_interval(tmp_path):
    cfg = PipeConfig(**SMALL)
    run_pipeline(cfg, tmp_path, timeout_s=90)
    events, steps = read_events(tmp_path), list(range(cfg.warmup, cfg.steps))
    quiet = HostNoise(wake_median_s=5e-5, wake_p90_s=6e-5, steal_share=0.0, loadavg=0.1, cores=2)
    calm = step_check(cfg, events, steps, 1e-4, quiet)
    # wake-ups later than the run's own handovers ever were, and a fifth of the CPU stolen
    noisy = HostNoise(wake_median_s=5e-5, wake_p90_s=5e-5 + calm["handover_tail_s"] + 0.01, steal_share=0.2,
                      loadavg=6.0, cores=2)
    busy = step_check(cfg, events, steps, 1e-4, noisy)
    assert calm["predicted_step_s"] == busy["predicted_step_s"]  # the host changes how sure, not what
    assert busy["interval_s"][1] > calm["interval_s"][1] * 1.2
    assert busy["interval_s"][0] == calm["interval_s"][0]


def test_host_probe_measures_wakeups_and_load():
    with HostProbe() as probe:
        pass
    noise = probe.noise
    assert 0 <= noise.wake_median_s <= noise.wake_p90_s < 1.0
    assert 0 <= noise.steal_share <= 1 and noise.loadavg >= 0 and noise.cores >= 1


def test_run_pipeline_json_reports_the_check(tmp_path):
    out = CliRunner().invoke(app, ["run-pipeline", "--stages", "2", "--microbatches", "4", "--layers", "4",
                                   "--d-model", "32", "--steps", "4", "--events", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    check = json.loads(out.output)["check"]
    assert set(check) >= {"predicted_step_s", "interval_s", "measured_step_s", "inside_interval", "passes"}


def test_varying_handovers_lengthen_the_mean_step_and_constant_draws_change_nothing():
    import itertools
    import statistics

    from hcf_sim.pipelines.simulator import simulate_pipeline

    fixed = simulate_pipeline(2, 8, "1f1b", [2e-3, 2e-3], p2p_s=1e-3, bwd_s=[3e-3, 3e-3]).makespan
    same = simulate_pipeline(2, 8, "1f1b", [9.0, 9.0], bwd_s=[9.0, 9.0], p2p_draw=lambda: 1e-3,
                             action_draw=lambda d, kind: 2e-3 if kind == "F" else 3e-3).makespan
    assert same == pytest.approx(fixed, rel=1e-12)  # draws that never vary are the fixed times
    # handovers of 0.2 or 1.8 ms (mean 1 ms): the schedule waits for the later path each time,
    # so the mean step is longer than the step at the mean delay
    varied = []
    for seed in range(16):
        flips = itertools.cycle([0.2e-3, 1.8e-3][seed % 2:] + [0.2e-3, 1.8e-3][:seed % 2])
        varied.append(simulate_pipeline(2, 8, "1f1b", [2e-3, 2e-3], bwd_s=[3e-3, 3e-3],
                                        p2p_draw=lambda f=flips: next(f)).makespan)
    assert statistics.fmean(varied) > fixed


def test_the_prediction_is_the_mean_of_draws_of_the_runs_own_times(tmp_path):
    import statistics

    from hcf_sim.pipelines.uncertainty import DRAWS, drawn_steps, simulate_steps

    cfg = PipeConfig(**SMALL)
    run_pipeline(cfg, tmp_path, timeout_s=90)
    events, steps = read_events(tmp_path), list(range(cfg.warmup, cfg.steps))
    drawn = drawn_steps(cfg, events, steps, 1e-4)
    assert len(drawn) == DRAWS and drawn == drawn_steps(cfg, events, steps, 1e-4)  # seeded: reproducible
    at_mean = simulate_steps(cfg, events, steps, 1e-4).makespan
    assert 0.5 * at_mean < statistics.fmean(drawn) < 2.0 * at_mean
    check = step_check(cfg, events, steps, 1e-4, None)
    assert check["predicted_step_s"] == pytest.approx(statistics.fmean(drawn))
    low, high = check["interval_s"]
    assert low <= quantile(drawn, 0.1) <= quantile(drawn, 0.9) <= high  # the draws' spread is inside
