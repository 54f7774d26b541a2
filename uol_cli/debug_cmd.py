"""`uol debug`: trace a Triton kernel (an ODL op's, or a user's own) under the interpreter.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json

import typer

from uol_cli.common import UserError, friendly_errors, read_op


def _program(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--program must be integers like 0 or 0,1 (got '{text}')") from None


def _report(trace, program, as_json: bool, save: str | None) -> int:
    from uol_core.debug import oob_findings, program_events, save_trace, summary

    if save:
        save_trace(trace, save)
    data = summary(trace)
    if program is not None:
        data["program"] = {"id": list(program), "events": program_events(trace, program)}
    findings = oob_findings(trace)
    if as_json:
        print(json.dumps(data, indent=1, default=str))
    else:
        for lc in data["launches"]:
            print(f"{lc['kernel']}: grid {lc['grid']}, {lc['recorded']} program(s) recorded"
                  + (" (sampled)" if lc["sampled"] else ""))
        print(f"{data['events']} loads/stores, {data['bytes_loaded']} B loaded, "
              f"{data['bytes_stored']} B stored (interpreted, no timing)")
        for row in data["mask_ratios"]:
            print(f"  line {row['line']:4d} {row['kind']:5s} {row['tensor'] or '?':8s} "
                  f"masked {row['masked_ratio']:6.1%}  {row['source']}")
        for ev in data.get("program", {}).get("events", []):
            print(f"  program {program}: {ev['kind']} {ev['tensor']} line {ev['line']} "
                  f"active {ev['active']}/{ev['lanes']} offsets {ev['offset_range']}")
        for note in data["notes"]:
            print(f"note: {note}")
        for f in findings:
            print(f"error: {f.describe()}")
        if not findings:
            print("no out-of-bounds access found")
    return 1 if findings else 0


def _parse_args(items: list[str]) -> tuple[list, dict]:
    """Kernel arguments: `x=randn:128`, `n=128`, `BLOCK=32` (tensors: randn/zeros/arange:shape)."""
    import torch

    args, kwargs = [], {}
    for item in items:
        name, _, value = item.partition("=")
        if ":" in value:
            kind, _, shape = value.partition(":")
            dims = tuple(int(x) for x in shape.split("x"))
            makers = {"randn": torch.randn, "zeros": torch.zeros, "ones": torch.ones,
                      "arange": lambda *s: torch.arange(float(s[0]))}
            if kind not in makers:
                raise UserError(f"unknown tensor maker '{kind}': use randn, zeros, ones, arange")
            val = makers[kind](*dims)
        else:
            val = float(value) if "." in value else int(value)
        if value == "":
            raise UserError(f"argument '{item}' must be NAME=VALUE")
        kwargs[name] = val
    return args, kwargs


def register(app: typer.Typer) -> None:
    """Add the top-level `debug` command to the `uol` app."""

    @app.command("debug")
    @friendly_errors
    def debug(
        op_file: str | None = typer.Argument(None, help="ODL file or library op name"),
        shape: str = typer.Option("", "--shape", help="sizes, e.g. M=16,N=16,K=8"),
        program: str | None = typer.Option(None, "--program", help="program id, e.g. 0,1"),
        kernel: str | None = typer.Option(None, "--kernel", help="module:function of a "
                                             "user's @triton.jit kernel"),
        grid: str = typer.Option("1", "--grid", help="grid for --kernel, e.g. 4 or 2,2"),
        arg: list[str] = typer.Option([], "--arg", help="kernel argument NAME=VALUE; tensors "
                                      "as randn:8x8, zeros:16, arange:10"),
        max_programs: int = typer.Option(64, "--max-programs", help="programs recorded per launch"),
        save: str | None = typer.Option(None, "--save", help="write the trace (.json + .npz)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """Record every load/store per program under the Triton interpreter; report OOB accesses."""
        from uol_core.debug import load_kernel, trace_kernel, trace_op
        from uol_core.odl.shapes import parse_shape_spec

        pid = _program(program)
        if kernel:
            fn = load_kernel(kernel)
            args, kwargs = _parse_args(arg)
            g = tuple(int(x) for x in grid.split(","))
            trace = trace_kernel(fn, g, *args, max_programs=max_programs, **kwargs)
        else:
            if not op_file:
                raise UserError("give an ODL file (or library op) or --kernel module:function")
            op, _, _ = read_op(op_file)
            trace, _ = trace_op(op, sizes=parse_shape_spec(shape), max_programs=max_programs)
        raise typer.Exit(_report(trace, pid, as_json, save))
