"""Issue 52's pipeline goal: how many of N runs of the step check pass on this host.

Each run trains the small 2-stage pipeline for real (`hcf_sim.pipelines.real_pipeline`), predicts its
step with an interval from the host's measured noise and checks the measured step against it. How
often the check passes depends on the host's load while it runs, so the count is a benchmark figure
(quoted with the load average beside it), not a test: the suite checks the interval's structure.

    python benchmarks/pipeline_check.py --runs 5 --out docs/benchmarks/pipeline_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from hcf_sim.pipelines.real_pipeline import run_pipeline
from hcf_sim.pipelines.stage_model import PipeConfig

SMALL = dict(stages=2, microbatches=8, layers=4, d_model=32, seq=8, batch=16, steps=5)


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
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result = run_checks(args.runs)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
