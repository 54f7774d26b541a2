"""`uol hw ...`: list and show hardware targets, probe the host, place an operator on a roofline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from uol_cli.common import print_json, read_op, user_errors
from uol_core.hfl import HflError, Target, list_targets, load_target
from uol_core.hfl.probe import cached_host, probe_host
from uol_core.hfl.roofline import peak_key
from uol_core.hfl.roofline import roofline as roofline_of
from uol_core.hfl.sysinfo import isa_table
from uol_core.odl.shapes import bind_sizes, parse_shape_spec

app = typer.Typer(help="Hardware targets (HFL): list, show, probe the host, roofline.",
                  no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


_errors = user_errors(HflError, ValueError)


def _load(name: str, quiet: bool = False) -> Target:
    """A target by name; the host is probed (with progress) when not cached yet."""
    if name == "host":
        return _probe(quick=True, refresh=False, quiet=quiet)
    return load_target(name)


def _probe(quick: bool, refresh: bool, quiet: bool = False) -> Target:
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=quiet) as bar:
        task = bar.add_task("probing the host", total=1.0)

        def report(step: str, fraction: float) -> None:
            bar.update(task, description=step, completed=fraction)

        return probe_host(quick=quick, refresh=refresh, progress=report)


@app.command("list")
@_errors
def list_cmd(as_json: JsonOpt = False) -> None:
    """List every target with its kind, fp32 peak and memory bandwidth."""
    rows = []
    for name in list_targets():
        target = cached_host() if name == "host" else load_target(name)
        if target is None:
            rows.append({"name": "host", "kind": "cpu", "probed": False,
                         "description": "this machine (measured by `uol hw probe` on first use)"})
            continue
        rows.append({"name": name, "kind": target.kind, "description": target.description,
                     "cores": target.cores, "peak_gflops": target.peak_gflops,
                     "mem_bandwidth_gbps": target.mem_bandwidth_gbps,
                     **({"probed": True} if name == "host" else {})})
    if as_json:
        print_json(rows)
        return
    table = Table()
    # The name and numbers keep their width on a narrow terminal; the description gives way.
    for header, width in (("name", 20), ("kind", 4), ("cores", 5), ("fp32 GF/s", 9),
                          ("GB/s", 6)):
        table.add_column(header, no_wrap=True, min_width=width)
    table.add_column("description", overflow="ellipsis", max_width=40)
    for row in rows:
        peak = row.get("peak_gflops", {}).get("fp32")
        table.add_row(row["name"], row["kind"], str(row.get("cores", "")),
                      f"{peak:,.0f}" if peak else "", f"{row.get('mem_bandwidth_gbps') or ''}",
                      _short(row["description"]))
    console.print(table)


@app.command("show")
@_errors
def show(name: Annotated[str, typer.Argument(help="target name (see `uol hw list`)")],
         as_json: JsonOpt = False) -> None:
    """Show every field of a target with its value and provenance."""
    target = _load(name, quiet=as_json)
    if as_json:
        print_json(target.to_dict())
        return
    console.print(f"[bold]{target.name}[/bold] ({target.kind}) {target.description}")
    table = Table("field", "value", "provenance", "source")
    for field, value, prov in target.facts():
        table.add_row(field, str(value), prov.kind, prov.source)
    console.print(table)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@app.command("probe")
@_errors
def probe(as_json: JsonOpt = False,
          quick: Annotated[bool, typer.Option("--quick", help="smaller, faster runs")] = False,
          refresh: Annotated[bool, typer.Option("--refresh", help="ignore the cache")] = False
          ) -> None:
    """Measure this machine (FMA peak, STREAM triad, bandwidth curve); cached per machine."""
    target = _probe(quick=quick, refresh=refresh, quiet=as_json)
    m = target.measurements
    summary = {
        "peak_gflops_fp32": target.peak_gflops["fp32"], "peak_gflops_fp64": target.peak_gflops["fp64"],
        "stream_gbps": target.mem_bandwidth_gbps, "cores": target.cores, "isa": target.isa,
        "caches": m.get("caches", {}), "clock_ghz": target.clock_ghz,
        "vector_bits": target.vector_bits, "fma_units": target.fma_units,
        "fma_latency_cycles": target.fma_latency_cycles, "fma_gflops": m.get("fma_gflops"),
        "cache_bandwidth_gbps": m.get("cache_bandwidth_gbps"),
        "bandwidth_curve": m.get("bandwidth_curve"), "gpu": m.get("gpu", []),
        "stream_cpu_utilization": m.get("stream_cpu_utilization"), "quick": m.get("quick"),
        "model": m.get("model"), "measured_at": m.get("measured_at"),
        # what was measured before the checks, what the OS says, and each check's verdict
        "raw": m.get("raw"), "os_clock": m.get("os_clock"),
        "stream_runs_gbps": m.get("stream_runs_gbps"), "stream_agreed": m.get("stream_agreed"),
        "cross_checks": m.get("cross_checks", []),
        "rejected": [c["fact"] for c in m.get("cross_checks", []) if c["verdict"] == "rejected"],
        "provenance": {f: str(target.provenance(f))
                       for f in ("clock_ghz", "fma_units", "fma_latency_cycles",
                                 "mem_bandwidth_gbps")},
    }
    if as_json:
        print_json(summary)
        return
    _print_probe(target, summary)


def _print_probe(target: Target, s: dict) -> None:
    console.print(f"[bold]host[/bold]: {s['model']}, {s['cores']} cores, clock {s['clock_ghz']} GHz"
                  f" ({'quick' if s['quick'] else 'full'} probe, {s['measured_at']})")
    console.print(f"  isa: {' '.join(s['isa'])}")
    console.print("  caches: " + ", ".join(f"{k} {v['bytes'] >> 10} KiB"
                                           for k, v in s["caches"].items()))
    console.print(f"  vector {s['vector_bits']} bits, {s['fma_units']} FMA units, FMA latency "
                  f"{s['fma_latency_cycles']} cycles")
    peaks = Table("threads", "fp32 GFLOP/s", "fp64 GFLOP/s", title="FMA peak")
    for n, fp32 in s["fma_gflops"]["fp32"].items():
        peaks.add_row(n, f"{fp32:.1f}", f"{s['fma_gflops']['fp64'][n]:.1f}")
    console.print(peaks)
    runs = ", ".join(f"{r:g}" for r in s["stream_runs_gbps"] or [])
    console.print(f"  STREAM triad: {s['stream_gbps']:.1f} GB/s ({target.cores} threads; "
                  f"runs {runs} GB/s)")
    util = target.measurements.get("stream_cpu_utilization", 1.0)
    if util < isa_table()["plausible"]["bandwidth_min_cpu_utilization"]:
        # wall-timed: other processes held our cores, the figure is too low
        console.print(f"  [yellow]warning: the probe got {100 * util:.0f}% of {target.cores} cores "
                      "during STREAM (a busy machine); run `uol hw probe --refresh` when idle"
                      "[/yellow]")
    console.print("  bandwidth by level (1 thread): " + ", ".join(
        f"{k} {v:.1f} GB/s" for k, v in s["cache_bandwidth_gbps"].items()))
    top = max(gbps for _, gbps in s["bandwidth_curve"])
    curve = Table("working set", "GB/s", "", title="read bandwidth vs working set (1 thread)")
    for size, gbps in s["bandwidth_curve"]:
        curve.add_row(f"{size >> 10} KiB", f"{gbps:.1f}", "#" * max(1, round(40 * gbps / top)))
    console.print(curve)
    _print_cross_checks(s)
    for gpu in s["gpu"]:
        bad = [c for c in gpu["checks"] if not c["ok"]]
        console.print(f"  GPU {gpu['device']}: record {gpu['target'] or '(none matches)'}, "
                      f"{len(gpu['checks']) - len(bad)}/{len(gpu['checks'])} fields agree"
                      + "".join(f"; {c['field']} record {c['record']} device {c['device']}"
                                for c in bad))


VERDICT_STYLE = {"ok": "green", "warning": "yellow", "rejected": "red"}


def _print_cross_checks(s: dict) -> None:
    """Each measured fact against the OS and the ISA table: what was kept, what was rejected."""
    raw, os_clock = s.get("raw") or {}, s.get("os_clock") or {}
    if raw:
        readings = ", ".join(f"{k} {v:g} GHz" for k, v in os_clock.get("readings_ghz", {}).items())
        console.print(f"  raw: add-chain clock {raw['clock_ghz']:g} GHz, FMA latency "
                      f"{raw['fma_latency_ns']:g} ns; OS: {readings or 'no frequency reported'}")
    checks = Table("fact", "verdict", "detail", title="cross-checks")
    for check in s.get("cross_checks", []):
        style = VERDICT_STYLE.get(check["verdict"], "")
        checks.add_row(check["fact"], f"[{style}]{check['verdict']}[/{style}]", check["detail"])
    console.print(checks)


@app.command("roofline")
@_errors
def roofline(file: Annotated[str, typer.Argument(help="an .odl file, or a library operator name")],
             shape: Annotated[str, typer.Option("--shape", help="sizes, e.g. M=64,N=32,K=16")],
             target: Annotated[str, typer.Option("--target", help="target name")],
             dtype: Annotated[str | None, typer.Option(
                 "--dtype", help="peak to use (default: the units the op runs on: bf16 for a "
                                 "bf16 GEMM where the target has them, else fp32 or fp64)")] = None,
             seconds: Annotated[float | None, typer.Option(
                 "--seconds", help="measured time, to report the fraction achieved")] = None,
             as_json: JsonOpt = False) -> None:
    """Attainable GFLOP/s, bound and ridge point of an operator on a target."""
    from uol_core.odl.cost import op_cost, peak_dtype  # the only command that needs the cost model

    op, _, _ = read_op(file)
    sizes = bind_sizes(op, parse_shape_spec(shape))
    cost = op_cost(op, sizes)
    hw = _load(target, quiet=as_json)
    dtype = dtype or peak_key(hw, peak_dtype(op))
    result = roofline_of(cost.flops, cost.bytes, hw, dtype=dtype, seconds=seconds)
    if as_json:
        print_json({"op": op.name, "sizes": sizes, **result.to_dict()})
        return
    console.print(f"[bold]{op.name}[/bold] {sizes} on [bold]{hw.name}[/bold] ({dtype})")
    console.print(f"  work {cost.flops:,} FLOP, traffic {cost.bytes:,} B, intensity "
                  f"{result.intensity:.3g} FLOP/B (ridge {result.ridge_intensity:.3g})")
    console.print(f"  peak {result.peak_gflops:,.1f} GFLOP/s ({hw.provenance(f'peak_gflops.{dtype}').kind}),"
                  f" bandwidth {result.bandwidth_gbps:,.1f} GB/s "
                  f"({hw.provenance('mem_bandwidth_gbps').kind})")
    console.print(f"  [bold]{result.bound}-bound[/bold]: attainable {result.attainable_gflops:,.1f} "
                  f"GFLOP/s, at least {result.min_seconds * 1e6:.3g} us")
    if result.fraction_of_roofline is not None:
        console.print(f"  measured {seconds:.3g} s: {result.achieved_gflops:,.2f} GFLOP/s, "
                      f"{100 * result.fraction_of_roofline:.1f}% of the roofline")
