"""Issue 52's pipeline goal: how many of N runs of the step check pass on this host.

Each run trains the small 2-stage pipeline for real (`hcf_sim.pipelines.real_pipeline`), predicts its
step with an interval from the host's measured noise and checks the measured step against it. How
often the check passes depends on the host's load while it runs, so the count is a benchmark figure
(quoted with the load average beside it), not a test: the suite checks the interval's structure.

    python benchmarks/pipeline_check.py --runs 5 --out docs/benchmarks/pipeline_check.json
    python benchmarks/pipeline_check.py --runs 5 --rounds 3 --load steady,bursty \
        --out docs/benchmarks/pipeline_check_loaded.json

`--load` makes the noise itself, so a noisy-host figure can be reproduced: `steady` keeps one
busy process per core plus one more running through the checks, `bursty` starts 1-3 busy
processes for 0.05-0.6 s at a time with 0.05-0.8 s pauses between (seeded), the way a test
suite's compiles and workers come and go.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from hcf_sim.pipelines.real_pipeline import run_pipeline
from hcf_sim.pipelines.stage_model import PipeConfig

SMALL = dict(stages=2, microbatches=8, layers=4, d_model=32, seq=8, batch=16, steps=5)


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _bursts(stop: mp.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        procs = [mp.Process(target=_burn, args=(rng.uniform(0.05, 0.6),)) for _ in range(rng.choice((1, 2, 3)))]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        time.sleep(rng.uniform(0.05, 0.8))


@contextmanager
def host_load(kind: str):
    """Background load of `kind` ('none', 'steady', 'bursty') for the duration of the block."""
    stop, procs = mp.Event(), []
    if kind == "steady":
        procs = [mp.Process(target=_burn, args=(3600.0,), daemon=True) for _ in range((os.cpu_count() or 1) + 1)]
    elif kind == "bursty":
        procs = [mp.Process(target=_bursts, args=(stop, 1))]  # not a daemon: it starts the bursts
    elif kind != "none":
        raise SystemExit(f"--load: expected none, steady or bursty, got {kind!r}")
    for p in procs:
        p.start()
    time.sleep(5.0 if procs else 0.0)  # let the load reach the load average before measuring
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            if kind == "steady":
                p.terminate()
            p.join(5.0)


def run_checks(runs: int) -> dict:
    """`runs` checks of the small pipeline, each with its prediction, interval and measured step."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            c = run_pipeline(PipeConfig(**SMALL), Path(tmp) / f"run{i}", timeout_s=90)["check"]
            rows.append({"predicted_ms": round(c["predicted_step_s"] * 1e3, 2),
                         "interval_ms": [round(x * 1e3, 2) for x in c["interval_s"]],
                         "measured_ms": round(c["measured_step_s"] * 1e3, 2),
                         "error": round(c["error"], 3), "passes": c["passes"],
                         "loadavg": c["host_noise"]["loadavg"], "steal_share": c["host_noise"]["steal_share"]})
    return {"config": SMALL, "runs": rows, "passed": sum(r["passes"] for r in rows), "of": runs,
            "loadavg_before": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of --runs checks per load")
    ap.add_argument("--load", default="none", help="comma list of none, steady, bursty")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    loads = [x.strip() for x in args.load.split(",") if x.strip()]
    if loads == ["none"] and args.rounds == 1:
        result = run_checks(args.runs)
    else:
        rounds = []
        for kind in loads:
            with host_load(kind):
                rounds += [{"load": kind, **run_checks(args.runs)} for _ in range(args.rounds)]
        result = {"rounds": rounds, "passed": sum(r["passed"] for r in rounds),
                  "of": sum(r["of"] for r in rounds), "cpus": os.cpu_count()}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
