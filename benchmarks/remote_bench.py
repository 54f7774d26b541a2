"""Remote workers on loopback: the overhead a remote Run adds over the same run locally, and a
40-config tune on two workers of a target against one. Writes JSON.

    python benchmarks/remote_bench.py --out docs/benchmarks/remote.json

Each worker is kept to a core of its own (`--no-pin`: both share every core), as two
one-core machines would be; the coordinator and whatever else runs here share them still, so
the figures also carry the load average before and after, and the tune ratio here is an upper
bound of what two machines give.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _median_wall(fn, repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="softmax")
    parser.add_argument("--configs", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="remote_bench.json")
    parser.add_argument("--no-pin", action="store_true",
                        help="let both workers use every core (default: one core each)")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    pins = [None, None] if args.no_pin or len(cores) < 2 else [{cores[0]}, {cores[1]}]

    from uol_core.ops import load_op, op_text
    from uol_core.runtime.worker import Worker
    from uol_remote.client import Coordinator, RemoteWorker
    from uol_remote.jobs import kernel_job
    from uol_remote.local_cluster import (
        LocalBroker,
        start_worker,
        stop_process,
        wait_for_workers,
        write_secret,
    )
    from uol_remote.sweep import tune_target

    folder = Path(tempfile.mkdtemp(prefix="uol-remote-bench-"))
    broker = LocalBroker(folder / "redis").start()
    secret = write_secret(folder / "remote.secret")
    procs = [start_worker("host", broker.url, secret, folder / "w0.log", cpus=pins[0])]
    coordinator = Coordinator(broker.url, secret)
    op = load_op(args.op)
    sizes = {d: 256 for d in op.dims}
    out: dict = {"op": args.op, "sizes": sizes, "machine": platform.processor() or
                 platform.machine(), "cores": len(cores),
                 "worker_cores": [sorted(p) if p else "all" for p in pins],
                 "load_average_before": os.getloadavg()}
    try:
        wait_for_workers(coordinator, {"host": 1}, procs)
        job, _ = kernel_job(op_text(args.op), "host", sizes, min_seconds=0.05)
        remote = RemoteWorker(coordinator, "host")
        with Worker() as local:
            local.run(job)
            remote.run(job)  # both warm: builds cached, references made
            out["local_run_s"] = _median_wall(lambda: local.run(job), args.repeats)
            out["remote_run_s"] = _median_wall(lambda: remote.run(job), args.repeats)
        # what the trip adds to the same job run the same way: round trip minus the worker's
        # own time for it (the local run above is a different process, with other neighbours)
        trips = [remote.run(job) for _ in range(args.repeats)]
        out["remote_overhead_ms"] = 1e3 * statistics.median(
            r["remote"]["round_trip_s"] - r["worker_wall_s"] for r in trips)
        tunes = {}
        for width in (1, 2):
            if width == 2:
                procs.append(start_worker("host", broker.url, secret, folder / "w1.log",
                                          cpus=pins[1]))
                wait_for_workers(coordinator, {"host": 2}, procs)
            res = tune_target(broker.url, secret, op, sizes, "host", args.configs,
                              db_path=str(folder / f"tuning{width}.sqlite"))
            tunes[width] = {"wall_s": res["wall_s"], "measured": res["measured"],
                            "verified": res["verified"], "workers": res["parallel"]}
        out["tune"] = tunes
        out["tune_two_vs_one"] = tunes[2]["wall_s"] / tunes[1]["wall_s"]
    finally:
        for proc in procs:
            stop_process(proc)
        broker.stop()
    out["load_average_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
