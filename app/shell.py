"""The app shell around every page: navigation bar, page container and the live status bar.

Deferred imports: the status bar's services load at its first refresh, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, clientside_callback, dcc, html

NAV = [("Studio", "/"), ("Graph", "/graph"), ("Debugger", "/debugger"),
       ("Profiler", "/profiler"), ("Communication", "/communication"), ("Training", "/training"),
       ("Hardware", "/hardware"), ("Guide", "/guide"), ("Reports", "/reports")]


def layout() -> html.Div:
    """Top bar with links, the page, and the status bar (refreshed every 2 s)."""
    return html.Div([
        html.Header([
            html.Span("UOL Studio", className="brand"),
            html.Nav([dcc.Link(name, href=path, className="nav-link", id=f"nav-{name.lower()}")
                      for name, path in NAV], className="nav"),
        ], className="topbar"),
        # the target the Studio uses now; the status bar shows it on every page
        dcc.Store(id="current-target", storage_type="session", data="host"),
        html.Main(dash.page_container, className="page"),
        html.Footer([
            html.Span(id="status-target", className="status-item"),
            html.Span(id="status-gpu", className="status-item"),
            html.Span(id="status-running", className="status-item"),
            html.Span(id="status-util", className="status-item status-util"),
            # a callback that failed on input it could not use says so here (app.main)
            html.Span(id="status-error", className="status-item status-error"),
        ], className="statusbar", id="status-bar"),
        dcc.Interval(id="status-tick", interval=2000),
    ], className="app")


def _bar(percent: float) -> str:
    """A 5-step text gauge, cheap to render (one string, no components)."""
    return "▁▂▃▅▇"[min(4, int(percent / 20))]


@callback(Output("status-target", "children"), Output("status-gpu", "children"),
          Output("status-running", "children"), Output("status-util", "children"),
          Input("status-tick", "n_intervals"), State("current-target", "data"))
def refresh_status(_tick, target):
    """Status bar text: target, GPU presence, running work, CPU per core and memory."""
    from app.services.system import snapshot

    snap = snapshot()
    cores = " ".join(f"{_bar(p)}{p:.0f}%" for p in snap["cpu"])
    util = f"CPU {cores} | mem {snap['mem_used_gib']:.1f}/{snap['mem_total_gib']:.1f} GiB"
    gpus = snap["gpus"]
    if gpus:
        gpu = "GPU: " + ", ".join(g["name"] for g in gpus)
        util += "".join(f" | GPU{i} {g['util']}% {g['mem_used_gib']:.1f}/"
                        f"{g['mem_total_gib']:.0f} GiB" for i, g in enumerate(gpus))
    else:
        gpu = "GPU: none (Triton runs interpreted)"
    run = "running: " + (", ".join(snap["running"]) if snap["running"] else "idle")
    from app.services.remote import where

    return where(target), gpu, run, util  # where the target's jobs run (here or a worker)


# A failed callback's line (app.main.callback_failed) fades after 20 s: it says what went wrong
# with the last action, not the state of the page.
clientside_callback(
    """function (message) {
        if (message) {
            setTimeout(function () {
                window.dash_clientside.set_props("status-error", {children: ""});
            }, 20000);
        }
        return window.dash_clientside.no_update;
    }""",
    Output("status-error", "className"), Input("status-error", "children"),
    prevent_initial_call=True,
)
