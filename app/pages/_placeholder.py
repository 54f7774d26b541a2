"""Shared layout of pages that later issues fill: what will come, and the CLI that does it now."""

from __future__ import annotations

from dash import dcc, html


def placeholder(title: str, coming: list[str], cli: list[tuple[str, str]]) -> html.Div:
    """A page that says what it will show and which `uol` commands do it today."""
    return html.Div([
        html.H2(title),
        html.P("This page is coming in a later release. It will show:"),
        html.Ul([html.Li(c) for c in coming]),
        html.H3("Today, from the command line"),
        html.Ul([html.Li([html.Code(cmd), " — ", what]) for cmd, what in cli]),
        html.P(["Meanwhile the ", dcc.Link("Kernel Studio", href="/"),
                " compiles, runs and tunes operators."]),
    ], className="placeholder panel")
