"""Remote targets in the IDE (`uol serve --broker redis://...`): which targets have a live
worker, and the worker a Run, Tune or Profile on such a target goes to.

Without a broker every function here says "in-process" and nothing changes. With one, a job
on a target that has a live worker is signed and sent to it (uol_remote); every other target
runs here as before. The status bar and the run's mode say where a job ran.
"""

from __future__ import annotations

import os
import time

_CACHE: dict = {"at": 0.0, "workers": []}
FRESH_S = 1.0  # the status bar polls every 2 s; a second-old list of workers is fresh enough
_COORDINATORS: dict[int, object] = {}  # pid -> Coordinator (background jobs run in forks)


def broker() -> str | None:
    """The broker URL `uol serve --broker` set, or None (everything in-process)."""
    from uol_remote.celery_app import broker_from_env

    return broker_from_env()


def coordinator():
    """This process's Coordinator on the broker, or None without one."""
    url = broker()
    if url is None:
        return None
    pid = os.getpid()
    if pid not in _COORDINATORS:
        from uol_remote.client import Coordinator

        _COORDINATORS[pid] = Coordinator(url)
    return _COORDINATORS[pid]


def live_workers() -> list[dict]:
    """Workers with a fresh heartbeat ([] without a broker, or while it is unreachable)."""
    coord = coordinator()
    if coord is None:
        return []
    if time.monotonic() - _CACHE["at"] > FRESH_S:
        try:
            _CACHE["workers"] = coord.live_workers()
        except Exception:  # the broker restarts: show no workers until it answers again
            _CACHE["workers"] = []
        _CACHE["at"] = time.monotonic()
    return _CACHE["workers"]


def workers_for(target: str) -> list[dict]:
    return [w for w in live_workers() if w["target"] == target]


def worker_for(target: str):
    """A RemoteWorker for `target` when a live worker serves it, else None (run here)."""
    if not workers_for(target):
        return None
    from uol_remote.client import RemoteWorker

    return RemoteWorker(coordinator(), target)


def ran_on(result: dict) -> str:
    """'worker NODE (CPU, host H)' for a remote result, '' for a local one."""
    worker = result.get("worker") or {}
    if not worker:
        return ""
    return f"worker {worker.get('node')} ({worker.get('cpu')}, host {worker.get('host')})"


def submit(kind: str, target: str, job: dict, timeout: float) -> dict:
    """A `request` or `profile` job on a live worker of `target` (see Coordinator.submit)."""
    return coordinator().submit(kind, target, job, timeout=timeout)


def target_options(names: list[str]) -> list[dict]:
    """Dropdown options: every HFL target, those with live workers marked and listed first."""
    live = {w["target"] for w in live_workers()}
    marked = [{"label": f"{n} · live worker", "value": n} for n in names if n in live]
    return marked + [{"label": n, "value": n} for n in names if n not in live]


def where(target: str) -> str:
    """Status-bar text: the target and where its jobs run now."""
    target = target or "host"
    if broker() is None:
        return f"target: {target} (runs here)"
    workers = workers_for(target)
    if not workers:
        return f"target: {target} (runs here; no live worker)"
    hosts = ", ".join(sorted({w["facts"]["host"] for w in workers}))
    return f"target: {target} → {len(workers)} live worker(s) on {hosts}"
