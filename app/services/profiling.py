"""Profiler service: profile an operator in a worker, keep the reports, roofline and compare history runs."""

from __future__ import annotations

import json
from pathlib import Path

from app.services import history
from app.services.profile_child import MARK
from app.services.runner import run_json_child
from uol_core.runtime.usercache import private_dir

PROFILE_TIMEOUT_S = 240.0


def _root() -> Path:
    """Saved profile reports: a private per-user folder (never a shared temporary directory)."""
    return private_dir("profiles")


def profile_op(op: str, sizes: dict, target: str = "host",
               timeout: float = PROFILE_TIMEOUT_S) -> dict:
    """Compile, verify, time and callgrind one op in the worker; record it as a history run."""
    request = {"op": op, "sizes": sizes, "target": target}
    res = run_json_child(["-m", "app.services.profile_child"], MARK, json.dumps(request), timeout,
                         timed_out="profiling did not finish within {timeout:.0f} s; the worker "
                                   "was stopped (use smaller sizes)")
    if not res.get("ok"):
        return res
    report = res["report"]
    kernel = report["runs"]["kernel"]
    result = {"ok": bool(report["verification"]["ok"]), "op": report["op"]["name"],
              "median_s": kernel["median_s"], "iqr_s": kernel.get("iqr_s"),
              "flops": report["op"]["flops"], "bytes": report["op"]["bytes"],
              "gflops": kernel["gflops"], "config": report["config"],
              "hotspots": report.get("hotspots"), "mode": "measured (profile)"}
    if kernel["median_s"]:
        result["gbs"] = report["op"]["bytes"] / kernel["median_s"] / 1e9
    rid = history.record("profile", {"odl": report["op"]["odl"], "backend": "c",
                                     "target": target, "sizes": report["op"]["sizes"],
                                     "config": report["config"]}, result,
                         report.get("kernel_source", ""))
    (_root() / f"{rid}.json").write_text(json.dumps(report, default=str))
    return {"ok": True, "id": rid, "report": report}


def load_profile(run_id: int | None = None) -> dict | None:
    """A saved profile report by history id, or the newest one; None if there is none."""
    files = sorted(_root().glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if run_id is not None:
        files = [p for p in files if p.stem == str(run_id)]
    return json.loads(files[-1].read_text()) if files else None


def measured_runs(limit: int = 200) -> list[dict]:
    """History runs that carry a time, flops and bytes (roofline and compare candidates)."""
    rows = history.runs(limit=limit)
    return [r for r in rows if r.get("median_s") and r["result"].get("flops")]


def run_of(row: dict):
    """A history row as a profilers Run (for compare)."""
    from profilers.runs import Run

    res = row["result"]
    return Run(f"#{row['id']} {row['op']} {row['backend']}", row["op"], row["target"],
               row["backend"], row["config"], row["sizes"], row["median_s"], res.get("iqr_s"),
               res.get("flops"), res.get("bytes"), "ok" if row["ok"] else "failed",
               res.get("hotspots"))


def roofline_figure(rows: list[dict]):
    """Every measured run on its target's roofline (one curve per target seen)."""
    from profilers.figures.charts import roofline_chart
    from profilers.roofline_points import point, roof_curve

    targets = list(dict.fromkeys(r["target"] for r in rows)) or ["host"]
    curves, points = [], []
    for t in targets:
        try:
            curves.append(roof_curve(t))
        except Exception:  # a target without roofs is left out of the chart, not fatal
            continue
    known = {c.target for c in curves}
    for r in rows:
        if r["target"] in known:
            points.append(point(f"#{r['id']} {r['op']}", r["result"]["flops"],
                                r["result"]["bytes"], r["median_s"], r["target"]))
    return roofline_chart(curves, points, f"Roofline of all runs ({len(points)})")
