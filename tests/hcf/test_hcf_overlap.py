"""DDP bucket overlap, pipeline schedules against the bubble formula, stragglers and re-balancing."""

import pytest

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.simulator import balance_layers, rebalance, simulate_pipeline
from hcf_sim.simulation.overlap import ddp_step, make_buckets


def test_buckets_follow_reverse_layer_order_and_first_bucket_cap():
    mb = 1 << 20
    assert make_buckets([mb, mb, mb, mb], 2) == [[3], [2, 1], [0]]


def test_ddp_overlap_by_hand():
    # two layers of 1 MiB, 1 ms backward each, all-reduce 1.5 ms per bucket
    r = ddp_step([1 << 20, 1 << 20], [1e-3, 1e-3], 0.0, 25, lambda b: 1.5e-3)
    assert r.buckets[0].start == pytest.approx(1e-3)  # last layer's gradient is ready after 1 ms
    assert r.step_time == pytest.approx(1e-3 + 1.5e-3 + 1.5e-3)
    assert r.exposed_comm == pytest.approx(r.step_time - 2e-3)
    slow = ddp_step([1 << 20, 1 << 20], [1e-3, 1e-3], 0.0, 25, lambda b: 1.5e-3, rank_slowdown=[1.0, 2.0])
    assert slow.step_time > r.step_time and any(e.kind == "bubble" for e in slow.events)


@pytest.mark.parametrize("s,m", [(2, 1), (4, 8), (7, 14), (3, 5)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_bubble_matches_formula(schedule, s, m):
    r = simulate_pipeline(s, m, schedule)
    assert 1 - r.utilisation == pytest.approx((s - 1) / (m + s - 1))


def test_interleaved_shrinks_the_bubble():
    plain = simulate_pipeline(4, 8, "1f1b")
    inter = simulate_pipeline(4, 8, "interleaved", chunks=2)
    assert inter.utilisation > plain.utilisation
    assert 1 - inter.utilisation == pytest.approx(inter.ideal_bubble_fraction)
    with pytest.raises(HcfError, match="divisible"):
        simulate_pipeline(4, 6, "interleaved")


def test_dp_allreduce_and_straggler_cost_utilisation():
    base = simulate_pipeline(4, 8, "1f1b")
    dp = simulate_pipeline(4, 8, "1f1b", dp_allreduce_s=5e-3)
    assert dp.makespan == pytest.approx(base.makespan + 5e-3)
    slow = simulate_pipeline(4, 8, "1f1b", slowdown=[1, 1, 2, 1])
    assert slow.makespan > 1.5 * base.makespan


def test_rebalance_moves_layers_off_the_slow_stage():
    assert balance_layers([1] * 8, 4) == [2, 2, 2, 2]
    rb = rebalance([4, 4, 4, 4], [4.0, 8.0, 4.0, 4.0])
    assert rb["layers_after"][1] < 4 and rb["speedup"] > 1.5
