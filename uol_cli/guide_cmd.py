"""`uol guide`: the optimisation guide (every HFL target x every operator family) as a table,
JSON or an offline HTML page.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from uol_cli.common import UserError, friendly_errors, print_json

FORMATS = ("table", "json", "html")


def guide_cmd(
    fmt: Annotated[str, typer.Option("--format", help="table, json or html")] = "table",
    output: Annotated[str | None, typer.Option("-o", "--output", help="write to this file")]
    = None,
    target: Annotated[list[str] | None, typer.Option("--target", help="only these targets "
                                                     "(repeatable; default: every target)")]
    = None,
    family: Annotated[list[str] | None, typer.Option("--family", help="only these operator "
                                                     "families (repeatable)")] = None,
    host: Annotated[bool, typer.Option("--host/--no-host", help="add the probed host as a "
                                       "target (its cases can be measured)")] = True,
    measure: Annotated[bool, typer.Option("--measure", help="build, verify and time cases: the "
                                          "host's here, and with --broker every target's on "
                                          "its live workers (seconds per case)")] = False,
    broker: Annotated[str | None, typer.Option("--broker", help="Redis URL of remote workers "
                                               "(`uol worker`): --measure times each target's "
                                               "cases on a live worker of it")] = None,
    secret_file: Annotated[Path | None, typer.Option("--secret-file", help="the workers' "
                                                     "shared secret (mode 600); default "
                                                     "$UOL_REMOTE_SECRET_FILE or "
                                                     "$UOL_REMOTE_SECRET")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="with --measure: at most "
                                              "this many cases per target (default: all)")]
    = None,
    studio_url: Annotated[str, typer.Option("--studio-url", help="prefix of the Studio links in "
                                            "HTML (e.g. http://127.0.0.1:8050)")] = "",
) -> None:
    """Generate the optimisation guide from the ACG and the HFL (cached after the first run)."""
    from rich.progress import Progress

    from uol_core.guide.families import family as family_named
    from uol_core.guide.generate import generate, measure_guide, shipped_targets
    from uol_core.guide.measure import host_only

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    if (broker or limit) and not measure:
        raise UserError("--broker and --limit say where and how much --measure times: add "
                        "--measure")
    try:
        fams = [family_named(name) for name in family] if family else None
    except KeyError as err:
        raise UserError(err.args[0]) from None
    targets = list(target) if target else shipped_targets() + (["host"] if host else [])
    measurer_for = _remote_measurers(broker, secret_file) if measure and broker else host_only()
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("building the guide", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        guide = generate(targets, fams, progress=progress)
        if measure:
            bar.update(task, completed=0, total=None, description="measuring")
            guide, reports = measure_guide(guide, measurer_for, limit, progress)
    if measure:
        _say_where(reports, bool(broker))
    if fmt == "json":
        import json

        text = json.dumps(guide.to_dict(), indent=1, default=str)
    elif fmt == "html":
        from profilers.guide_html import render_guide_html

        text = render_guide_html(guide, studio_url)
    else:
        text = _table(guide)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        print(f"wrote {len(guide.cases)} cases ({len(guide.targets)} targets) to {output}",
              file=sys.stderr)
    elif fmt == "json":
        print_json(guide.to_dict())
    else:
        print(text)


def _table(guide) -> str:
    """One line per case: target, family, config, bound, predicted (and measured) time."""
    lines = [f"{'target':20} {'family':20} {'bound':8} {'predicted':>12} {'measured':>12}  config"]
    for c in guide.cases:
        measured = f"{c.measured_s * 1e3:10.3f}ms" if c.measured_s else f"{'-':>12}"
        predicted = f"{c.predicted_s * 1e3:10.3f}ms" if c.predicted_s else f"{'-':>12}"
        cfg = ",".join(f"{k}={v}" for k, v in c.config.items())
        lines.append(f"{c.target:20} {c.family:20} {c.roofline.get('bound')!s:8} "
                     f"{predicted} {measured}  {cfg}")
    measured = sorted({c.measured_label for c in guide.cases if c.measured_s})
    lines.append(f"{len(guide.cases)} cases; times model-predicted unless measured"
                 + "".join(f"\n  {label}" for label in measured))
    return "\n".join(lines)


def _remote_measurers(broker: str, secret_file: Path | None):
    """Measurers on the broker's live workers (host without one: here), checked now."""
    from uol_remote.celery_app import check_broker_url
    from uol_remote.guide_measure import guide_measurers
    from uol_remote.signing import SecretError

    try:
        check_broker_url(broker)
        measurer_for, workers = guide_measurers(broker, secret_file)
    except (ValueError, SecretError) as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:  # redis unreachable: say where and how to fix it
        raise UserError(f"cannot reach the broker at {broker}: {exc} (start redis-server there "
                        "or open the ssh tunnel: docs/remote.md)") from None
    live = ", ".join(sorted({w["target"] for w in workers})) or "none"
    print(f"live workers on {broker}: {live}", file=sys.stderr)
    return measurer_for


def _say_where(reports, with_broker: bool) -> None:
    """One line per target: measured where, how many, what failed; the predicted ones."""
    predicted = [r.target for r in reports if not r.has_measurer]
    for r in reports:
        if not r.has_measurer:
            continue
        print(f"{r.target}: {r.measured} {r.where or 'measured'}"
              + (f", {len(r.failed)} not measured" if r.failed else "")
              + (f", {r.skipped} beyond --limit" if r.skipped else ""), file=sys.stderr)
        for why in r.failed[:3]:
            print(f"  {why}", file=sys.stderr)
    if predicted:
        why = "no live worker" if with_broker else "not this host; --broker measures on workers"
        print(f"model-predicted ({why}): {', '.join(predicted)}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add `uol guide` to the top-level app."""
    app.command("guide")(friendly_errors(guide_cmd))
