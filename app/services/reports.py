"""Export a Studio run, or a comparison of two runs, as HTML, PDF, Markdown or JSON.

The report data follows profilers' report format, so the same renderer (and the same
figures) produce the IDE export and the CLI's `uol report` files.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

FORMATS = {"html": "text/html", "pdf": "application/pdf", "md": "text/markdown",
           "json": "application/json"}


def _run_obj(row: dict):
    from app.services.history import sizes_text
    from profilers.runs import Run

    res = row["result"]
    return Run(label=f"#{row['id']} {row['op']} {sizes_text(row['sizes'])} ({row['backend']})",
               op=row["op"], target=row["target"], backend=row["backend"], config=row["config"],
               sizes=row["sizes"], median_s=row["median_s"], iqr_s=res.get("iqr_s"),
               flops=res.get("flops"), bytes=res.get("bytes"),
               status="ok" if row["ok"] else "failed", mode=row.get("mode", "timed"),
               machine=row.get("machine", ""), samples=res.get("samples"))


def _measurement(r: dict) -> dict:
    """One run's row of the Measurements table: its time with n, the 95% CI and the noisy flag
    with the thresholds and values that decided it."""
    from app.services.history import TIMED, timing

    t = timing(r)
    ci = (f"{t['ci_low_s'] * 1e3:.4g}-{t['ci_high_s'] * 1e3:.4g} ms" if t.get("ci_low_s")
          else "no samples stored" if t else "")
    noisy = "" if "noisy" not in t else \
        (f"yes: {t['noise_reason']}" if t["noisy"] else f"no ({t['noise_reason']})")
    return {"label": f"run #{r['id']}" + (" (pinned baseline)" if r.get("pinned") else ""),
            "op": r["op"], "sizes": r["sizes"], "target": r["target"], "backend": r["backend"],
            "mode": r.get("mode", TIMED), "median_s": r["median_s"], "ci_95": ci,
            "iqr_s": r["result"].get("iqr_s"),
            "repeats": t.get("n") or r["result"].get("repeats") or r["result"].get("reps"),
            "noisy": noisy, "gflops": r["gflops"], "gbps": r["gbs"]}


def _cost(row: dict):
    """The run's own cost: its ODL at its own sizes (two runs of a comparison may differ)."""
    import uol_core

    return uol_core.op_cost(uol_core.parse(row["odl"]), row["sizes"])


def run_report(row: dict, other: dict | None = None) -> dict:
    """Report data for one run, or for `other` (baseline) against `row` when given; the
    comparison's verdict carries its 95% CI or says the difference is not significant."""
    import uol_core
    from app.services.history import TIMED, peak_of
    from profilers.compare import compare
    from profilers.report import _header, roof_point
    from profilers.roofline_points import roof_curve
    from uol_core.odl.patterns import classify

    title = f"Run #{row['id']}: {row['op']}" if other is None else \
        f"Comparison: run #{other['id']} → #{row['id']} ({row['op']})"
    report = _header("operator", title)
    res = row["result"]
    op = uol_core.parse(row["odl"])
    cost = _cost(row)
    report["op"] = {"name": op.name, "odl": row["odl"], "pattern": classify(op).kind,
                    "sizes": row["sizes"], "flops": cost.flops, "bytes": cost.bytes,
                    "intensity": cost.intensity}
    report["target"] = {"name": row["target"], "backend": row["backend"],
                        "machine": row.get("machine", "")}
    report["config"] = dict(row["config"])
    report["verification"] = {"ok": row["ok"], "max_error": str(res.get("max_error", "")),
                              "error": res.get("error", "")}
    both = ([other] if other else []) + [row]
    report["measurements"] = [_measurement(r) for r in both]
    if row.get("kernel"):
        report["kernel_source"] = row["kernel"]
    points = []
    for r in both:
        if r.get("mode", TIMED) != TIMED:  # a profiled or interpreted time is not a timed point
            report["notes"].append(f"run #{r['id']} is {r.get('mode')}: not on the roofline "
                                   "(only timed runs are)")
            continue
        try:
            own = _cost(r)
            placed = roof_point(f"run #{r['id']}", own.flops, own.bytes, r["median_s"],
                                r["target"], report["notes"], peak_of(r))
        except Exception as exc:  # a target without roofs: the report says so
            report["notes"].append(f"no roofline point for run #{r['id']}: {exc}")
            continue
        if placed is not None:
            points.append(placed.to_dict())
    try:
        report["roofline"] = {"curves": [roof_curve(row["target"], peak_of(row)).to_dict()],
                              "points": points}
    except Exception as exc:
        report["notes"].append(f"no roofline: {exc}")
    if other is not None:
        report["comparison"] = compare(_run_obj(other), _run_obj(row)).to_dict()
    return report


def export(row: dict, fmt: str, other: dict | None = None) -> tuple[bytes, str]:
    """(file bytes, file name) of the report in `fmt` (html, pdf, md, json)."""
    from profilers import report_render

    if fmt not in FORMATS:
        raise ValueError(f"unknown format '{fmt}': use {', '.join(FORMATS)}")
    report = run_report(row, other)
    stem = f"uol_run_{row['id']}" if other is None else f"uol_compare_{other['id']}_{row['id']}"
    name = f"{stem}.{fmt}"
    with tempfile.TemporaryDirectory(prefix="uol-export-") as tmp:
        path = report_render.write(report, Path(tmp) / name, fmt)
        return path.read_bytes(), name
