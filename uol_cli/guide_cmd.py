"""`uol guide`: the optimisation guide (every HFL target x every operator family) as a table,
JSON or an offline HTML page."""

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
    measure: Annotated[bool, typer.Option("--measure", help="build, verify and time the host's "
                                          "cases here (minutes)")] = False,
    studio_url: Annotated[str, typer.Option("--studio-url", help="prefix of the Studio links in "
                                            "HTML (e.g. http://127.0.0.1:8050)")] = "",
) -> None:
    """Generate the optimisation guide from the ACG and the HFL (cached after the first run)."""
    from rich.progress import Progress

    from uol_core.guide.families import family as family_named
    from uol_core.guide.generate import generate, measure_host_cases, shipped_targets

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    try:
        fams = [family_named(name) for name in family] if family else None
    except KeyError as err:
        raise UserError(err.args[0]) from None
    targets = list(target) if target else shipped_targets() + (["host"] if host else [])
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("building the guide", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        guide = generate(targets, fams, progress=progress)
        if measure:
            guide = measure_host_cases(guide, progress=progress)
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
    lines.append(f"{len(guide.cases)} cases; times model-predicted unless measured here")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add `uol guide` to the top-level app."""
    app.command("guide")(friendly_errors(guide_cmd))
