"""Profiler service: profile an operator in a worker, keep the reports, roofline and compare history runs.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

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
    """Compile, verify, time and profile one op (a library name or the user's ODL text) in the
    worker; record it as a history run of mode "profiled" (its line costs come from callgrind or
    the cycle-counter build, which is not a timed run)."""
    from uol_core.hfl import HflError, target_name

    try:
        target_name(target)  # a client's value: a listed target, before any process starts
    except HflError as exc:
        return {"ok": False, "error": str(exc)}
    request = {"op": op, "sizes": sizes, "target": target}
    res = _remote_profile(request, timeout)
    if res is None:  # no live worker of the target (or no broker): profile here
        res = run_json_child(["-m", "app.services.profile_child"], MARK, json.dumps(request),
                             timeout, timed_out="profiling did not finish within {timeout:.0f} "
                                                "s; the worker was stopped (use smaller sizes)")
    if not res.get("ok"):
        return res
    report = res["report"]
    kernel = report["runs"]["kernel"]
    hot = report.get("hotspots") or {}
    result = {"ok": bool(report["verification"]["ok"]), "op": report["op"]["name"],
              "sizes": report["op"]["sizes"], "median_s": kernel["median_s"],
              "iqr_s": kernel.get("iqr_s"), "flops": report["op"]["flops"],
              "bytes": report["op"]["bytes"], "gflops": kernel["gflops"],
              "config": report["config"], "hotspots": report.get("hotspots"),
              "hotspot_source": (hot.get("meta") or {}).get("source"),
              "mode": "measured (profile)"}
    if kernel["median_s"]:
        result["gbs"] = report["op"]["bytes"] / kernel["median_s"] / 1e9
    rid = history.record("profile", {"odl": report["op"]["odl"], "backend": "c",
                                     "target": target, "sizes": report["op"]["sizes"],
                                     "config": report["config"]}, result,
                         report.get("kernel_source", ""))
    (_root() / f"{rid}.json").write_text(json.dumps(report, default=str))
    return {"ok": True, "id": rid, "report": report}


def _remote_profile(request: dict, timeout: float) -> dict | None:
    """The profile from a live worker of the request's target (`uol serve --broker`), in the
    shape of the local child's answer; None when no worker serves that target."""
    from app.services import remote
    from uol_remote.client import RemoteError

    if not remote.workers_for(request["target"]):
        return None
    try:
        report = remote.submit("profile", request["target"], request, timeout)
    except RemoteError as exc:
        return {"ok": False, "error": str(exc)}
    if "op" not in report:
        return {"ok": False, "error": report.get("error", "the worker sent no report")}
    report.setdefault("notes", []).append(f"profiled on {remote.ran_on(report)}")
    return {"ok": True, "report": report}


def profilable_ops(limit: int = 200) -> list[dict]:
    """Dropdown options: every library op, then the user's own ops from Studio runs (each ODL
    text that is not a library op's, newest first; the value "run:<id>" names the run holding
    it). A library op the user edited is offered as "(edited)"."""
    from uol_core.ops import list_ops, op_text

    library = list_ops()
    options = [{"label": name, "value": name} for name in library]
    seen = {op_text(name).strip() for name in library}
    for row in history.runs(limit=limit):
        text = row["odl"].strip()
        if not text or text in seen or row["kind"] not in ("run", "tune", "graph-node"):
            continue
        seen.add(text)
        whose = "edited" if row["op"] in library else "your op"
        options.append({"label": f"{row['op']} ({whose}, from run #{row['id']})",
                        "value": f"run:{row['id']}"})
    return options


def op_to_profile(choice: str) -> str:
    """What profile_op takes for a dropdown value: a library name, or the ODL of run <id>.
    Anything else (a path, ODL text, another type) is refused: the value comes from a client."""
    from uol_core.ops import library_name

    if isinstance(choice, str) and choice.startswith("run:"):
        run_id = choice[4:]
        if not run_id.isdigit() or len(run_id) > 18:
            raise ValueError(f"not a run of the history: {choice[:40]!r}")
        row = history.get(int(run_id))
        if row is None:
            raise ValueError(f"run {run_id} is no longer in the history")
        return row["odl"]
    return library_name(choice)


def load_profile(run_id: int | None = None) -> dict | None:
    """A saved profile report by history id, or the newest one; None if there is none."""
    files = sorted(_root().glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if run_id is not None:
        files = [p for p in files if p.stem == str(run_id)]
    return json.loads(files[-1].read_text()) if files else None


def measured_runs(limit: int = 200) -> list[dict]:
    """Timed history runs with a time, flops and bytes: the roofline's points. Profiled and
    interpreted runs are left out: their times are no timing."""
    rows = history.runs(limit=limit)
    return [r for r in rows if r.get("mode", history.TIMED) == history.TIMED
            and r.get("median_s") and r["result"].get("flops")]


def comparable_runs(limit: int = 200) -> list[dict]:
    """Compare candidates: timed runs, and profiled runs (compared by their line costs)."""
    rows = history.runs(limit=limit)
    return [r for r in rows if (r.get("median_s") and r["result"].get("flops"))
            or r["result"].get("hotspots")]


def run_of(row: dict):
    """A history row as a profilers Run (for compare), labelled with its sizes and target."""
    from profilers.runs import Run

    res = row["result"]
    label = (f"#{row['id']} {row['op']} {history.sizes_text(row['sizes'])} "
             f"{row['backend']}/{row['target']}")
    return Run(label, row["op"], row["target"], row["backend"], row["config"], row["sizes"],
               row["median_s"], res.get("iqr_s"), res.get("flops"), res.get("bytes"),
               "ok" if row["ok"] else "failed", res.get("hotspots"),
               mode=row.get("mode", history.TIMED), machine=row.get("machine", ""),
               samples=res.get("samples"))


def roofline_figure(rows: list[dict]):
    """Every timed run on its target's roofline (one curve per target seen); a run whose rate
    is above its roof is left out and named in the title."""
    from profilers.figures.charts import roofline_chart
    from profilers.report import roof_point
    from profilers.roofline_points import roof_curve

    rows = [r for r in rows if r.get("mode", history.TIMED) == history.TIMED]
    # a roof per target and peak seen: a bf16 GEMM stands under its target's bf16 roof
    roofs = list(dict.fromkeys((r["target"], history.peak_of(r)) for r in rows)) or \
        [("host", "fp32")]
    curves, points, notes = [], [], []
    for t, peak in roofs:
        try:
            curves.append(roof_curve(t, peak))
        except Exception:  # a target without roofs is left out of the chart, not fatal
            continue
    known = {(c.target, c.dtype) for c in curves}
    for r in rows:
        if (r["target"], history.peak_of(r)) in known:
            placed = roof_point(f"#{r['id']} {r['op']} {history.sizes_text(r['sizes'])}",
                                r["result"]["flops"], r["result"]["bytes"], r["median_s"],
                                r["target"], notes, history.peak_of(r))
            if placed is not None:
                points.append(placed)
    title = (f"Roofline of timed runs ({len(points)})" if points else
             "Roofline: no timed run yet (a profiled run is not a timed point)")
    if notes:
        title += f"; {len(notes)} above the roof left out"
    return roofline_chart(curves, points, title)
