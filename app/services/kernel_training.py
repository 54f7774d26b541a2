"""Training page, second panel: train a model on UOL's kernels beside torch eager, live.

The run is `uol train-demo`'s (uol_cli.training_demo.run_demo: the digits MLP and its twin with
UOL's layers and UOL's SGD, or torch's) or a nanoGPT block's (uol_cli.training_nanogpt: UOL's
norms, linears, causal flash attention and AdamW), from the same weights on the same batches,
in lockstep. It runs as the pipeline runs do, a child process in a private folder holding the
client's job slot (app/services/child_runs.py); the child rewrites `live.json` every few steps
(losses and step times so far) and writes `result.json` at the end. The page polls `snapshot`
with the run's id.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json

from app.services import child_runs

KIND = "kernel-training-runs"
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


def run_folder(run_id: str):
    """The folder of a run id (checked: a page cannot name another path)."""
    return child_runs.run_folder(KIND, run_id)


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
    return child_runs.start_child(KIND, cfg, client,
                                  f"training on UOL kernels ({cfg['model']}, {cfg['backend']})",
                                  _CHILD, [str(LIVE_EVERY)], RUN_TIMEOUT_S)


def snapshot(run_id: str) -> dict:
    """State, config, and the curves so far (`live`) or the finished run (`result`)."""
    folder = run_folder(run_id)
    status = child_runs.read_status(folder)
    out = {"state": status["state"], "error": status["error"],
           "config": json.loads((folder / "config.json").read_text())}
    if status["state"] == "done":
        out["result"] = json.loads((folder / "result.json").read_text())
    elif (folder / "live.json").exists():
        out["live"] = json.loads((folder / "live.json").read_text())
    return out
