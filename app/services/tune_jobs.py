"""A Studio Tune as a job with an id: its progress, trail and result kept on disk as it runs.

The tune itself runs as a Dash background callback (in a process of the disk-cache manager, or
in the job worker through the broker); each measurement also lands in this job's record, so a
page that was reloaded (and lost Dash's own handle on the callback) finds the job again by the
id it kept in the browser's local storage, shows its progress, and its result once it ends,
with the best config that "Apply best" loads.

Records are JSON files in a private per-user folder, readable only by the browser that started
the job (its client id, hashed). A job whose process is gone without a result (cancelled, or
killed) reads as ended; a stop requested from a reattached page is seen at the next measurement.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

RUNNING, DONE, ENDED = "running", "done", "ended"
KEEP_S = 24 * 3600.0  # records older than this are removed when a new tune starts
_ID = re.compile(r"^[0-9a-f]{32}$")


def _folder() -> Path:
    from uol_core.runtime.usercache import private_dir

    return private_dir("tune-jobs")


def _path(job_id: str) -> Path:
    if not isinstance(job_id, str) or not _ID.match(job_id):
        raise ValueError(f"not a tune job id: {str(job_id)[:40]!r}")
    return _folder() / f"{job_id}.json"


def _owner(client: str) -> str:
    return hashlib.sha256(client.encode()).hexdigest()


def _write(job_id: str, record: dict) -> None:
    path = _path(job_id)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # a reader sees the old record or the new one, never half of one


def _load(job_id: str) -> dict | None:
    try:
        return json.loads(_path(job_id).read_text())
    except (OSError, ValueError):
        return None


def _sweep() -> None:
    cutoff = time.time() - KEEP_S
    for old in _folder().glob("*.json"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:  # removed by another process meanwhile
            pass


def start(client: str, inputs: dict, budget: int) -> str:
    """A new running job of `client` tuning `inputs` (op, backend, target, sizes) within
    `budget` measurements; its id."""
    _sweep()
    job_id = uuid.uuid4().hex
    _write(job_id, {"id": job_id, "owner": _owner(client), "state": RUNNING,
                    "inputs": {k: inputs.get(k) for k in ("op", "backend", "target", "sizes")},
                    "budget": budget, "done": 0, "trail": [], "status": "starting",
                    "tuned": None, "stop": False, "pid": os.getpid(),
                    "host": socket.gethostname(), "started": time.time()})
    return job_id


def progress(job_id: str, done: int, status: str, trail: list[dict]) -> None:
    """Record `done` measurements so far, the status line and the trail."""
    record = _load(job_id)
    if record is None:
        return
    _write(job_id, {**record, "done": done, "status": status, "trail": trail})


def finish(job_id: str, status: str, trail: list[dict], tuned: dict | None) -> None:
    """The job ended: its summary line, trail and the best config found (None: none)."""
    record = _load(job_id)
    if record is None:
        return
    _write(job_id, {**record, "state": DONE, "status": status, "trail": trail,
                    "tuned": tuned, "done": len(trail)})


def request_stop(job_id: str, client: str) -> bool:
    """Ask the running job to stop before its next measurement; False when it is not one of
    `client`'s running jobs."""
    record = read(job_id, client)
    if record is None or record["state"] != RUNNING:
        return False
    _write(job_id, {**_load(job_id), "stop": True})
    return True


def stop_requested(job_id: str) -> bool:
    """True when a page asked this job to stop."""
    record = _load(job_id)
    return bool(record and record.get("stop"))


def _alive(record: dict) -> bool:
    """Whether the job's process still runs (a process on another host is taken as running)."""
    import psutil

    if record.get("host") != socket.gethostname():
        return True
    try:
        # a killed job process not yet reaped by its parent lingers as a zombie
        return psutil.Process(int(record["pid"])).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, KeyError, ValueError, TypeError):
        return True


def read(job_id: Any, client: str) -> dict | None:
    """`client`'s job `job_id` as it stands (None when there is no such job of this client);
    a running job whose process is gone reads as ENDED, saying why."""
    try:
        record = _load(job_id)
    except ValueError:
        return None
    if record is None or record.get("owner") != _owner(client):
        return None
    if record["state"] == RUNNING and not _alive(record):
        why = "stopped at the user's request" if record.get("stop") else \
            "cancelled, or its process ended"
        record = {**record, "state": ENDED,
                  "status": f"■ the tune ended without a result ({why}) after "
                            f"{record.get('done', 0)} measured"}
    return record
