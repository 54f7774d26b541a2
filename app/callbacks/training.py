"""Training callbacks: start a real pipeline run, then tail its per-rank events on a timer.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, html, no_update


@callback(Output("train-run", "data"), Output("train-tick", "disabled"), Output("train-status", "children"),
          Output("train-report", "children", allow_duplicate=True),
          Input("train-start", "n_clicks"),
          State("train-stages", "value"), State("train-microbatches", "value"), State("train-schedule", "value"),
          State("train-steps", "value"), State("train-straggler", "value"), prevent_initial_call=True)
def start_run(_n, stages, microbatches, schedule, steps, straggler):
    """Check the knobs and start the run in the background; the timer then follows it."""
    from app.services import training
    from app.services.job_queue import client_id

    try:
        cfg = training.make_config(stages or 0, microbatches or 0, schedule, steps or 0, bool(straggler))
        run_id = training.start(cfg, client_id())
    except (ValueError, TypeError) as exc:  # HcfError is a ValueError: the limit it crossed, said
        return no_update, True, html.Span(f"✗ {exc}", className="result-bad"), ""
    return run_id, False, f"started: {cfg.schedule}, {cfg.stages} stages, {cfg.microbatches} micro-batches", ""


def _interval(ph: dict) -> str:
    """The prediction's interval on this host and whether the measured step fell inside it."""
    check = ph.get("check")
    if not check:
        return ""
    low, high = check["interval_s"]
    where = "inside" if check["inside_interval"] else "outside"
    return f", interval {low * 1e3:.1f}-{high * 1e3:.1f} ms on this host: measured {where}"


def _report(rep: dict) -> html.Div:
    items = []
    for i, ph in enumerate(rep["phases"]):
        name = ("before rebalance", "after rebalance")[i] if len(rep["phases"]) > 1 else "measured"
        items.append(html.Li(
            f"{name}: blocks per stage {ph['split']}, step {ph['step_s'] * 1e3:.1f} ms measured, "
            f"{ph['sim_step_s'] * 1e3:.1f} ms simulated ({ph['sim_error']:+.0%}{_interval(ph)}); bubble "
            f"{ph['bubble_fraction']:.0%} measured, {ph['sim_bubble_fraction']:.0%} simulated"
            + (f"; straggler rank(s) {ph['stragglers']}" if ph["stragglers"] else "")))
    if "rebalance" in rep:
        rb = rep["rebalance"]
        items.append(html.Li(f"rebalance: {rb['before']} -> {rb['after']}, step "
                             f"{rb['step_s_before'] * 1e3:.1f} -> {rb['step_s_after'] * 1e3:.1f} ms "
                             f"({rb['gain']:.0%} faster)"))
    losses = rep["losses"]
    items.append(html.Li(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps"))
    return html.Div([html.H3("Result"), html.Ul(items)], id="train-result")


@callback(Output("train-measured", "figure"), Output("train-simulated", "figure"),
          Output("train-status", "children", allow_duplicate=True), Output("train-progress", "value"),
          Output("train-progress", "max"), Output("train-tick", "disabled", allow_duplicate=True),
          Output("train-report", "children"),
          Input("train-tick", "n_intervals"), State("train-run", "data"), prevent_initial_call=True)
def follow_run(_tick, run_id):
    """Read the run's event files: draw the latest finished step; stop the timer when it ends."""
    from app.figures.training import measured_and_simulated
    from app.services import training

    if not run_id:
        return (no_update,) * 5 + (True, no_update)
    try:
        snap = training.snapshot(run_id)
    except (OSError, ValueError) as exc:
        return no_update, no_update, f"✗ {exc}", no_update, no_update, True, no_update
    steps = snap["config"]["steps"]
    if snap["state"] == "failed":
        return (no_update, no_update, html.Span(f"✗ {snap['error']}", className="result-bad"),
                no_update, no_update, True, no_update)
    if snap["state"] == "done":
        rep = snap["report"]
        ph = rep["phases"][-1]
        left, right = measured_and_simulated(ph["measured_timeline"], ph["sim_timeline"], ph["step_s"] * 1e3,
                                             ph["sim_step_s"] * 1e3, ph["typical_step"])
        return left, right, "✓ finished", str(steps), str(steps), True, _report(rep)
    live = snap.get("live") or {}
    text = f"{snap['state']}: {live.get('steps_done', 0)}/{steps} steps"
    if live.get("loss") is not None:
        text += f", loss {live['loss']:.4f}"
    if "measured_timeline" not in live:
        return no_update, no_update, text, str(live.get("steps_done", 0)), str(steps), False, no_update
    left, right = measured_and_simulated(live["measured_timeline"], live.get("sim_timeline", []),
                                         live["step_s"] * 1e3, (live.get("sim_step_s") or 0) * 1e3, live["step"])
    return left, right, text, str(live["steps_done"]), str(steps), False, no_update
