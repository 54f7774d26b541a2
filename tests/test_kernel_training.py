"""The Training page's "Train on UOL kernels" service: knobs checked, a real run to its result."""

from __future__ import annotations

import time

import pytest

from app.services import kernel_training


@pytest.mark.parametrize(("knobs", "says"), [
    ((5, "auto", "uol"), "Steps: use 10-400, got 5"),
    (("many", "auto", "uol"), "Steps: a whole number from 10 to 400"),
    ((20, "cuda", "uol"), "Backend: one of auto"),
    ((20, "auto", "adam"), "Optimizer: uol or torch"),
    ((20, "auto", "uol", "resnet"), "Model: mlp or nanogpt"),
])
def test_knobs_out_of_range_name_the_knob_and_its_limits(knobs, says):
    with pytest.raises(ValueError, match=says):
        kernel_training.make_config(*knobs)


def _finished(cfg: dict) -> dict:
    # the session's private cache (tests/conftest.py): kernels built once for the suite
    run_id = kernel_training.start(cfg, "local")
    deadline = time.monotonic() + 240
    while (snap := kernel_training.snapshot(run_id))["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, snap
        time.sleep(0.2)
    assert snap["state"] == "done", snap["error"]
    live = kernel_training.run_folder(run_id) / "live.json"
    assert live.exists()  # the page's curves while it ran: written at the last step too
    return snap["result"]


@pytest.mark.parametrize(("model", "optimizer", "on_uol"), [
    ("mlp", "uol", "SGD (momentum)"),
    ("nanogpt", "uol", "AdamW"),
])
def test_a_run_ends_with_both_curves_the_same_loss_and_its_uol_parts(model, optimizer, on_uol):
    res = _finished(kernel_training.make_config(10, "c", optimizer, model))
    assert len(res["torch"]["losses"]) == len(res["uol"]["losses"]) == 10
    assert res["final_loss_relative_gap"] < 1e-4  # the same model, computed by other kernels
    assert on_uol in res["uol"]["swapped"]
    if model == "nanogpt":
        assert "attention (causal)" in res["uol"]["swapped"]
        assert res["torch"]["accuracy"] is None  # a regression


def test_a_run_id_cannot_name_another_path():
    with pytest.raises(ValueError, match="not a training run id"):
        kernel_training.run_folder("../../etc")


def test_the_step_time_chart_names_the_steps_it_cannot_show():
    from app.figures.training import twin_loss, twin_step_times

    fig = twin_step_times([[12.0, 0.8, 0.81, 0.79], [23500.0, 0.5, 0.52, 0.49]])
    assert fig.layout.yaxis.range == (0, pytest.approx(2.415))  # 3x the larger median
    assert [a.text for a in fig.layout.annotations] == [
        "off the chart: torch eager step 1: 12.00 ms; UOL kernels step 1: 23.5 s"]
    assert [t.name for t in twin_loss([[2.3, 1.0], [2.3, 1.0]]).data] == \
        ["torch eager", "UOL kernels"]


def test_a_run_past_its_limit_is_stopped_and_says_so():
    from app.services import child_runs

    run_id = child_runs.start_child("kernel-training-runs", {"steps": 1}, "local", "a test run",
                                    "import time; time.sleep(30)", [], 0.5)
    folder = child_runs.run_folder("kernel-training-runs", run_id)
    deadline = time.monotonic() + 30
    while (status := child_runs.read_status(folder))["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status == {"state": "failed",
                      "error": "the run passed its limit of 0.5 s and was stopped: ask for fewer steps"}
