"""Tuning across workers: `uol tune --targets a,b` measures each target on its own workers,
side by side, and gathers. Within a target the model's top configs are spread over every live
worker of it (one measurement at a time per worker), and each answer is written to the
coordinator's tuning database as it arrives, with the worker's host facts in its row."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from queue import Empty, SimpleQueue

from uol_remote.client import Coordinator, RemoteError, RemoteWorker


def tune_target(broker_url: str, secret, op, sizes: dict, target: str, budget: int,
                db_path: str | None = None, parallel: int | None = None,
                progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Measure the model's top `budget` configs of `op` on `target`'s workers; the summary
    (best config, GFLOP/s, trials with the worker each ran on, wall time)."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.acg.session import open_session
    from uol_core.runtime.tuningdb import TuningDB

    start = time.perf_counter()
    coordinator = Coordinator(broker_url, secret)
    workers = coordinator.workers_for(target)
    if not workers:
        raise RemoteError(f"no live worker serves target {target!r}: start one with "
                          f"`uol worker --target {target} --broker {broker_url}`")
    width = max(1, parallel or len(workers))
    first = open_session(op, sizes, target, db=TuningDB(db_path) if db_path else None)
    todo: SimpleQueue = SimpleQueue()
    for cfg, _ in first.ranked()[:budget]:
        todo.put(cfg)
    first.close()
    trials: list[dict] = []
    lock = threading.Lock()

    def measure_some() -> None:
        # a session per thread: each has its own database connection and its own Coordinator
        session = open_session(op, sizes, target, db=TuningDB(db_path) if db_path else None,
                               worker=RemoteWorker(Coordinator(broker_url, secret), target))
        try:
            while True:
                try:
                    cfg = todo.get_nowait()
                except Empty:
                    return
                try:
                    trial = session.measure(cfg)  # recorded in the database before it returns
                    row = {"config": cfg.key(), "gflops": trial.gflops,
                           "status": trial.result.get("status"),
                           "reason": trial.result.get("reason", ""), "from_db": trial.from_db,
                           "worker": (trial.result.get("remote") or {}).get("node")}
                except RemoteError as exc:  # did not run: reported, not recorded
                    row = {"config": cfg.key(), "gflops": 0.0, "status": "not run",
                           "reason": str(exc), "from_db": False, "worker": None}
                with lock:
                    trials.append(row)
                    if progress:
                        progress(target, len(trials), budget)
        finally:
            session.close()

    threads = [threading.Thread(target=measure_some, name=f"tune-{target}-{i}")
               for i in range(width)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    verified = [t for t in trials if t["status"] == "ok" and t["gflops"]]
    best = max(verified, key=lambda t: t["gflops"]) if verified else None
    return {"target": target, "workers": [w["node"] for w in workers], "parallel": width,
            "measured": len(trials), "verified": len(verified),
            "best": best["config"] if best else None,
            "best_gflops": best["gflops"] if best else 0.0, "trials": trials,
            "wall_s": time.perf_counter() - start}


def tune_targets(broker_url: str, secret, op, sizes: dict, targets: list[str], budget: int,
                 db_path: str | None = None,
                 progress: Callable[[str, int, int], None] | None = None) -> list[dict]:
    """`tune_target` on every target at once (each on its own workers); a target that cannot
    be tuned gives {"target", "error"} and the others go on."""
    results: dict[str, dict] = {}

    def one(target: str) -> None:
        try:
            results[target] = tune_target(broker_url, secret, op, sizes, target, budget,
                                          db_path, progress=progress)
        except Exception as exc:  # reported beside the other targets' results
            results[target] = {"target": target, "error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=one, args=(t,), name=f"tune-{t}") for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[t] for t in targets]
