"""`uol train-demo`: train a model with torch modules and with UOL-backed ones, compare.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from uol_cli.common import UserError, friendly_errors, print_json

console = Console()


def register(app: typer.Typer) -> None:
    """Add the `train-demo` command to the top-level app."""
    app.command("train-demo")(train_demo)


@friendly_errors
def train_demo(
    backend: Annotated[str, typer.Option(help="auto | c | reference | triton")] = "auto",
    steps: Annotated[int, typer.Option(min=1, max=100_000, help="optimizer steps")] = 200,
    optimizer: Annotated[str, typer.Option(help="what updates the UOL model: uol (one generated "
                                                "kernel) | torch (torch.optim.SGD)")] = "uol",
    ddp: Annotated[bool, typer.Option(help="also train on 2 gloo processes (DDP)")] = False,
    compression: Annotated[str, typer.Option(help="DDP gradient codec from HCF: none, fp16, "
                                                  "int8, topk, powersgd")] = "int8",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Train an MLP on scikit-learn's digits twice (torch, UOL kernels), in lockstep.

    Both start from the same weights and see the same batches, one step of each in turn;
    reports both loss curves' agreement and the step times."""
    from uol_cli.training_demo import OPTIMIZERS, run_ddp, run_demo
    from uol_core.runtime.dispatch import BACKENDS

    if backend not in BACKENDS:
        raise UserError(f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer '{optimizer}'; choose one of {', '.join(OPTIMIZERS)}")
    with Progress(console=console, transient=True, disable=as_json) as bar:
        task = bar.add_task("training (torch and UOL, in lockstep)", total=steps)
        result = run_demo(steps, backend, progress=lambda _: bar.advance(task),
                          optimizer=optimizer)
    if ddp:
        from hcf_sim.runtime.compression import ddp_hook

        hook = None if compression == "none" else ddp_hook
        result["ddp"] = {"compression": compression,
                         "ranks": run_ddp(max(steps // 4, 10), 2, hook, compression)}
    if as_json:
        print_json(result)
        return
    table = Table("run", "final loss", "accuracy", "median step (ms)")
    for key in ("torch", "uol"):
        run = result[key]
        table.add_row(run["backend"], f"{run['losses'][-1]:.5f}", f"{run['accuracy']:.4f}",
                      f"{run['median_step_ms']:.2f}")
    console.print(table)
    console.print(f"UOL modules: {', '.join(result['uol']['swapped'])}")
    console.print(f"final loss gap {result['final_loss_relative_gap']:.2e} (relative); "
                  f"speed-up vs torch eager {result['speedup_vs_torch_eager']:.2f}x")
    for rank in result.get("ddp", {}).get("ranks", []):
        console.print(f"DDP rank {rank['rank']} ({compression}): final loss "
                      f"{rank['losses'][-1]:.4f}, accuracy {rank['accuracy']:.4f}")
