"""Training page service: start a real pipeline run in a child process, read its live event stream.

A run lives in its own private folder (config, per-rank event files, result, status). The child
is started from a server thread that holds the client's job slot for as long as the run lasts,
so training runs queue with the IDE's other jobs; the page polls `snapshot` with the run's id.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import threading
from pathlib import Path

RUN_TIMEOUT_S = 300.0
MAX_STAGES = 4
MAX_STEPS = 40
RUN_ID = re.compile(r"^[0-9a-f]{16}$")

_CHILD = """
import json, sys
from pathlib import Path
from hcf_sim.pipeline_model import PipeConfig
from hcf_sim.real_pipeline import run_pipeline
folder = Path(sys.argv[1])
cfg = PipeConfig.from_dict(json.loads((folder / "config.json").read_text()))
report = run_pipeline(cfg, folder / "events", float(sys.argv[2]))
(folder / "result.json").write_text(json.dumps(report))
"""


def _runs_dir() -> Path:
    from uol_core.runtime.usercache import private_dir

    return private_dir("training-runs")


def run_folder(run_id: str) -> Path:
    """The folder of a run id (ids are checked: a page cannot name another path)."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(f"not a training run id: {run_id!r}")
    return _runs_dir() / run_id


def make_config(stages: int, microbatches: int, schedule: str, steps: int, straggler: bool):
    """The page's knobs as a checked PipeConfig (a straggler: the last rank 2x slow, rebalanced mid-run)."""
    from hcf_sim.pipeline_model import PipeConfig

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
    from app.services.job_queue import job_slot
    from app.services.system import activity

    run_id = secrets.token_hex(8)
    folder = run_folder(run_id)
    folder.mkdir(mode=0o700)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    write_status(folder, "queued")

    def work() -> None:
        try:
            with job_slot(client, "training run"), activity(f"training {cfg.schedule} x{cfg.stages}"):
                write_status(folder, "running")
                with open(folder / "child.log", "w") as log:
                    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(folder), str(RUN_TIMEOUT_S)],
                                            stdout=log, stderr=subprocess.STDOUT)
                    try:
                        code = proc.wait(timeout=RUN_TIMEOUT_S + 30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        code = proc.wait()
            if code == 0 and (folder / "result.json").exists():
                write_status(folder, "done")
            else:
                write_status(folder, "failed", last_error(folder / "child.log", code))
        except Exception as exc:  # a refused job (queue full) is said in the page
            write_status(folder, "failed", str(exc))

    threading.Thread(target=work, name=f"training-{run_id}", daemon=True).start()
    return run_id


def write_status(folder: Path, state: str, error: str = "") -> None:
    tmp = folder / "status.json.tmp"
    tmp.write_text(json.dumps({"state": state, "error": error}))
    tmp.replace(folder / "status.json")


def last_error(log: Path, code: int) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    said = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return f"the run failed (status {code}): {said}"


def snapshot(run_id: str) -> dict:
    """State, config and what to draw now: the live view while running, the report once done."""
    from hcf_sim.pipeline_model import PipeConfig
    from hcf_sim.rank_events import read_events
    from hcf_sim.real_pipeline import live_snapshot

    folder = run_folder(run_id)
    status = json.loads((folder / "status.json").read_text())
    cfg = PipeConfig.from_dict(json.loads((folder / "config.json").read_text()))
    out = {"state": status["state"], "error": status["error"], "config": cfg.to_dict()}
    if status["state"] == "done":
        out["report"] = json.loads((folder / "result.json").read_text())
    elif (folder / "events").exists():
        out["live"] = live_snapshot(cfg, read_events(folder / "events"))
    return out
