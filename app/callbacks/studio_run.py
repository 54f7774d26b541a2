"""Studio run and tune: verify + measure in the worker, tune as a cancellable background job.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, html, no_update

from app.background import through_broker
from app.figures.studio import empty_figure, tune_figure


def _roofline(result: dict, target: str):
    """The shared roofline chart with this run as a point (profilers.figures)."""
    from profilers.figures.charts import roofline_chart
    from profilers.roofline_points import point, roof_curve

    dtype = (result.get("roofline") or {}).get("dtype", "fp32")  # the peak the run is held to
    pts = []
    if result.get("median_s") and result.get("flops") is not None:
        pts.append(point(f"run #{result['id']}", result["flops"], result["bytes"],
                         result["median_s"], target, dtype))
    title = f"Roofline on {target}" + ("" if dtype == "fp32" else f" ({dtype} peak)")
    fig = roofline_chart([roof_curve(target, dtype)], pts, title)
    # the shared chart has a print width; in the Studio it follows its panel's width
    return fig.update_layout(width=None, height=None, autosize=True)


def as_shown(state: dict | None, odl: str | None, sizes_text: str | None, backend: str | None,
             target: str | None) -> dict | None:
    """What Run runs: the page's inputs as they are now. The compiled state when it is of them;
    when they changed and their compile has not landed yet (a new op picked, sizes typed and
    Run pressed at once), the inputs with the model's config, never the kernel before them."""
    from app.callbacks.studio import _sizes, op_identity

    if not state:
        return None
    try:
        typed = _sizes(sizes_text)
    except ValueError:
        typed = None  # the compile says what is wrong with the sizes
    same = (odl is None or odl == state.get("odl")) and (backend is None or backend == state.get(
        "backend")) and (target is None or target == state.get("target")) and (typed is None or all(
            (state.get("sizes") or {}).get(k) == v for k, v in typed.items()))
    if same:
        return state
    odl = odl if odl is not None else state.get("odl", "")
    return {**state, "odl": odl, "ok": bool(odl), "op": (op_identity(odl) or {}).get("op", ""),
            "backend": backend or state.get("backend"), "target": target or state.get("target"),
            "sizes": typed or {}, "config": {}, "kernel": ""}


@callback(Output("run-result", "children"), Output("run-history", "children"),
          Output("roofline-graph", "figure"),
          Input("run-button", "n_clicks"), State("studio-state", "data"),
          State("odl-editor", "value"), State("sizes-input", "value"),
          State("backend-select", "value"), State("target-select", "value"),
          background=through_broker(),  # `uol serve --broker`: in the IDE's job worker
          running=[(Output("run-button", "disabled"), True, False)],
          prevent_initial_call=True)
def run_kernel(_clicks, state, odl=None, sizes_text=None, backend=None, target=None):
    """Verify and time the kernel of the page's inputs in the worker process; errors show in
    the page."""
    from app.components.studio_parts import history_panel, run_result
    from app.services import history, runner
    from app.services.job_queue import client_id
    from app.services.system import activity

    state = as_shown(state, odl, sizes_text, backend, target)
    if not state or not state.get("ok"):
        return html.Div("Compile a kernel first (the ODL has an error).",
                        className="result-bad"), "", empty_figure("no run")
    with activity(f"run {state['op']}"):
        res = runner.run_kernel(state["odl"], state["backend"], state["target"], state["sizes"],
                                state["config"], kernel_text=state.get("kernel", ""),
                                client=client_id())
    try:
        fig = _roofline(res, state["target"])
    except Exception as exc:  # a target without roofs: say so in the chart
        fig = empty_figure(f"no roofline: {exc}")
    runs = history.runs(op=state["op"], limit=8)
    return run_result(res), history_panel(runs), fig


def budget_problem(raw) -> tuple[int, str]:
    """The tune budget typed in the box, or why it cannot be used (naming the limits)."""
    from app.services.runner import MAX_TUNE_BUDGET

    text = str(raw if raw is not None else "").strip()
    limit = f"the tune budget is a whole number from 1 to {MAX_TUNE_BUDGET}"
    try:
        value = int(text)
    except ValueError:
        return 0, f"✗ {limit}, got '{text or 'nothing'}'."
    if not 1 <= value <= MAX_TUNE_BUDGET:
        return 0, f"✗ {limit}, got {value}."
    return value, ""


def tune_summary(trail: list[dict], budget: int, best: dict | None) -> str:
    """What the tune did, counted from its own measurements (never more than it measured), and
    the best against the untuned default it measured first (where it did)."""
    verified = sum(1 for t in trail if t.get("ok"))
    head = f"{len(trail)} measured of a budget of {budget}, {verified} verified"
    untimed = [t for t in trail if t.get("untimed")]
    if not best and untimed:  # Triton interpreted: verified, and no time to rank them by
        from uol_core.runtime.untimed import untimed_summary

        return "✓ " + untimed_summary(len(untimed), len(trail)) + "; the knobs stay as they are."
    if not best:
        return f"No verified config: {head}."
    cfg = ", ".join(f"{k}={v}" for k, v in best["config"].items())
    base = next((t for t in trail if t.get("baseline")), None)
    raced = best.get("raced") or {}
    against, settled = "", ""
    if len(raced) > 1:
        settled = (f"; the {len(raced)} finalists, timed again in turn, settled the pick "
                   f"({', '.join(f'{g:.2f}' for g in sorted(raced.values(), reverse=True))} "
                   "GFLOP/s)")
    if base is not None and not base.get("ok"):
        against = "; the untuned default failed to verify"
    elif base is not None and base["config"] == best["config"]:
        against = "; the untuned default (measured first) stays the best"
    elif base is not None and base.get("key") in raced:
        against = (f"; {best['gflops'] / raced[base['key']]:.2f}x the untuned default "
                   f"({raced[base['key']]:.2f} GFLOP/s, timed in turn with it)")
    elif base is not None and base.get("gflops"):
        against = (f"; {best['gflops'] / base['gflops']:.2f}x the untuned default "
                   f"({base['gflops']:.2f} GFLOP/s, measured first)")
    return f"✓ {head}; best verified: {best['gflops']:.2f} GFLOP/s with {cfg}{against}{settled}"


def _untuned_default(state: dict) -> dict:
    """The config a compile gives without knob choices: what the tune's speedup is against."""
    from app.services.knobs import space_for
    from uol_core import parse
    from uol_core.odl.shapes import bind_sizes

    bound = bind_sizes(parse(state["odl"]), state["sizes"])
    return dict(space_for(state["odl"], state["backend"], state["target"],
                          tuple(sorted(bound.items()))).default)


@callback(Output("tune-status", "children"), Output("tune-plot", "figure"),
          Output("tune-best", "data"), Output("tune-apply", "disabled"),
          Input("tune-button", "n_clicks"),
          State("studio-state", "data"), State("tune-budget", "value"),
          State("odl-editor", "value"), State("sizes-input", "value"),
          State("backend-select", "value"), State("target-select", "value"),
          background=True,
          running=[(Output("tune-button", "disabled"), True, False),
                   (Output("tune-cancel", "disabled"), False, True)],
          progress=[Output("tune-progress", "value"), Output("tune-progress", "max"),
                    Output("tune-status", "children"), Output("tune-plot", "figure"),
                    Output("tune-job", "data")],
          cancel=[Input("tune-cancel", "n_clicks")],
          prevent_initial_call=True)
def tune_kernel(set_progress, _clicks, state, budget_text, odl=None, sizes_text=None,
                backend=None, target=None):
    """Measure up to `budget` configs of the page's inputs (`as_shown`), updating the progress
    bar and best-so-far plot live. The tune is a job with an id (app.services.tune_jobs): the
    page keeps the id, and a reloaded page reattaches to the job by it."""
    from app.services import tune_jobs
    from app.services.job_queue import client_id, only_one
    from app.services.system import activity
    from app.services.tune_runs import TuneStopped

    state = as_shown(state, odl, sizes_text, backend, target)

    budget, problem = budget_problem(budget_text)
    if problem:
        return problem, no_update, None, True
    if not state or not state.get("ok"):
        return "Compile a kernel first.", empty_figure("nothing tuned"), None, True
    trail: list[dict] = []
    client = client_id()
    job = tune_jobs.start(client, state, budget)
    set_progress(("0", str(budget), f"0/{budget} measured", tune_figure(trail), {"id": job}))
    with activity(f"tune {state['op']}"):
        try:
            with only_one(client, "tune"):
                best = _tune(state, budget, trail, set_progress, client, job)
        except TuneStopped:
            text = f"■ stopped at the user's request after {len(trail)} measured"
            tune_jobs.finish(job, text, trail, None)
            return text, tune_figure(trail), None, True
        except Exception as exc:  # shown in the page; the server keeps serving
            text = f"✗ tuning failed after {len(trail)} measured: {type(exc).__name__}: {exc}"
            tune_jobs.finish(job, text, trail, None)
            return text, tune_figure(trail), None, True
    fig = tune_figure(trail)
    if not best:
        tune_jobs.finish(job, tune_summary(trail, budget, None), trail, None)
        return tune_summary(trail, budget, None), fig, None, True
    # what Apply loads: only for the op, backend, target and sizes it was measured with
    tuned = {"op": state["op"], "backend": state["backend"], "target": state["target"],
             "sizes": state["sizes"], "config": best["config"], "gflops": best["gflops"]}
    tune_jobs.finish(job, tune_summary(trail, budget, best), trail, tuned)
    return tune_summary(trail, budget, best), fig, tuned, False


def progress_line(trail: list[dict], i: int, total: int) -> str:
    """'3/6 measured, 3 verified, best 12.34 GFLOP/s': a running tune's status line."""
    top = max((t.get("gflops") or 0 for t in trail), default=0)
    verified = sum(1 for t in trail if t.get("ok"))
    untimed = sum(1 for t in trail if t.get("untimed"))
    if untimed and not top:
        from uol_core.runtime.untimed import untimed_progress

        return untimed_progress(i, total, untimed)
    return f"{i}/{total} measured, {verified} verified, best {top:.2f} GFLOP/s"


def _tune(state: dict, budget: int, trail: list, set_progress, client: str,
          job: str) -> dict | None:
    """Backends the worker measures (C): the ACG tuner (model top-k, then local search; every
    row in the tuning DB). Others (Triton): the same search over queued Runs. Each measurement
    is reported to the page and to the job's record; a stop asked for there ends the tune."""
    from app.services import tune_jobs
    from app.services.tune_runs import TuneStopped

    best: dict | None = None

    def report(i: int, total: int) -> None:
        line = progress_line(trail, i, total)
        tune_jobs.progress(job, i, line, trail)
        set_progress((str(i), str(total), line, tune_figure(trail), {"id": job}))
        if tune_jobs.stop_requested(job):
            raise TuneStopped

    from uol_core.backends import get_backend

    if getattr(get_backend(state["backend"], state["target"]), "worker_jobs", False):
        from app.services.runner import QueuedWorker
        from uol_core import parse
        from uol_core.acg.session import open_session
        from uol_core.odl.shapes import bind_sizes

        op = parse(state["odl"])
        session = open_session(op, bind_sizes(op, state["sizes"]), state["target"],
                               worker=QueuedWorker(client, target=state["target"]))
        try:
            # the untuned default is measured first: the speedup is against a measured baseline
            found = session.put_first(_untuned_default(state))

            def on_trial(trial, n: int) -> None:
                trail.append({"i": n, "config": trial.config.to_dict(), "key": trial.config.key(),
                              "gflops": trial.gflops or 0.0, "ok": bool(trial.gflops),
                              "baseline": n == 1 and found})
                report(n, budget)

            result = session.tune(budget, None, top=4, patience=4, progress=on_trial)
        finally:
            session.close()
        if result.best is not None:
            best = {"config": result.best.to_dict(), "gflops": result.best_gflops,
                    "raced": {c["config"]: c["race_gflops"] for c in result.confirmation
                              if c.get("status") == "ok"}}
        return best
    from app.services.runner import tune_measurements

    def on_step(i: int, total: int, steps: list, top: dict | None) -> None:
        step = steps[-1]
        trail.append({"i": i, "config": step["config"], "gflops": step.get("gflops") or 0.0,
                      "ok": bool(step.get("ok") and step.get("median_s")),
                      # verified where nothing can time it (Triton without a GPU)
                      "untimed": bool(step.get("ok") and not step.get("median_s"))})
        report(i, total)

    out = tune_measurements(state["odl"], state["backend"], state["target"], state["sizes"],
                            budget, on_step, state["config"], client)
    top = out["best"]
    return {"config": top["config"], "gflops": top.get("gflops") or 0.0} if top else None
