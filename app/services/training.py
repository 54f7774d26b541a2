"""Training page service: start a real pipeline run in a child process, read its live event stream.

A run is a child process in a private folder (app/services/child_runs.py: config, per-rank
event files, result, status), holding the client's job slot; the page polls `snapshot` with
the run's id.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json

from app.services import child_runs

RUN_TIMEOUT_S = 300.0
MAX_STAGES = 4
MAX_STEPS = 40
KIND = "training-runs"

_CHILD = """
import json, sys
from pathlib import Path
from hcf_sim.pipelines.stage_model import PipeConfig
from hcf_sim.pipelines.real_pipeline import run_pipeline
folder = Path(sys.argv[1])
cfg = PipeConfig.from_dict(json.loads((folder / "config.json").read_text()))
report = run_pipeline(cfg, folder / "events", float(sys.argv[2]))
(folder / "result.json").write_text(json.dumps(report))
"""


def run_folder(run_id: str):
    """The folder of a run id (checked: a page cannot name another path)."""
    return child_runs.run_folder(KIND, run_id)


def make_config(stages: int, microbatches: int, schedule: str, steps: int, straggler: bool):
    """The page's knobs as a checked PipeConfig (a straggler: the last rank 2x slow, rebalanced mid-run)."""
    from hcf_sim.pipelines.stage_model import PipeConfig

    if not 2 <= int(stages) <= MAX_STAGES:
        raise ValueError(f"Stages: use 2-{MAX_STAGES} on this machine, got {stages}")
    if not 4 <= int(steps) <= MAX_STEPS:
        raise ValueError(f"Steps: use 4-{MAX_STEPS}, got {steps}")
    mb = int(microbatches)
    cfg = PipeConfig(stages=int(stages), microbatches=mb, schedule=schedule, steps=int(steps),
                     batch=4 * mb, layers=max(8, 2 * int(stages) * (2 if schedule == "interleaved" else 1)))
    if straggler:  # 12 blocks leave the rebalance room to move whole blocks off the slow stage
        cfg.layers = max(cfg.layers, 12)
        cfg.slow_rank, cfg.slow_factor, cfg.rebalance_at = int(stages) - 1, 2, int(steps) // 2
    cfg.check()
    return cfg


def start(cfg, client: str) -> str:
    """Start the run in the background; returns its id at once."""
    return child_runs.start_child(KIND, cfg.to_dict(), client,
                                  f"training run ({cfg.schedule} x{cfg.stages})", _CHILD,
                                  [str(RUN_TIMEOUT_S)], RUN_TIMEOUT_S + 30)


def snapshot(run_id: str) -> dict:
    """State, config and what to draw now: the live view while running, the report once done."""
    from hcf_sim.pipelines.rank_events import read_events
    from hcf_sim.pipelines.real_pipeline import live_snapshot
    from hcf_sim.pipelines.stage_model import PipeConfig

    folder = run_folder(run_id)
    status = child_runs.read_status(folder)
    cfg = PipeConfig.from_dict(json.loads((folder / "config.json").read_text()))
    out = {"state": status["state"], "error": status["error"], "config": cfg.to_dict()}
    if status["state"] == "done":
        out["report"] = json.loads((folder / "result.json").read_text())
    elif (folder / "events").exists():
        out["live"] = live_snapshot(cfg, read_events(folder / "events"))
    return out
