"""Remote targets in the IDE (`uol serve --broker redis://...`): which targets have a live
worker, and the worker a Run, Tune, Profile or gloo measurement on such a target goes to.

Without a broker every function here says "in-process" and nothing changes. With one, a job
on a target that has a live worker is signed and sent to it (uol_remote); every other target
runs here as before. The status bar and the run's mode say where a job ran.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import os
import time
from functools import lru_cache

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


def gloo_on_worker(task: dict, ranks: int, target: str, timeout: float) -> dict | None:
    """hcf_sim's gloo benchmark `task` on `ranks` processes of a live worker of `target`, its
    result with the worker's host facts; None when no worker serves `target` (run it here).
    A job that did not run (refused, lost) is an error result, never a measurement."""
    if not workers_for(target):
        return None
    from uol_remote.client import RemoteError

    try:
        return submit("gloo", target, {"task": task, "ranks": ranks}, timeout)
    except RemoteError as exc:
        return {"ok": False, "error": f"the gloo measurement on a worker of {target} did not "
                                      f"run: {exc}"}


def target_options(names: list[str]) -> list[dict]:
    """Dropdown options: every HFL target, those with live workers marked and listed first."""
    live = {w["target"] for w in live_workers()}
    marked = [{"label": f"{n} · live worker", "value": n} for n in names if n in live]
    return marked + [{"label": n, "value": n} for n in names if n not in live]


def where(target: str) -> str:
    """Status-bar text: the target and where its jobs run now (a live worker, or this machine
    natively, under emulation, or not at all)."""
    from app.background import through_broker

    target = target or "host"
    # the IDE's own background jobs (Tune, probe, guide measurements) run in its job worker
    jobs = " · background jobs through the broker" if through_broker() else ""
    workers = workers_for(target) if broker() is not None else []
    if workers:
        hosts = ", ".join(sorted({w["facts"]["host"] for w in workers}))
        return f"target: {target} → {len(workers)} live worker(s) on {hosts}{jobs}"
    no_worker = "; no live worker" if broker() is not None else ""
    return f"target: {target} ({here(target)}{no_worker}){jobs}"


@lru_cache(maxsize=64)
def here(target: str) -> str:
    """How this machine runs `target` without a worker, in the words of the status bar (the
    host's facts and tools do not change while the server runs)."""
    from uol_core.hfl import load_target
    from uol_remote.hostfacts import EMULATED, NATIVE, how_this_machine_runs

    if target == "host":
        return "runs here"
    try:
        mode, why = how_this_machine_runs(load_target(target))
    except Exception as exc:  # an unreadable HFL file: say so rather than guess
        return f"unknown target: {exc}"
    if mode == NATIVE:
        return "runs here"
    if mode == EMULATED:
        return "verified under emulation here; not timed"  # cross-built, run by qemu
    return f"compile and explain only: {why}"
