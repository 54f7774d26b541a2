"""Hardware page service: HFL targets as table rows with provenance, roof curves, the host probe.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

from typing import Any

COLUMNS = ("name", "kind", "cores", "vector_bits", "l1d_bytes", "l2_bytes", "peak_gflops.fp32",
           "mem_bandwidth_gbps", "ridge")


def targets() -> list[str]:
    """Shipped target names (the probed host is added by the page when wanted)."""
    from uol_core.hfl import list_targets

    return [t for t in list_targets() if t != "host"]


def target_rows(names: list[str]) -> tuple[list[dict], list[str]]:
    """One row per target with each number's provenance beside it; errors listed, not raised."""
    from uol_core.hfl import load_target

    rows, errors = [], []
    for name in names:
        try:
            t = load_target(name)
        except Exception as exc:  # one bad file must not hide the others
            errors.append(f"{name}: {exc}")
            continue
        row: dict[str, Any] = {"name": t.name, "kind": t.kind}
        for col in COLUMNS[2:-1]:
            base, _, sub = col.partition(".")
            value = getattr(t, base, None)
            value = value.get(sub) if sub and isinstance(value, dict) else value
            row[col] = value
            try:
                prov = t.provenance(col)
                row[f"{col} (source)"] = f"{prov.kind}: {prov.source}" if prov.source else prov.kind
            except KeyError:
                row[f"{col} (source)"] = ""
        peak, bw = row.get("peak_gflops.fp32"), row.get("mem_bandwidth_gbps")
        row["ridge"] = round(peak / bw, 2) if peak and bw else None
        rows.append(row)
    return rows, errors


def roofline_for(names: list[str], dtype: str = "fp32"):
    """The shared roofline chart (profilers.figures) with one roof per target at its `dtype`
    peak; the title names the targets that record no such peak (left out)."""
    from profilers.figures.charts import roofline_chart
    from profilers.roofline_points import roof_curve

    curves, without = [], []
    for name in names:
        try:
            curves.append(roof_curve(name, dtype))
        except Exception:  # no such peak in its record: nothing to draw for it
            without.append(name)
    title = f"Roofline per target ({dtype})" + (
        f"; no {dtype} peak recorded: {', '.join(without)}" if without else "")
    fig = roofline_chart(curves, [], title)
    # in the page the chart fills its panel (the shared chart's size is the export's)
    fig.layout.width = None
    fig.layout.height = None
    fig.layout.autosize = True
    return fig


def probe(refresh: bool = True, progress=None) -> dict:
    """Run the host probe (quick; progress(step, fraction)) and return its JSON-ready record."""
    from uol_core.hfl.probe import probe_host

    return probe_host(quick=True, refresh=refresh, progress=progress).to_dict()


def cached_probe() -> dict | None:
    """The last probe result, if the host was probed before (no measurement)."""
    from uol_core.hfl.probe import cached_host

    host = cached_host()
    return host.to_dict() if host else None
