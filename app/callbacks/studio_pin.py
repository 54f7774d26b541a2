"""Studio: pin a run as the baseline of its op, sizes, backend and target; the history's diff
then compares each later run with it (with its confidence interval) instead of the run before.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import ALL, Input, Output, State, callback, ctx
from dash.exceptions import PreventUpdate


@callback(Output("run-history", "children", allow_duplicate=True),
          Input({"type": "pin-run", "run": ALL}, "n_clicks"), State("studio-state", "data"),
          prevent_initial_call=True)
def pin_run(clicks, state):
    """Pin the clicked run; the history is redrawn with its pin and the diff against it."""
    from app.components.studio_parts import history_panel
    from app.services import history

    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not any(clicks or []):
        raise PreventUpdate  # a new Result panel's button, not a click
    try:
        row = history.pin(int(trigger["run"]))
    except (KeyError, TypeError, ValueError):  # a run id the page never offered
        raise PreventUpdate from None
    op = (state or {}).get("op") or row["op"]
    return history_panel(history.runs(op=op, limit=8))
