"""Real pipeline training on gloo processes: per-rank event streams, the simulator for the measured
stage times, a straggler's rebalance, and elastic recovery from a SIGKILL under torchrun."""

import os

import pytest
from typer.testing import CliRunner

from hcf_sim.pipelines.elastic import ElasticPlan, run_elastic
from hcf_sim.pipelines.paired import run_paired
from hcf_sim.pipelines.rank_events import RankEventTail, RankEventWriter, read_events
from hcf_sim.pipelines.real_pipeline import run_pipeline
from hcf_sim.pipelines.simulator import simulate_pipeline
from hcf_sim.pipelines.stage_model import PipeConfig
from uol_cli.hcf_cmd import app

pytestmark = pytest.mark.timeout(240)  # a wedged gloo rank must fail the test, not hang CI

TINY = dict(stages=2, microbatches=4, layers=4, d_model=32, seq=8, batch=8, steps=5)


@pytest.fixture(scope="module")
def two_stage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipe")
    return run_pipeline(PipeConfig(**TINY), folder, timeout_s=90), folder


def test_event_tail_reads_only_complete_lines(tmp_path):
    writer = RankEventWriter(tmp_path, 0)
    writer.record("F", 1.0, 2.0, step=0, mb=0)
    writer.flush()
    tail = RankEventTail(tmp_path)
    assert [e["kind"] for e in tail.poll()] == ["F"]
    with open(tmp_path / "rank0.jsonl", "a") as f:
        f.write('{"rank": 0, "kind": "B", "t0"')  # a rank caught mid-write
    assert tail.poll() == []
    with open(tmp_path / "rank0.jsonl", "a") as f:
        f.write(': 2.0, "t1": 3.0}\n')
    assert [e["kind"] for e in tail.poll()] == ["B"]
    writer.close()


def test_measured_backward_times_replace_the_ratio():
    ratio = simulate_pipeline(3, 6, "1f1b", [1e-3, 2e-3, 1e-3], bwd_ratio=2.0)
    given = simulate_pipeline(3, 6, "1f1b", [1e-3, 2e-3, 1e-3], bwd_s=[2e-3, 4e-3, 2e-3])
    assert given.makespan == pytest.approx(ratio.makespan)
    slower = simulate_pipeline(3, 6, "1f1b", [1e-3, 2e-3, 1e-3], bwd_s=[2e-3, 8e-3, 2e-3])
    assert slower.makespan > ratio.makespan


def test_two_stage_pipeline_streams_every_microbatch_and_meets_the_simulator(two_stage):
    rep, folder = two_stage
    events = read_events(folder)
    for rank in (0, 1):
        for step in range(TINY["steps"]):
            for kind in ("F", "B"):
                mbs = sorted(e["mb"] for e in events if e["rank"] == rank and e.get("step") == step
                             and e["kind"] == kind)
                assert mbs == list(range(TINY["microbatches"])), (rank, step, kind)
    # rank 1 waits for rank 0's activations before its first forward
    assert any(e["kind"] == "recv" and e["rank"] == 1 and e["of"] == "F" for e in events)
    ph = rep["phases"][0]
    assert ph["steps"] == list(range(1, TINY["steps"]))  # the warm-up step is left out
    for busy in ph["compute_s"]:
        assert 0 < busy < ph["step_s"]  # no rank is busy longer than the step
        assert busy < ph["sim_step_s"]
    assert 0 < ph["bubble_fraction"] < 1 and 0 < ph["sim_bubble_fraction"] < 1
    # the simulator, given the measured stage times, lands near the measured step (loose: shared cores)
    assert abs(ph["sim_error"]) < 0.75, ph["sim_error"]
    assert {r["rank"] for r in ph["measured_timeline"]} == {"rank 0", "rank 1"}
    assert len(rep["losses"]) == TINY["steps"] and all(loss > 0 for loss in rep["losses"])


def test_host_model_calibrated_on_1f1b_predicts_held_out_schedules(tmp_path):
    # the steps of the three schedules take turns in one run, so all see the same host load
    # the default model size: at TINY's 8-token, 32-wide blocks a micro-batch is mostly the
    # runtime's handovers, which differ by schedule (docs/hcf.md), and the errors swing past 50%
    cfgs = [PipeConfig(**{**TINY, "steps": 8, "layers": 8, "d_model": 64, "seq": 16, "batch": 16},
                       schedule=s) for s in ("1f1b", "gpipe", "interleaved")]
    out = run_paired(cfgs, tmp_path / "first", timeout_s=150)
    if not _held_out_within(out):
        # another job's burst on a shared core moved one configuration's steps 3x (a CI run: the
        # interleaved mean 132 ms beside gpipe's 42 ms); a wrong model misses on a second run too
        out = run_paired(cfgs, tmp_path / "second", timeout_s=150)
    cal = out["calibration"]
    assert cal["schedule"] == "1f1b" and 0 < min(cal["speed"]) <= max(cal["speed"]) <= 1
    for rank in (0, 1):  # CPU per micro-batch: the work of the rank's blocks, not its waits
        assert 0 < cal["fwd_cpu_s"][rank] < out["runs"]["1f1b_4"]["phases"][0]["stage_times"][str(rank)]["F"] * 1.5
    assert sorted(out["runs"]) == ["1f1b_4", "gpipe_4", "interleaved_4"]
    # each rank's stage work, profiled beside the steps: below what the runtime's actions cost it
    for name, run in out["runs"].items():
        host = run["phases"][0]["host_calibration"]
        assert min(host["profile_fwd_s"]) > 0 and min(host["profile_bwd_s"]) > 0, name
        assert host["chunks_per_rank"] == (2 if name.startswith("interleaved") else 1)
    assert all(held["work"] == "profiled" and held["held_out"] == "schedule" for held in out["held_out"])
    # the losses of each configuration are its own training's (same seed, same data: equal start)
    assert out["runs"]["gpipe_4"]["losses"][0] == pytest.approx(out["runs"]["1f1b_4"]["losses"][0], abs=1e-5)
    assert _held_out_within(out), out["held_out"]


def _held_out_within(out: dict) -> bool:
    """Loose for shared cores (other jobs' bursts move single steps 3x); the 15% goal: UOL_LONG=1."""
    errors = [abs(held["error"]) for held in out["held_out"]]
    return sum(errors) / len(errors) < 0.3 and max(errors) < 0.5


@pytest.mark.skipif(not os.environ.get("UOL_LONG"), reason="the 15% goal needs steady cores; set UOL_LONG=1")
def test_held_out_microbatch_counts_within_15_percent(tmp_path):
    specs = [("1f1b", 4), ("gpipe", 4), ("interleaved", 4), ("1f1b", 8), ("gpipe", 8), ("interleaved", 8)]
    out = run_paired([PipeConfig(schedule=s, microbatches=m, steps=10) for s, m in specs], tmp_path, 600)
    errors = {f"{h['schedule']} x {h['microbatches']} from {h['calibrated_on']}": round(h["error"], 3)
              for h in out["held_out"]}
    assert len(errors) == 7, errors  # five from 1F1B x 4, and gpipe/interleaved x 8 from their own x 4
    counts = [h for h in out["held_out"] if h["held_out"] == "micro-batch count"]
    assert len(counts) == 3 and all(abs(h["error"]) <= 0.15 for h in counts), errors
    # another schedule: its runtime's communication is not 1F1B's (docs/hcf.md); measured 6-17% short
    assert all(abs(e) <= 0.25 for e in errors.values()), errors


WIDER = {**TINY, "layers": 12, "steps": 8, "d_model": 64, "seq": 16, "batch": 16}


def test_rebalancing_moves_blocks_off_the_slow_rank_and_keeps_the_training_exact(tmp_path):
    # a 3x rank: each of its blocks runs three times and averages, bit-identical to running
    # once. Blocks this small carry a fixed cost per call that does not repeat: a 2x rank
    # measured 1.37-1.91x its peer's busy time, and once less than the 1.17x that moves a
    # block; a 3x rank measures 2.3-2.7x.
    slowed = run_pipeline(PipeConfig(**WIDER, slow_rank=1, slow_factor=3, rebalance_at=4), tmp_path / "a", 90)
    plain = run_pipeline(PipeConfig(**WIDER), tmp_path / "b", 90)
    rb = slowed["rebalance"]
    assert rb["measured_stage_s"][1] > rb["measured_stage_s"][0]
    assert rb["before"] == [6, 6] and rb["after"][1] < 6 and sum(rb["after"]) == 12
    # the new split is the one the measured stage times predict faster (by how much depends on
    # the host's load: the >= 20% step-time goal is checked with UOL_LONG=1)
    assert slowed["phases"][1]["split"] == rb["after"] and rb["predicted_speedup"] > 1.0
    # the weights moved between processes intact: the same losses as the run never re-split
    assert max(abs(a - b) for a, b in zip(slowed["losses"], plain["losses"], strict=True)) <= 1e-5


@pytest.mark.skipif(not os.environ.get("UOL_LONG"), reason="step-time gain needs idle cores; set UOL_LONG=1")
def test_rebalance_cuts_the_step_time_of_a_2x_slow_stage(tmp_path):
    cfg = PipeConfig(**{**WIDER, "steps": 16}, slow_rank=1, slow_factor=2, rebalance_at=8)
    rep = run_pipeline(cfg, tmp_path, 300)
    assert rep["phases"][0]["stragglers"] == [1]
    assert rep["rebalance"]["gain"] >= 0.2, rep["rebalance"]


def test_elastic_recovery_after_sigkill_matches_the_uninterrupted_run(two_stage, tmp_path):
    reference = two_stage[0]["losses"]
    out = run_elastic(PipeConfig(**TINY), ElasticPlan(checkpoint_every=2, kill_rank=1, kill_after_step=2),
                      tmp_path, timeout_s=150)
    rec = out["recovery"]
    assert out["attempts"] == 2
    assert rec["resumed_from_step"] == 2  # the checkpoint written after steps 0-1
    assert rec["lost_steps"] == rec["last_step_before_kill"] + 1 - 2 >= 1
    assert len(out["losses"]) == len(reference)
    assert max(abs(a - b) for a, b in zip(out["losses"], reference, strict=True)) <= 1e-5
    assert 0 < rec["detection_s"] < 10 and rec["restart_s"] > 0 and rec["reload_s"] > 0
    assert rec["back_to_kill_point_s"] > rec["ready_s"] > rec["detection_s"]
    assert (tmp_path / "checkpoints" / "step_000002" / ".metadata").exists()


def test_cli_refuses_what_one_machine_cannot_run():
    def said(args: list[str]) -> str:
        res = CliRunner().invoke(app, ["run-pipeline", *args])
        assert res.exit_code == 2, res.output
        return " ".join(res.output.split())  # the console wraps long lines

    assert "2-8 stages" in said(["--stages", "1"])
    assert "use --schedule 1f1b or gpipe" in said(["--schedule", "interleaved", "--rebalance-at", "3"])
    assert "split evenly" in said(["--batch", "10", "--microbatches", "4", "--json"])
