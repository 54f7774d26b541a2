"""Background runs of the Training page: a child process per run, in a private folder.

A run lives in its own folder (config, status, the child's log and whatever the child writes:
live events, the result). The child is started from a server thread that holds the client's
job slot for as long as the run lasts, so these runs queue with the IDE's other jobs; the page
polls the run's status with its id (entry point `start_child`).

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import threading
from pathlib import Path

RUN_ID = re.compile(r"^[0-9a-f]{16}$")


def runs_dir(kind: str) -> Path:
    """The private folder that holds one kind of run."""
    from uol_core.runtime.usercache import private_dir

    return private_dir(kind)


def run_folder(kind: str, run_id: str) -> Path:
    """The folder of a run id (ids are checked: a page cannot name another path)."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(f"not a training run id: {run_id!r}")
    return runs_dir(kind) / run_id


def write_status(folder: Path, state: str, error: str = "") -> None:
    tmp = folder / "status.json.tmp"
    tmp.write_text(json.dumps({"state": state, "error": error}))
    tmp.replace(folder / "status.json")


def read_status(folder: Path) -> dict:
    return json.loads((folder / "status.json").read_text())


def last_error(log: Path, code: int) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    said = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return f"the run failed (status {code}): {said}"


def start_child(kind: str, config: dict, client: str, what: str, code: str,
                args: list[str], timeout_s: float) -> str:
    """Write `config` to a new run folder and run `python -c code folder *args` there in the
    background (done when it exits 0 having written result.json); returns the run's id."""
    from app.services.job_queue import job_slot
    from app.services.system import activity

    run_id = secrets.token_hex(8)
    folder = run_folder(kind, run_id)
    folder.mkdir(mode=0o700)
    (folder / "config.json").write_text(json.dumps(config))
    write_status(folder, "queued")

    def work() -> None:
        try:
            with job_slot(client, what), activity(what):
                write_status(folder, "running")
                with open(folder / "child.log", "w") as log:
                    proc = subprocess.Popen([sys.executable, "-c", code, str(folder), *args],
                                            stdout=log, stderr=subprocess.STDOUT)
                    try:
                        status = proc.wait(timeout=timeout_s)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        status = None
            if status is None:
                write_status(folder, "failed", f"the run passed its limit of {timeout_s:g} s "
                                               "and was stopped: ask for fewer steps")
            elif status == 0 and (folder / "result.json").exists():
                write_status(folder, "done")
            else:
                write_status(folder, "failed", last_error(folder / "child.log", status))
        except Exception as exc:  # a refused job (queue full) is said in the page
            write_status(folder, "failed", str(exc))

    threading.Thread(target=work, name=f"{kind}-{run_id}", daemon=True).start()
    return run_id
