"""The optimisation guide as one offline HTML file: a filterable table of every case (target,
family, the ACG's config, binding constraints, roofline position, predicted and measured time,
one-knob moves), with no external scripts, styles or fonts."""

from __future__ import annotations

import html
import json
from typing import Any

from uol_core.guide.generate import Guide

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
h1 { font-size: 1.5em; } .muted { color: #667; }
table { border-collapse: collapse; width: 100%; } th, td { border-bottom: 1px solid #dde;
  padding: 4px 6px; vertical-align: top; text-align: left; } th { background: #f3f4f8; }
code { font-size: 12px; } .bad { color: #b00020; } .pred { color: #6a4c00; }
.meas { color: #0a6b2d; font-weight: 600; } details summary { cursor: pointer; }
.filters select, .filters input { margin-right: 1em; }
"""

_SCRIPT = """
function applyFilters() {
  const t = document.getElementById('f-target').value, f = document.getElementById('f-family').value,
        b = document.getElementById('f-bound').value, q = document.getElementById('f-text').value.toLowerCase();
  let shown = 0;
  for (const row of document.querySelectorAll('tr.case')) {
    const ok = (!t || row.dataset.target === t) && (!f || row.dataset.family === f)
      && (!b || row.dataset.bound === b) && (!q || row.textContent.toLowerCase().includes(q));
    row.style.display = ok ? '' : 'none'; if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown;
}
"""


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _options(values: list[str]) -> str:
    return "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                   for v in ["", *values])


def _knobs(changes: list[dict]) -> str:
    rows = []
    for m in changes:
        move = f"{html.escape(str(m['knob']))} {html.escape(str(m['from']))} → {html.escape(str(m['to']))}"
        if m.get("legal"):
            rows.append(f"<li>{move}: ×{m['ratio']:.2f} time <span class='pred'>(predicted)</span></li>")
        else:
            rows.append(f"<li class='bad'>{move}: illegal, {html.escape(m.get('why', ''))}</li>")
    return f"<ul>{''.join(rows)}</ul>" if rows else "<span class='muted'>no one-step move</span>"


def _row(case: dict, studio_base: str) -> str:
    roof = case.get("roofline", {})
    cfg = ", ".join(f"{k}={v}" for k, v in case["config"].items())
    sizes = ", ".join(f"{k}={v}" for k, v in case["sizes"].items())
    measured = (f"<span class='meas'>{_seconds(case['measured_s'])}</span><br>"
                f"<small>{html.escape(case['measured_label'])}</small>"
                if case.get("measured_s") else "<span class='muted'>not run here</span>")
    intensity = roof.get("intensity")
    position = (f"{roof.get('bound', '?')}-bound<br><small>{intensity:.3g} FLOP/B vs ridge "
                f"{roof.get('ridge_intensity', 0):.3g}</small>" if intensity is not None
                else html.escape(str(roof.get("bound", "?"))))
    binding = "".join(f"<li>{html.escape(b)}</li>" for b in case["binding"]) or \
        "<li class='muted'>none: every knob can still grow</li>"
    legal = "" if case["legal"] else "<br><span class='bad'>NOT LEGAL</span>"
    link = html.escape(studio_base + case["studio_link"])
    return (f"<tr class='case' id='{html.escape(case['id'])}' data-target='{html.escape(case['target'])}' "
            f"data-family='{html.escape(case['family'])}' data-bound='{html.escape(str(roof.get('bound', '')))}'>"
            f"<td>{html.escape(case['target'])}<br><small class='muted'>{case['target_kind']}, "
            f"{html.escape(case['backend'])}</small></td>"
            f"<td>{html.escape(case['family'])}<br><small>{html.escape(case['op'])}: {sizes}</small></td>"
            f"<td><code>{html.escape(cfg)}</code>{legal}<br><small class='muted'>{html.escape(case['pattern'])}</small></td>"
            f"<td>{position}</td>"
            f"<td><span class='pred'>{_seconds(case['predicted_s'])}</span><br>"
            f"<small>{html.escape(case['prediction_label'])}</small></td><td>{measured}</td>"
            f"<td><details><summary>{len(case['binding'])} binding, "
            f"{len(case['knob_changes'])} moves</summary><ul>{binding}</ul>"
            f"{_knobs(case['knob_changes'])}</details></td>"
            f"<td><a href='{link}'>open in Studio</a></td></tr>")


def render_guide_html(guide: Guide | dict[str, Any], studio_base: str = "") -> str:
    """The whole guide as a self-contained HTML page; `studio_base` prefixes the Studio links
    (e.g. http://127.0.0.1:8050 when the file is opened outside the IDE)."""
    data = guide.to_dict() if isinstance(guide, Guide) else guide
    cases = data["cases"]
    targets = sorted({c["target"] for c in cases})
    families = [f["name"] for f in data["families"]]
    bounds = sorted({str(c["roofline"].get("bound", "")) for c in cases})
    measured = sum(1 for c in cases if c.get("measured_s"))
    body = "".join(_row(c, studio_base) for c in cases)
    errors = "".join(f"<li>{html.escape(e['id'])}: {html.escape(e['error'])}</li>"
                     for e in data.get("errors", []))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>UOL optimisation guide</title>
<style>{_STYLE}</style></head><body>
<h1>UOL optimisation guide</h1>
<p>{len(cases)} cases: {len(targets)} targets × {len(families)} operator families. Each row is
the config the ACG picks for the family's typical sizes on that target, the constraints that
stop its knobs growing, its place under the target's roofline, and what moving one knob one
step would do. Times are <span class='pred'>model-predicted</span> unless marked
<span class='meas'>measured</span> ({measured} cases, each saying where: this
host or a live worker of its target).</p>
<div class="filters">Target <select id="f-target" onchange="applyFilters()">{_options(targets)}</select>
Family <select id="f-family" onchange="applyFilters()">{_options(families)}</select>
Bound <select id="f-bound" onchange="applyFilters()">{_options(bounds)}</select>
Search <input id="f-text" oninput="applyFilters()"> <span id="shown">{len(cases)}</span> shown</div>
<table><thead><tr><th>Target</th><th>Family</th><th>ACG config</th><th>Roofline</th>
<th>Predicted</th><th>Measured</th><th>Constraints and knob moves</th><th>Kernel</th></tr></thead>
<tbody>{body}</tbody></table>
{f"<h2>Cases the compiler could not plan</h2><ul>{errors}</ul>" if errors else ""}
<script type="application/json" id="guide-data">{json.dumps({"key": data.get("key", "")})}</script>
<script>{_SCRIPT}</script></body></html>
"""
