"""Entry point of the `uol` command: one sub-command group per service."""

from __future__ import annotations

import typer

from uol_cli import (
    debug_cmd,
    graph_cmd,
    guide_cmd,
    hcf_cmd,
    hw_cmd,
    kernel_cmd,
    odl_cmd,
    ops_cmd,
    profile_cmd,
    serve_cmd,
    train_cmd,
    worker_cmd,
)

app = typer.Typer(
    name="uol",
    help="UOL Studio: describe an operator in ODL, get verified kernels; simulate collectives; profile.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each command group lives in its own module; register it here with one line.
app.add_typer(odl_cmd.app, name="odl")
app.add_typer(ops_cmd.app, name="ops")
kernel_cmd.register(app)
app.add_typer(hcf_cmd.app, name="hcf")
app.add_typer(hw_cmd.app, name="hw")
debug_cmd.register(app)
guide_cmd.register(app)
profile_cmd.register(app)
serve_cmd.register(app)
train_cmd.register(app)
worker_cmd.register(app)
app.add_typer(graph_cmd.app, name="graph")


def main() -> None:
    """Run the `uol` command line."""
    app()


if __name__ == "__main__":
    main()
