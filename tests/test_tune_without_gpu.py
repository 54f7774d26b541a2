"""A Triton tune on a machine without a GPU verifies each config under the interpreter and says it
needs a GPU to time them: never "0 verified", a rate of 0 GFLOP/s or a point plotted at 0."""

from __future__ import annotations

import json
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from typer.testing import CliRunner

from uol_core.ops import load_op
from uol_core.runtime.untimed import NEEDS_GPU

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="with a GPU the configs are timed")
pytest.importorskip("triton")

ARGS = ["tune", "softmax", "--shape", "R=16,C=64", "--target", "h200-sxm", "--backend",
        "triton", "--budget", "2"]


def _uol(args: list[str]) -> str:
    from uol_cli.main import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_tune_says_it_needs_a_gpu_to_time(tmp_path) -> None:
    db = ["--db", str(tmp_path / "tune.db")]
    text = _uol(ARGS + db)
    lines = [line for line in text.splitlines() if "(model #" in line]
    assert len(lines) == 2 and all("verified" in ln and NEEDS_GPU in ln for ln in lines)
    assert "GF/s" not in text and "0 verified" not in text
    assert "2 of 2 configs verified under the Triton interpreter" in text
    report = json.loads(_uol(ARGS + db + ["--json"]))
    assert report["best"] is None and report["best_gflops"] is None
    assert NEEDS_GPU in report["note"]
    assert {t["status"] for t in report["trials"]} == {"verified"}


def test_studio_tune_verifies_under_the_interpreter_and_plots_no_zero() -> None:
    from app.callbacks.studio_run import _tune, progress_line, tune_summary
    from app.figures.studio import tune_figure
    from app.services import tune_jobs
    from app.services.job_queue import LOCAL_CLIENT

    odl = load_op("softmax").source
    state = {"ok": True, "op": "softmax", "odl": odl, "backend": "triton",
             "target": "h200-sxm", "sizes": {"R": 16, "C": 256}, "config": {}}
    trail: list[dict] = []
    shown: list[tuple] = []
    job = tune_jobs.start(LOCAL_CLIENT, state, 4)
    best = _tune(state, 4, trail, shown.append, LOCAL_CLIENT, job)
    # the spread's first half is verified; with no time there is no best to search around
    assert best is None and len(trail) == 2
    assert all(t["untimed"] and not t["ok"] for t in trail)
    assert len({t["config"]["num_warps"] for t in trail}) == 2
    summary = tune_summary(trail, 4, best)
    assert NEEDS_GPU in summary and "2 of 2 configs verified" in summary
    assert "No verified config" not in summary
    line = progress_line(trail, 2, 4)
    assert NEEDS_GPU in line and "GFLOP/s" not in line
    assert NEEDS_GPU in shown[-1][2]  # the live status line the page showed
    figure = tune_figure(trail)
    assert not figure.data  # no point at 0 GFLOP/s: a chart that says why it is empty
    assert NEEDS_GPU in figure.layout.annotations[0].text
