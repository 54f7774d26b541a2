"""`uol profile | hotspots | report | compare`: the profilers' faces on the command line.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from uol_cli.common import UserError, friendly_errors, print_json, read_op
from uol_core.odl.shapes import bind_sizes, parse_shape_spec

FileArg = Annotated[str, typer.Argument(help="an .odl file, or a library operator name")]
ShapeOpt = Annotated[str, typer.Option("--shape", help="sizes, e.g. M=64,N=64,K=64")]
TargetOpt = Annotated[str, typer.Option("--target", help="HFL target name (default: host)")]
# What compiling an op the C backend cannot handle yet raises (UnsupportedOp, BuildError, ...).
COMPILER_ERRORS = (ValueError, RuntimeError, NotImplementedError)
ConfigOpt = Annotated[str | None, typer.Option("--config", help="k=v,... overrides or 'tuned'")]
# Above this slowdown from the timer reads, per-line shares of the counters are flagged.
SLOWDOWN_WARNING = 1.5


def register(app: typer.Typer) -> None:
    """Add the profiler commands to the top-level `uol` app."""
    app.command("profile", context_settings={"allow_extra_args": True,
                                              "ignore_unknown_options": True})(profile)
    app.command("hotspots")(hotspots)
    app.command("sanitize")(sanitize)
    app.command("report")(report)
    app.command("compare")(compare_runs)


@friendly_errors
def profile(ctx: typer.Context,
            stage: Annotated[str | None, typer.Option(
                "--stage", help="parse|classify|reference|solve|emit|compile|run|tune")] = None,
            op: Annotated[str | None, typer.Option("--op", help="operator for --stage")] = None,
            shape: Annotated[str, typer.Option("--shape")] = "",
            target: TargetOpt = "host", config: ConfigOpt = None,
            repeat: Annotated[int, typer.Option("--repeat", help="stage repetitions")] = 1,
            html: Annotated[Path | None, typer.Option("--html", help="pyinstrument HTML")] = None,
            speedscope: Annotated[Path | None, typer.Option(
                "--speedscope", help="speedscope JSON")] = None,
            json_out: Annotated[Path | None, typer.Option("--json", help="UOL flame tree")] = None,
            ) -> None:
    """Flame tree of a compiler stage (--stage S --op OP) or of a command: uol profile -- CMD..."""
    from profilers.flame import render_text
    from profilers.pyinstrument_source import profile_command, profile_stage
    from profilers.speedscope import write_speedscope

    argv = [a for a in ctx.args if a != "--"]
    if stage:
        if not op:
            raise UserError("--stage needs --op (an .odl file or library operator)")
        parsed, text, _ = read_op(op)  # the CLI reads files; the profilers take text or names
        sizes = bind_sizes(parsed, parse_shape_spec(shape)) if shape else {}
        prof = profile_stage(stage, text, sizes, target, config, repeat)
    elif argv:
        from uol_cli.main import app  # lazy: main imports this module

        def run(args: list[str]) -> object:
            return app(args, standalone_mode=False)
        prof = profile_command(run, argv)
        sys.stderr.write(prof.result["stdout"][-2000:])
    else:
        raise UserError("say what to profile: --stage S --op OP, or -- followed by a uol command")
    print(render_text(prof.tree))
    if html:
        prof.save_html(html)
        print(f"wrote {html}")
    if speedscope:
        write_speedscope(prof.tree, speedscope)
        print(f"wrote {speedscope} (open at https://www.speedscope.app)")
    if json_out:
        json_out.write_text(json.dumps(prof.tree.to_dict(), indent=1))
        print(f"wrote {json_out}")


@friendly_errors
def hotspots(file: FileArg, shape: ShapeOpt, target: TargetOpt = "host",
             config: ConfigOpt = None,
             reps: Annotated[int, typer.Option(
                 "--reps", help="kernel calls measured (cycle counters: at least 10)")] = 1,
             top: Annotated[int, typer.Option("--top", help="kernel lines shown")] = 15,
             source: Annotated[str, typer.Option(
                 "--source", help="auto (callgrind where valgrind can run the kernel, else "
                                  "cycle counters) | callgrind | counters")] = "auto",
             as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Per-line cost of the generated C kernel, mapped back to ODL lines: callgrind counts where
    valgrind can run the kernel, cycle counters from an instrumented build elsewhere (AVX-512)."""
    from profilers.callgrind import CallgrindUnavailable
    from profilers.hotspots import hotspots_for_op

    op, text, _ = read_op(file)
    sizes = bind_sizes(op, parse_shape_spec(shape))
    try:
        rep = hotspots_for_op(text, sizes, target, config, reps, source)
    except (CallgrindUnavailable, *COMPILER_ERRORS) as exc:
        raise UserError(str(exc)) from None
    if as_json:
        print_json(rep.to_dict())
        return
    event = rep.events[0]
    total = rep.total.get(event) or 1
    if rep.source == "counters":
        _print_counter_header(rep)
    else:
        print(f"{rep.op_name}: {rep.total.get('Ir', 0):,} instructions, "
              f"{rep.total.get('D1mr', 0):,} L1 data read misses ({reps} call(s))")
        print("source: callgrind (instruction counts, one thread)")
    print("\nper ODL line:")
    fused = {int(k): v for k, v in rep.meta.get("fused", {}).items()}
    for r in rep.odl_lines:
        also = f"  (with fused ODL line(s) {', '.join(map(str, fused[r.line]))})" \
            if r.line in fused else ""
        line = f"line {r.line:3}" if r.line else "        "
        print(f"  {r.costs[event] / total * 100:5.1f}%  {line}  {r.text.strip()}{also}")
    label = "timed regions" if rep.source == "counters" else "generated C lines"
    print(f"\nhottest {label} (of {len(rep.kernel_lines)}):")
    for r in sorted(rep.kernel_lines, key=lambda r: -r.costs[event])[:top]:
        calls = f"  [calls {', '.join(r.calls)}]" if r.calls else ""
        span = r.kernel_lines if rep.source == "counters" else []
        where = (f"C {r.line}-{span[-1]}" if len(span) > 1 else f"C {r.line}") if r.line else ""
        odl = f"(ODL {r.odl_line})" if r.odl_line else ""
        print(f"  {r.costs[event] / total * 100:5.1f}%  {where:>11} {odl:9} "
              f"{r.text.strip()[:70]}{calls}")


def _print_counter_header(rep) -> None:
    """What the cycle counters measured, why they (not callgrind) were used, and how much the
    timer reads disturbed the kernel."""
    meta, unit = rep.meta, rep.events[0]
    plain, ns = meta.get("plain_per_call"), meta.get("ns_per_tick")
    wall = f" = {plain * ns / 1000:,.1f} us" if plain and ns else ""
    print(f"{rep.op_name}: {plain or 0:,.0f} {unit} per call{wall} without the counters (one "
          f"thread, mean of {meta.get('reps')} calls after a warm-up call)")
    print(f"source: cycle counters (instrumented build; {meta.get('why', '')})")
    slowdown = meta.get("slowdown") or 1.0
    note = (": shares are approximate (larger sizes spread the reads thinner)"
            if slowdown > SLOWDOWN_WARNING else "")
    print(f"the timer reads ({meta.get('timer_overhead')} {unit} each, taken off) slowed the "
          f"kernel {slowdown:.1f}x{note}")


@friendly_errors
def sanitize(file: FileArg, shape: ShapeOpt, target: TargetOpt = "host", config: ConfigOpt = None,
             as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Run the generated C kernel under AddressSanitizer + UBSan; findings map to ODL lines.
    Exits 1 when something is found."""
    from profilers.sanitizer import sanitize_op

    op, text, _ = read_op(file)
    sizes = bind_sizes(op, parse_shape_spec(shape))
    try:
        rep = sanitize_op(text, sizes, target, config)
    except COMPILER_ERRORS as exc:
        raise UserError(str(exc)) from None
    if as_json:
        print_json(rep.to_dict())
    elif rep.clean:
        print(f"{rep.op_name}: clean (AddressSanitizer + UBSan found nothing)")
    else:
        for f in rep.findings:
            print(f"{f.kind}: {f.message}\n  C line {f.kernel_line}: {f.kernel_text}\n"
                  f"  ODL line {f.odl_line}")
    if not rep.clean:
        raise typer.Exit(1)


@friendly_errors
def report(file: FileArg, shape: ShapeOpt, target: TargetOpt = "host", config: ConfigOpt = None,
           fmt: Annotated[str | None, typer.Option(
               "--format", help="html|pdf|md|json (default: from -o)")] = None,
           out: Annotated[Path, typer.Option("-o", "--output", help="output file")] = Path(
               "report.html"),
           repeats: Annotated[int, typer.Option("--repeats")] = 7,
           no_hotspots: Annotated[bool, typer.Option("--no-hotspots")] = False,
           against: Annotated[list[str] | None, typer.Option(
               "--against", help="more targets on the roofline")] = None) -> None:
    """Optimisation report of an operator: config, explanation, timing, roofline, flame, hotspots."""
    from profilers.pdf import PdfUnavailable
    from profilers.report import operator_report
    from profilers.report_render import write

    op, text, _ = read_op(file)
    sizes = bind_sizes(op, parse_shape_spec(shape))
    try:
        data = operator_report(text, sizes, target, config, repeats=repeats,
                               hotspots=not no_hotspots, compare_targets=against or ())
    except COMPILER_ERRORS as exc:
        raise UserError(str(exc)) from None
    try:
        path = write(data, out, fmt)
    except PdfUnavailable as exc:
        raise UserError(str(exc)) from None
    print(f"wrote {path}: {data['comparison']['verdict']}")


@friendly_errors
def compare_runs(run_a: Annotated[str, typer.Argument(help="baseline: run JSON or tuning-DB id")],
                 run_b: Annotated[str, typer.Argument(help="candidate: run JSON or DB id")],
                 db: Annotated[Path | None, typer.Option("--db", help="tuning database")] = None,
                 as_json: Annotated[bool, typer.Option("--json")] = False,
                 html: Annotated[Path | None, typer.Option("--html")] = None) -> None:
    """Diff two runs: time, GFLOP/s, config change and per-ODL-line hotspot shares."""
    from profilers.compare import compare, render_text
    from profilers.runs import load_run

    try:
        a, b = load_run(run_a, db), load_run(run_b, db)
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
    diff = compare(a, b)
    if as_json:
        print_json(diff.to_dict())
    else:
        print(render_text(diff))
    if html:
        import plotly.io as pio

        from profilers.figures import comparison_bars
        html.write_text(pio.to_html(comparison_bars(diff), include_plotlyjs=True))
        print(f"wrote {html}")
