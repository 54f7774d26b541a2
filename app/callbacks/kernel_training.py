"""Training page, "Train on UOL kernels": start a run, then draw its curves on a timer.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, html, no_update


@callback(Output("ktrain-run", "data"), Output("ktrain-tick", "disabled"),
          Output("ktrain-status", "children"),
          Output("ktrain-report", "children", allow_duplicate=True),
          Input("ktrain-start", "n_clicks"), State("ktrain-steps", "value"),
          State("ktrain-backend", "value"), State("ktrain-optimizer", "value"),
          State("ktrain-model", "value"), prevent_initial_call=True)
def start_run(_n, steps, backend, optimizer, model):
    """Check the knobs and start the run in the background; the timer then follows it."""
    from app.services import kernel_training
    from app.services.job_queue import client_id

    try:
        cfg = kernel_training.make_config(steps, backend, optimizer, model)
        run_id = kernel_training.start(cfg, client_id())
    except ValueError as exc:  # the knob and its limits, said
        return no_update, True, html.Span(f"✗ {exc}", className="result-bad"), ""
    return run_id, False, (f"started: {cfg['model']}, {cfg['steps']} steps on the "
                           f"{cfg['backend']} backend"), ""


def step_verdict(torch_run: dict, uol: dict) -> str:
    """Which way and by how much, with its 95% CI, or "no significant difference": the step
    times after the first two (UOL builds its kernels there), as the medians are taken."""
    from uol_core.runtime.stats import compare

    steps = lambda run: run.get("step_ms", [])[2:] or run.get("step_ms") or None  # noqa: E731
    return compare(steps(torch_run), steps(uol), a_median=torch_run["median_step_ms"],
                   b_median=uol["median_step_ms"], a_label="torch eager",
                   b_label="UOL").text


def _report(res: dict) -> html.Div:
    torch_run, uol = res["torch"], res["uol"]
    items = [
        html.Li(f"step time (median): torch eager {torch_run['median_step_ms']:.3f} ms, UOL "
                f"{uol['median_step_ms']:.3f} ms: {step_verdict(torch_run, uol)}",
                id="ktrain-speed"),
        html.Li(f"final loss: torch {torch_run['losses'][-1]:.5f}, UOL {uol['losses'][-1]:.5f} "
                f"(relative gap {res['final_loss_relative_gap']:.1e}; largest gap over the run "
                f"{res['max_abs_loss_gap']:.1e})"),
        html.Li("on UOL: " + ", ".join(uol["swapped"])),
    ]
    if torch_run.get("accuracy") is not None:  # a classifier (the MLP); a regression has none
        items.insert(2, html.Li(f"held-out accuracy: torch {torch_run['accuracy']:.4f}, UOL "
                                f"{uol['accuracy']:.4f}"))
    return html.Div([html.H3("Result"), html.Ul(items)], id="ktrain-result")


@callback(Output("ktrain-loss", "figure"), Output("ktrain-times", "figure"),
          Output("ktrain-status", "children", allow_duplicate=True),
          Output("ktrain-progress", "value"), Output("ktrain-progress", "max"),
          Output("ktrain-tick", "disabled", allow_duplicate=True),
          Output("ktrain-report", "children"),
          Input("ktrain-tick", "n_intervals"), State("ktrain-run", "data"),
          prevent_initial_call=True)
def follow_run(_tick, run_id):
    """Redraw the curves so far; the result and the timer's end once the run is done."""
    from app.figures.training import twin_loss, twin_step_times
    from app.services import kernel_training

    if not run_id:
        return (no_update,) * 5 + (True, no_update)
    try:
        snap = kernel_training.snapshot(run_id)
    except (OSError, ValueError) as exc:
        return no_update, no_update, f"✗ {exc}", no_update, no_update, True, no_update
    steps = snap["config"]["steps"]
    loss_name = kernel_training.LOSS_NAMES.get(snap["config"].get("model", "mlp"), "loss")
    if snap["state"] == "failed":
        return (no_update, no_update, html.Span(f"✗ {snap['error']}", className="result-bad"),
                no_update, no_update, True, no_update)
    if snap["state"] == "done":
        res = snap["result"]
        losses = [res["torch"]["losses"], res["uol"]["losses"]]
        times = [res["torch"]["step_ms"], res["uol"]["step_ms"]]
        return (twin_loss(losses, loss_name=loss_name), twin_step_times(times), "✓ finished", str(steps), str(steps),
                True, _report(res))
    live = snap.get("live")
    if not live:
        return no_update, no_update, f"{snap['state']}: building the kernels", "0", str(steps), \
            False, no_update
    done = live["steps_done"]
    return (twin_loss(live["losses"], loss_name=loss_name), twin_step_times(live["step_ms"]),
            f"{snap['state']}: {done}/{steps} steps", str(done), str(steps), False, no_update)
