"""Permalink of a run: /run/<id> reopens it in the Studio (same layout, run loaded)."""

from __future__ import annotations

import dash

from app.pages import studio

dash.register_page(__name__, path_template="/run/<run_id>", name="Run", title="UOL Studio: run",
                   order=99)


def layout(run_id: str | None = None, **query):
    """The Studio with run `run_id` loaded."""
    return studio.layout(run_id=run_id, **query)
