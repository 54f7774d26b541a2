"""Plotly figure builders shared by the IDE, the CLI and reports: data in, go.Figure out, no dash."""

from profilers.figures.charts import (
    comparison_bars,
    flame_icicle,
    hotspot_table,
    roofline_chart,
    timeline_chart,
)

__all__ = ["comparison_bars", "flame_icicle", "hotspot_table", "roofline_chart", "timeline_chart"]
