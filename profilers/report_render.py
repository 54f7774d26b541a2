"""Render report data: figures, self-contained HTML (plotly inlined), Markdown and JSON."""

from __future__ import annotations

import html
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from profilers.compare import compare
from profilers.figures import (
    comparison_bars,
    flame_icicle,
    hotspot_table,
    roofline_chart,
    timeline_chart,
)
from profilers.flame import FlameNode, render_text
from profilers.pdf import html_to_pdf
from profilers.roofline_points import RoofCurve, RooflinePoint
from profilers.runs import Run
from profilers.traces import Timeline

# Print-friendly: no modebar icons in PDFs, static sizes from the figure layouts.
PLOT_CONFIG = {"displayModeBar": False, "responsive": False}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 960px; color: #222; }
h1 { border-bottom: 2px solid #d62728; padding-bottom: 6px; }
h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; }
table.kv td, table.data td, table.data th { padding: 3px 10px; border-bottom: 1px solid #eee;
       text-align: left; font-size: 13px; }
.note { color: #8a6d3b; background: #fcf8e3; padding: 6px 10px; }
.figure { page-break-inside: avoid; break-inside: avoid; margin: 12px 0; }
@media print { body { max-width: none; margin: 0 12px; } h2 { page-break-after: avoid; } }
"""


def figures_for(report: Mapping) -> dict[str, go.Figure]:
    """Every figure of a report, built from its data alone (the IDE builds the same ones)."""
    figs: dict[str, go.Figure] = {}
    if report.get("roofline"):
        r = report["roofline"]
        curves = [RoofCurve(c["target"], c["dtype"], c["peak_gflops"], c["bandwidth_gbps"])
                  for c in r["curves"]]
        points = [RooflinePoint(**p) for p in r["points"]]
        figs["roofline"] = roofline_chart(curves, points, "Roofline (measured runs)")
    if report.get("flame"):
        figs["flame"] = flame_icicle(FlameNode.from_dict(report["flame"]),
                                     "Flame graph: compile + first run (pyinstrument)")
    hot = report.get("hotspots")
    if hot:
        event, label = hotspot_event(hot)
        columns = ("Ir", "D1mr", "DLmr") if event == "Ir" else (event,)
        figs["hotspots_odl"] = hotspot_table(hot["odl_lines"], hot["total"], event=event,
                                             title=f"Hotspots per ODL line ({label})",
                                             columns=columns)
        hottest = sorted(hot["kernel_lines"], key=lambda r: -r["costs"].get(event, 0))
        figs["hotspots_kernel"] = hotspot_table(hottest, hot["total"], event=event,
                                                title=f"Hottest generated C lines ({label})",
                                                max_rows=25, columns=columns)
    if report.get("comparison"):
        c = report["comparison"]
        figs["comparison"] = comparison_bars(compare(Run.from_dict(c["a"]), Run.from_dict(c["b"])))
    if report.get("timeline"):
        figs["timeline"] = timeline_chart(Timeline.from_dict(report["timeline"]))
    return figs


def to_json(report: Mapping) -> str:
    """The report's data as JSON (figures are rebuilt from it)."""
    return json.dumps(report, indent=2, default=str)


def _kv(rows: Mapping) -> str:
    return "<table class='kv'>" + "".join(
        f"<tr><td><b>{html.escape(str(k))}</b></td><td>{html.escape(_fmt(v))}</td></tr>"
        for k, v in rows.items()) + "</table>"


def _table(rows: list[Mapping], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns)
                   + "</tr>" for r in rows)
    return f"<table class='data'><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return "" if v is None else str(v)


Section = tuple[str, list[tuple[str, object]]]


def _sections(report: Mapping) -> list[Section]:
    """Ordered sections: (title, [(kind, payload)]), kinds: kv, pre, table, figure, note, text."""
    out = [build(report) for key, build in _SECTION_BUILDERS if report.get(key)]
    for name, rows in (report.get("tables") or {}).items():
        if rows:
            out.append((name, [("table", (rows, list(rows[0])))]))
    return out


def _summary_section(report: Mapping) -> Section:
    return ("Summary", [("kv", report["summary"])])


def _notes_section(report: Mapping) -> Section:
    return ("Notes", [("note", n) for n in report["notes"]])


def _verdict_section(report: Mapping) -> Section:
    return ("Summary", [("text", report["comparison"]["verdict"])])


def _operator_section(report: Mapping) -> Section:
    op = report["op"]
    return ("Operator", [("kv", {"name": op["name"], "pattern": op["pattern"],
                                 "sizes": op["sizes"], "FLOPs": op["flops"],
                                 "bytes (compulsory)": op["bytes"],
                                 "intensity (FLOP/B)": op["intensity"]}),
                         ("pre", op["odl"])])


def _target_section(report: Mapping) -> Section:
    return ("Target and chosen config", [("kv", report["target"]),
                                         ("kv", report.get("config", {}))])


def _explanation_section(report: Mapping) -> Section:
    return ("Why this config (explanation and constraints)",
            [("pre", report["explanation_text"])])


def _measurements_section(report: Mapping) -> Section:
    cols = ["label", "backend", "median_s", "ci_95", "iqr_s", "repeats", "outliers", "noisy",
            "gflops", "gbps"]
    if any("sizes" in m for m in report["measurements"]):  # runs of an IDE comparison
        cols[2:2] = ["sizes", "target", "mode"]
    items: list[tuple[str, object]] = [("table", (report["measurements"], cols))]
    if report.get("verification"):
        items.append(("kv", report["verification"]))
    return ("Measurements", items)


def _roofline_section(report: Mapping) -> Section:
    pts = report["roofline"]["points"]
    return ("Roofline", [("figure", "roofline"),
                         ("table", (pts, ["label", "target", "intensity", "achieved_gflops",
                                          "attainable_gflops", "bound", "fraction"]))])


def _comparison_section(report: Mapping) -> Section:
    return (_comparison_title(report["comparison"]), [("figure", "comparison")])


def _flame_section(report: Mapping) -> Section:
    return ("Flame graph", [("figure", "flame")])


def _hotspots_section(report: Mapping) -> Section:
    return ("Per-line hotspots", [("figure", "hotspots_odl"), ("figure", "hotspots_kernel")])


def _history_section(report: Mapping) -> Section:
    return ("Tuning history", [("table", (report["history"], [
        "id", "config", "status", "median_s", "gflops", "predicted_gflops", "reason"]))])


def _timeline_section(report: Mapping) -> Section:
    return ("Timeline", [("figure", "timeline")])


# (report key that must be present, section built from it), in the order the report shows them;
# the run's own summary leads, the named extra tables follow the last of these
_SECTION_BUILDERS: tuple[tuple[str, Callable[[Mapping], Section]], ...] = (
    ("summary", _summary_section),
    ("notes", _notes_section),
    ("comparison", _verdict_section),
    ("op", _operator_section),
    ("target", _target_section),
    ("explanation_text", _explanation_section),
    ("measurements", _measurements_section),
    ("roofline", _roofline_section),
    ("comparison", _comparison_section),
    ("flame", _flame_section),
    ("hotspots", _hotspots_section),
    ("history", _history_section),
    ("timeline", _timeline_section),
)


def _comparison_title(comparison: Mapping) -> str:
    """Name the baseline for what it is: the reference evaluator is not a torch library call."""
    if comparison["a"].get("backend") == "torch":
        return "Comparison with the reference evaluator (uol_core.evaluate, torch)"
    basis = comparison.get("basis", "time")
    return "Comparison of two runs" + ("" if basis == "time" else
                                       " (normalised by FLOPs)" if basis == "flop rate" else
                                       " (no timing comparison)")


def to_html(report: Mapping) -> str:
    """One self-contained HTML file: plotly.js inlined once, no external script or stylesheet."""
    figs = figures_for(report)
    parts = [f"<h1>{html.escape(report['title'])}</h1>",
             f"<p>generated {html.escape(report.get('generated', ''))} by uol-studio</p>"]
    first = True
    for title, items in _sections(report):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        for kind, payload in items:
            if kind == "figure":
                if payload not in figs:
                    continue
                # plotly.js goes in with the first figure only; the rest reuse it
                div = pio.to_html(figs[payload], full_html=False, include_plotlyjs=first,
                                  config=PLOT_CONFIG, div_id=f"fig-{payload}")
                first = False
                parts.append(f"<div class='figure'>{div}</div>")
            elif kind == "kv":
                parts.append(_kv(payload))
            elif kind == "table":
                rows, cols = payload
                parts.append(_table(rows, cols))
            elif kind == "pre":
                parts.append(f"<pre>{html.escape(str(payload))}</pre>")
            elif kind == "note":
                parts.append(f"<p class='note'>{html.escape(str(payload))}</p>")
            else:
                parts.append(f"<p><b>{html.escape(str(payload))}</b></p>")
    return ("<!doctype html>\n<html><head><meta charset='utf-8'>"
            f"<title>{html.escape(report['title'])}</title><style>{CSS}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")


def to_markdown(report: Mapping) -> str:
    """Markdown: the same sections; figures become tables or are named with their data."""
    lines = [f"# {report['title']}", "", f"generated {report.get('generated', '')} by uol-studio",
             ""]
    for title, items in _sections(report):
        lines += [f"## {title}", ""]
        for kind, payload in items:
            if kind == "kv":
                lines += ["| field | value |", "|---|---|"]
                lines += [f"| {k} | {_fmt(v)} |" for k, v in payload.items()]
            elif kind == "table":
                rows, cols = payload
                lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                lines += ["| " + " | ".join(_fmt(r.get(c)).replace("|", "\\|") for c in cols)
                          + " |" for r in rows]
            elif kind == "pre":
                lines += ["```", str(payload).rstrip(), "```"]
            elif kind == "note":
                lines.append(f"> {payload}")
            elif kind == "figure":
                lines += _figure_markdown(report, str(payload))
            else:
                lines.append(f"**{payload}**")
            lines.append("")
    return "\n".join(lines) + "\n"


def hotspot_event(hot: Mapping) -> tuple[str, str]:
    """The cost a hotspot report ranks by and where it came from: callgrind's instruction
    counts, or the cycle-counter build's cycles (kernels valgrind cannot decode)."""
    event = (hot.get("events") or ["Ir"])[0]
    source = (hot.get("meta") or {}).get("source", "callgrind")
    return event, ("callgrind" if source == "callgrind" else "cycle counters")


def _figure_markdown(report: Mapping, name: str) -> list[str]:
    """Text stand-ins for figures (Markdown has no plotly)."""
    if name == "flame":
        return ["```", render_text(FlameNode.from_dict(report["flame"]), max_depth=6,
                                   min_share=0.02), "```"]
    if name == "hotspots_odl":
        hot = report["hotspots"]
        event, label = hotspot_event(hot)
        total = hot["total"].get(event) or 1
        rows = [f"*{label}*", "", f"| ODL line | % {event} | {event} | source |",
                "|---|---|---|---|"]
        rows += [f"| {r['line']} | {r['costs'].get(event, 0) / total * 100:.1f}% | "
                 f"{r['costs'].get(event, 0):,} | `{r['text'].strip()}` |"
                 for r in hot["odl_lines"]]
        return rows
    if name == "comparison":
        c = report["comparison"]
        ratio = {"time": "speedup of B over A", "flop rate": "GFLOP/s of B over A "
                 "(normalised by FLOPs)"}.get(c.get("basis", "time"))
        if ratio is None:
            return [c["verdict"]]
        return [f"{ratio}: {_fmt(c['speedup'])}x "
                f"(A {_fmt(c['a']['label'])}, B {_fmt(c['b']['label'])})"]
    return [f"*(figure `{name}`: see the HTML report)*"]


def write(report: Mapping, path: str | Path, fmt: str | None = None) -> Path:
    """Write the report as html, md, json or pdf (chosen by `fmt` or the file suffix)."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".") or "html").lower()
    if fmt in ("md", "markdown"):
        path.write_text(to_markdown(report), encoding="utf-8")
    elif fmt == "json":
        path.write_text(to_json(report), encoding="utf-8")
    elif fmt == "html":
        path.write_text(to_html(report), encoding="utf-8")
    elif fmt == "pdf":
        with tempfile.TemporaryDirectory(prefix="uol-report-") as tmp:
            html_path = Path(tmp) / "report.html"
            html_path.write_text(to_html(report), encoding="utf-8")
            html_to_pdf(html_path, path)
    else:
        raise ValueError(f"unknown report format '{fmt}': use html, pdf, md or json")
    return path

