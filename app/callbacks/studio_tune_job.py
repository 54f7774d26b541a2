"""Reattach to a Tune: the page follows the tune job whose id it keeps in local storage.

The Tune button's background callback (studio_run.tune_kernel) drives the Tuning panel while
the page that pressed it stays open. A reloaded page has lost Dash's handle on that callback but
still holds the job's id (`tune-job`, local storage): it polls the job's record
(app.services.tune_jobs) once a second, shows its progress, then its result, and hands the best
config to Apply best. Cancel asks a reattached job to stop before its next measurement.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, no_update


@callback(Output("tune-watch", "disabled"), Input("tune-job", "data"))
def watch_tune_job(job):
    """Poll while the page holds a job id (after a reload too: the store is local)."""
    return not (isinstance(job, dict) and job.get("id"))


@callback(Output("tune-status", "children", allow_duplicate=True),
          Output("tune-plot", "figure", allow_duplicate=True),
          Output("tune-progress", "value", allow_duplicate=True),
          Output("tune-progress", "max", allow_duplicate=True),
          Output("tune-best", "data", allow_duplicate=True),
          Output("tune-apply", "disabled", allow_duplicate=True),
          Output("tune-button", "disabled", allow_duplicate=True),
          Output("tune-cancel", "disabled", allow_duplicate=True),
          Output("tune-watch", "disabled", allow_duplicate=True),
          Input("tune-watch", "n_intervals"), State("tune-job", "data"),
          State("studio-state", "data"), prevent_initial_call=True)
def follow_tune_job(_tick, job, state):
    """The job's progress while it runs, its summary, trail and best config once it ended (when
    it tuned the page's inputs); the polling stops then (and for an id this browser has no job
    of)."""
    from app.callbacks.studio_run import progress_line
    from app.callbacks.studio_state import tuned_for
    from app.figures.studio import tune_figure
    from app.services import tune_jobs
    from app.services.job_queue import client_id

    # the id comes from the browser: anything but one of this client's job ids finds nothing
    record = tune_jobs.read(job.get("id") if isinstance(job, dict) else None, client_id())
    if record is None:  # the server's records were cleared, or another browser's id
        return (no_update,) * 8 + (True,)
    trail, budget = record.get("trail") or [], record.get("budget") or 1
    if record["state"] == tune_jobs.RUNNING:
        line = progress_line(trail, record.get("done", 0), budget)
        return (line, tune_figure(trail), str(record.get("done", 0)), str(budget), no_update,
                True, True, False, False)
    if not state:  # the page's first compile has not landed: look again at the next tick
        return (no_update,) * 9
    if not tuned_for(record.get("inputs"), state):
        # an ended tune of other inputs (another op, sizes, backend or target): not shown
        return (no_update,) * 6 + (False, True, True)
    tuned = record.get("tuned")
    return (record.get("status", ""), tune_figure(trail), str(len(trail)),
            str(max(len(trail), 1)), tuned, not tuned_for(tuned, state), False, True, True)


@callback(Output("tune-status", "children", allow_duplicate=True),
          Input("tune-cancel", "n_clicks"), State("tune-job", "data"),
          prevent_initial_call=True)
def stop_tune_job(_clicks, job):
    """Cancel: the job stops before its next measurement (Dash also ends a callback this page
    started itself)."""
    from app.services import tune_jobs
    from app.services.job_queue import client_id

    job_id = job.get("id") if isinstance(job, dict) else None
    if not job_id or not tune_jobs.request_stop(job_id, client_id()):
        return no_update
    return "■ stopping: the tune ends before its next measurement"
