"""The host model of a pipeline step: CPU work, the share of a core a rank gets, the handover delay."""

import pytest

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.host_model import HostCalibration, calibrate, retarget, simulate_host
from hcf_sim.pipelines.simulator import simulate_pipeline

FWD, BWD = [2e-3, 3e-3], [4e-3, 5e-3]


def host(speed=(1.0, 1.0), handover=0.0, action=(0.0, 0.0)) -> HostCalibration:
    return HostCalibration(list(FWD), list(BWD), list(action), list(speed), handover)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
def test_a_core_per_rank_is_the_plain_simulator(schedule):
    # every rank at full speed: the same step as the wall-time simulator with the handover as p2p
    ours = simulate_host(host(handover=1e-3), 2, 4, schedule)
    plain = simulate_pipeline(2, 4, schedule, FWD, p2p_s=1e-3, bwd_s=BWD)
    assert ours.makespan == pytest.approx(plain.makespan)
    assert ours.compute == pytest.approx(plain.compute)


def test_retarget_keeps_the_runtime_per_action_and_takes_the_profiled_work():
    cal = HostCalibration([3e-3, 4e-3], [5e-3, 6e-3], [1e-4, 1e-4], [1.0, 1.0], 1e-4, "1f1b", 4,
                          chunks_per_rank=1, profile_fwd_s=[2.5e-3, 3.5e-3], profile_bwd_s=[4.5e-3, 5.5e-3])
    same = retarget(cal, cal.profile_fwd_s, cal.profile_bwd_s, 1)
    assert same.fwd_cpu_s == pytest.approx(cal.fwd_cpu_s) and same.bwd_cpu_s == pytest.approx(cal.bwd_cpu_s)
    # two chunks per rank: the profiled work of both, plus the runtime's 0.5 ms per action twice
    two = retarget(cal, [2e-3, 2e-3], [3e-3, 3e-3], 2)
    assert two.fwd_cpu_s == pytest.approx([3e-3, 3e-3]) and two.bwd_cpu_s == pytest.approx([4e-3, 4e-3])
    assert two.chunks_per_rank == 2 and two.speed == cal.speed and two.handover_s == cal.handover_s
    with pytest.raises(HcfError, match="profiled no stage work"):
        retarget(host(), [1e-3, 1e-3], [1e-3, 1e-3], 1)


def test_ranks_sharing_one_core_serialise():
    both = simulate_host(host(speed=(1.0, 0.5)), 2, 8, "gpipe")
    # one core for two ranks: the step is at least all the work of both ranks in a row
    assert both.makespan >= 8 * (sum(FWD) + sum(BWD)) - 1e-12
    # on a core each, the ranks overlap and the step is much shorter
    assert simulate_host(host(), 2, 8, "gpipe").makespan < 0.75 * both.makespan


def test_framework_cpu_per_action_counts_once_per_chunk():
    plain = simulate_host(host(), 2, 4, "interleaved").makespan
    loaded = simulate_host(host(action=(1e-3, 1e-3)), 2, 4, "interleaved").makespan
    # 4 micro-batches x 2 chunks x (F + B) actions on each rank, partly overlapped across ranks
    assert 16e-3 <= loaded - plain <= 32e-3


def _events_of(step, makespan: float, speed: float) -> list[dict]:
    """Per-rank events as the real ranks write them, from a simulated step (CPU = wall x speed)."""
    rows = []
    for e in step.events:
        kind, rest = e.label[0], e.label[1:]
        rows.append({"rank": e.rank, "kind": kind, "t0": e.start, "t1": e.end, "step": 1,
                     "mb": int(rest.split(".")[0]), "cpu": (e.end - e.start) * speed})
    for rank in (0, 1):
        cpu = sum(r["cpu"] for r in rows if r["rank"] == rank)
        rows.append({"rank": rank, "kind": "step", "t0": 0.0, "t1": makespan, "step": 1, "cpu": cpu})
    return rows


def test_calibration_recovers_the_parameters_of_a_known_run():
    truth = host(speed=(0.8, 0.8), handover=2e-3)
    step = simulate_host(truth, 2, 4, "1f1b")
    cal = calibrate(_events_of(step, step.makespan, 0.8), [1], 2, "1f1b", 4)
    assert cal.fwd_cpu_s == pytest.approx(FWD) and cal.bwd_cpu_s == pytest.approx(BWD)
    assert cal.speed[0] == pytest.approx(0.8)
    assert cal.handover_s == pytest.approx(2e-3, rel=1e-3)
    # a held-out schedule and micro-batch count from the calibration: the truth's own step
    for schedule, m in (("gpipe", 4), ("1f1b", 8), ("interleaved", 4)):
        assert simulate_host(cal, 2, m, schedule).makespan == pytest.approx(
            simulate_host(truth, 2, m, schedule).makespan, rel=1e-3)


def test_old_events_without_cpu_times_are_refused_with_a_way_out():
    rows = [{"rank": 0, "kind": "F", "t0": 0.0, "t1": 1.0, "step": 1, "mb": 0}]
    with pytest.raises(HcfError, match="run the pipeline again"):
        calibrate(rows, [1], 2, "1f1b", 4)
    with pytest.raises(HcfError, match="asks for 3"):
        simulate_host(host(), 3, 4, "1f1b")
