"""Training page, second panel: train a model on UOL's kernels beside torch eager, live.

The run is `uol train-demo`'s (uol_cli.training_demo.run_demo: the digits MLP and its twin with
UOL's layers and UOL's SGD, or torch's) or a nanoGPT block's (uol_cli.training_nanogpt: UOL's
norms, linears, causal flash attention and AdamW), from the same weights on the same batches,
in lockstep. It runs in a child process started from a server thread that holds the client's job
slot, as the pipeline runs do (app/services/training.py); the child rewrites `live.json` every
few steps (losses and step times so far) and writes `result.json` at the end. The page polls
`snapshot` with the run's id.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
from pathlib import Path

from app.services.training import RUN_ID

RUN_TIMEOUT_S = 300.0
MIN_STEPS, MAX_STEPS = 10, 400
OPTIMIZER_CHOICES = (("UOL's (one generated kernel)", "uol"), ("torch's", "torch"))
# (label, value): the digits MLP steps with SGD and momentum, the nanoGPT block with AdamW
MODEL_CHOICES = (("digits MLP (SGD)", "mlp"), ("nanoGPT block (AdamW)", "nanogpt"))
LOSS_NAMES = {"mlp": "cross-entropy", "nanogpt": "MSE"}
LIVE_EVERY = 5  # steps between rewrites of live.json

_CHILD = """
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])
cfg, every = json.loads((folder / "config.json").read_text()), int(sys.argv[2])

def observe(step, losses, step_ms):
    if step % every and step + 1 != cfg["steps"]:
        return
    tmp = folder / "live.json.tmp"
    tmp.write_text(json.dumps({"steps_done": step + 1, "losses": losses, "step_ms": step_ms}))
    tmp.replace(folder / "live.json")

if cfg["model"] == "nanogpt":
    from uol_cli.training_nanogpt import run_nanogpt as run
else:
    from uol_cli.training_demo import run_demo as run
result = run(cfg["steps"], cfg["backend"], optimizer=cfg["optimizer"], observe=observe)
(folder / "result.json").write_text(json.dumps(result))
"""


def _runs_dir() -> Path:
    from uol_core.runtime.usercache import private_dir

    return private_dir("kernel-training-runs")


def run_folder(run_id: str) -> Path:
    """The folder of a run id (ids are checked: a page cannot name another path)."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(f"not a training run id: {run_id!r}")
    return _runs_dir() / run_id


def backend_choices() -> tuple[str, ...]:
    """"auto" and every backend that generates kernels (Triton runs interpreted without a GPU)."""
    from uol_core.backends import AUTO, kernel_backend_names

    return (AUTO, *kernel_backend_names())


def make_config(steps, backend: str, optimizer: str, model: str = "mlp") -> dict:
    """The panel's knobs, checked: each error names the knob and its limits."""
    try:
        steps = int(steps)
    except (TypeError, ValueError):
        raise ValueError(f"Steps: a whole number from {MIN_STEPS} to {MAX_STEPS}, got {steps!r}") \
            from None
    if not MIN_STEPS <= steps <= MAX_STEPS:
        raise ValueError(f"Steps: use {MIN_STEPS}-{MAX_STEPS}, got {steps}")
    if backend not in backend_choices():
        raise ValueError(f"Backend: one of {', '.join(backend_choices())}, got {backend!r}")
    if optimizer not in {value for _, value in OPTIMIZER_CHOICES}:
        raise ValueError(f"Optimizer: uol or torch, got {optimizer!r}")
    if model not in {value for _, value in MODEL_CHOICES}:
        raise ValueError(f"Model: mlp or nanogpt, got {model!r}")
    return {"steps": steps, "backend": backend, "optimizer": optimizer, "model": model}


def start(cfg: dict, client: str) -> str:
    """Start the run in the background; returns its id at once."""
    from app.services.job_queue import job_slot
    from app.services.system import activity
    from app.services.training import last_error, write_status

    run_id = secrets.token_hex(8)
    folder = run_folder(run_id)
    folder.mkdir(mode=0o700)
    (folder / "config.json").write_text(json.dumps(cfg))
    write_status(folder, "queued")

    def work() -> None:
        try:
            with job_slot(client, "training on UOL kernels"), \
                    activity(f"training on UOL kernels ({cfg['backend']})"):
                write_status(folder, "running")
                with open(folder / "child.log", "w") as log:
                    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(folder),
                                             str(LIVE_EVERY)],
                                            stdout=log, stderr=subprocess.STDOUT)
                    try:
                        code = proc.wait(timeout=RUN_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        code = proc.wait()
            if code == 0 and (folder / "result.json").exists():
                write_status(folder, "done")
            else:
                write_status(folder, "failed", last_error(folder / "child.log", code))
        except Exception as exc:  # a refused job (queue full) is said in the page
            write_status(folder, "failed", str(exc))

    threading.Thread(target=work, name=f"kernel-training-{run_id}", daemon=True).start()
    return run_id


def snapshot(run_id: str) -> dict:
    """State, config, and the curves so far (`live`) or the finished run (`result`)."""
    folder = run_folder(run_id)
    status = json.loads((folder / "status.json").read_text())
    out = {"state": status["state"], "error": status["error"],
           "config": json.loads((folder / "config.json").read_text())}
    if status["state"] == "done":
        out["result"] = json.loads((folder / "result.json").read_text())
    elif (folder / "live.json").exists():
        out["live"] = json.loads((folder / "live.json").read_text())
    return out
