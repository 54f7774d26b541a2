"""`uol ops ...`: browse the operator library."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from uol_cli.common import UserError, friendly_errors, print_json
from uol_core.odl.patterns import classify
from uol_core.ops import list_ops, load_op, op_text

app = typer.Typer(help="Browse the operator library.", no_args_is_help=True)
console = Console()


def _summary(name: str) -> dict:
    op = load_op(name)
    first = op_text(name).splitlines()[0]
    return {"name": name, "pattern": classify(op).kind, "statements": len(op.stmts),
            "inputs": [d.name for d in op.inputs], "outputs": [d.name for d in op.outputs],
            "description": first.lstrip("# ").strip() if first.startswith("#") else ""}


@app.command("list")
@friendly_errors
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the library's operators with their pattern."""
    rows = [_summary(name) for name in list_ops()]
    if as_json:
        print_json(rows)
        return
    table = Table("name", "pattern", "stmts", "description")
    for row in rows:
        table.add_row(row["name"], row["pattern"], str(row["statements"]), row["description"])
    console.print(table)


@app.command("show")
@friendly_errors
def show(name: Annotated[str, typer.Argument(help="library operator name")]) -> None:
    """Print a library operator's ODL source."""
    if name not in list_ops():
        raise UserError(f"no library operator '{name}'; see `uol ops list`")
    console.print(Syntax(op_text(name), "python", theme="ansi_dark", line_numbers=True))
