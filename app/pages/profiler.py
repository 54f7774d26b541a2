"""Profiler page (placeholder until the profiler issue): flame graphs and per-line hotspots."""

import dash

from app.pages._placeholder import placeholder

dash.register_page(__name__, path="/profiler", name="Profiler", title="UOL Studio: Profiler",
                   order=3)

layout = placeholder("Profiler", [
    "flame graphs (pyinstrument) of compile and run, click a frame to see its source",
    "callgrind costs per generated C line, mapped back to ODL lines",
    "speedscope and Chrome-trace (Perfetto) exports",
], [("uol profile OP", "a flame graph of compile + run"),
    ("uol hotspots OP", "per-line costs (callgrind) mapped to ODL lines"),
    ("uol compare RUN_A RUN_B", "compare two runs")])
