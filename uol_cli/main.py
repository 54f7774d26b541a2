"""Entry point of the `uol` command: one sub-command group per service."""

from __future__ import annotations

import typer

from uol_cli import odl_cmd, ops_cmd

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


def main() -> None:
    """Run the `uol` command line."""
    app()


if __name__ == "__main__":
    main()
