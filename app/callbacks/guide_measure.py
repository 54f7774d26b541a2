"""The Guide page's Measure button: the loaded cases are built, verified and timed where they
can run (a live worker of their target when the IDE runs with `uol serve --broker`, this
machine for `host` otherwise), up to a number of cases per target, in a background job with a
progress bar; every other case keeps its model prediction, and says why.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback

DEFAULT_LIMIT = 3
MAX_LIMIT = 50


def measuring_where() -> str:
    """What the Measure button will do, from the broker and its live workers now."""
    from app.services import remote

    url = remote.broker()
    if url is None:
        return ("Measure times this host's cases here; other targets' cases stay model-"
                "predicted (start the IDE with `uol serve --broker ...` to measure them on "
                "live workers).")
    live = sorted({w["target"] for w in remote.live_workers()})
    return (f"Broker {url}: live workers of {', '.join(live) if live else 'no target yet'}. "
            "Measure times each target's cases on a live worker of it (host's here without "
            "one); the others stay model-predicted.")


def not_measured(case: dict) -> str:
    """Why a case has no measured time (its own note when a measurement was tried)."""
    from app.services import remote

    tried = [part for part in (case.get("note") or "").split("; ")
             if part.startswith("not measured")]
    if tried:
        return "; ".join(tried)
    target = case["target"]
    if target == "host" or remote.workers_for(target):
        return "not measured yet: Measure cases times it"
    if remote.broker() is None:
        return ("not measured: this target is not this host (with `uol serve --broker ...` a "
                "live worker of it measures it)")
    return f"not measured: no live worker of {target} on the broker; model-predicted only"


def _limit(raw) -> int:
    try:
        return min(MAX_LIMIT, max(1, int(raw)))
    except (TypeError, ValueError):
        return DEFAULT_LIMIT


@callback(Output("guide-measured", "data"), Output("guide-measure-status", "children"),
          Input("guide-measure-button", "n_clicks"),
          State("guide-cases", "data"), State("guide-measure-limit", "value"),
          State("guide-measured", "data"),
          background=True, prevent_initial_call=True,
          running=[(Output("guide-measure-button", "disabled"), True, False)],
          progress=[Output("guide-measure-progress", "value"),
                    Output("guide-measure-progress", "max"),
                    Output("guide-measure-status", "children")])
def measure_loaded_cases(set_progress, _clicks, cases, limit, measured):
    """Measure up to `limit` loaded cases per target; the page merges the measured fields."""
    from app.services import remote
    from uol_core.guide.cases import GuideCase
    from uol_core.guide.measure import host_only, measure_cases

    if not cases:
        return measured or {}, "Choose targets first: there are no cases to measure."
    objs = [GuideCase(**c) for c in cases]
    try:
        if remote.broker() is None:
            measurer_for = host_only()
        else:
            from uol_remote.guide_measure import guide_measurers

            measurer_for, _ = guide_measurers(remote.broker())
    except Exception as exc:  # the broker went away, the secret is unreadable: say so
        return measured or {}, f"✗ cannot measure on the workers: {type(exc).__name__}: {exc}"

    def progress(done: int, total: int, what: str) -> None:
        set_progress((str(done), str(max(total, 1)), f"{done}/{total}: {what}"))

    reports = measure_cases(objs, measurer_for, _limit(limit), progress)
    out = dict(measured or {})
    for case in objs:
        if case.measured_s or "not measured" in case.note:
            out[case.id] = {"measured_s": case.measured_s, "measured_label": case.measured_label,
                            "note": case.note}
    return out, _summary(reports)


def _summary(reports) -> str:
    """'✓ host: 3 measured on worker NODE (...); ...; model-predicted (...): a, b'."""
    parts = []
    for r in (r for r in reports if r.has_measurer):
        failed = f", {len(r.failed)} not measured ({r.failed[0]})" if r.failed else ""
        parts.append(f"{r.target}: {r.measured} {r.where or 'measured'}{failed}")
    predicted = [r.target for r in reports if not r.has_measurer]
    if predicted:
        parts.append(f"model-predicted (no live worker; not this host): {', '.join(predicted)}")
    ok = any(r.measured for r in reports)
    return ("✓ " if ok else "✗ ") + "; ".join(parts or ["nothing to measure"])
