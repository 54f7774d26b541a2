"""`uol odl ...`: check, show and evaluate ODL operators."""

from __future__ import annotations

from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from uol_cli.common import UserError, friendly_errors, print_json, read_op
from uol_core.odl.cost import op_cost
from uol_core.odl.grad import derive_grad
from uol_core.odl.ir import Op
from uol_core.odl.patterns import classify
from uol_core.odl.printer import format_decl, format_op
from uol_core.odl.shapes import bind_sizes, parse_shape_spec
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all

app = typer.Typer(help="Check, show, evaluate and differentiate ODL operators.", no_args_is_help=True)
console = Console()

FileArg = Annotated[str, typer.Argument(help="an .odl file, or a library operator name")]
ShapeOpt = Annotated[str | None, typer.Option("--shape", help="sizes, e.g. M=64,N=32,K=16")]


@app.command("check")
@friendly_errors
def check(file: FileArg) -> None:
    """Parse and check an operator; print its signature or the error at its line."""
    op, _, name = read_op(file)
    print(f"ok {name}: op {op.name} ({len(op.stmts)} statement{'s' * (len(op.stmts) != 1)}), "
          f"pattern {classify(op).kind}")


def describe(op: Op, sizes: dict[str, int] | None) -> dict:
    """The IR summary shown by `uol odl show`: tensors, statements with patterns, cost."""
    pattern = classify(op)
    info = {
        "name": op.name,
        "dims": list(op.dims),
        "inputs": [format_decl(d) for d in op.inputs],
        "outputs": [format_decl(d) for d in op.outputs],
        "intermediates": [format_decl(d) for d in op.locals],
        "pattern": pattern.kind,
        "main_statement": pattern.main,
        "statements": [
            {"line": stmt.line, "target": stmt.target, "pattern": sp.kind,
             "detail": sp.describe(), "epilogue": list(sp.epilogue)}
            for stmt, sp in zip(op.stmts, pattern.statements)
        ],
        "ir": format_op(op),
    }
    if sizes is not None:
        cost = op_cost(op, sizes)
        info.update(sizes=sizes, flops=cost.flops, bytes=cost.bytes,
                    unfused_bytes=cost.unfused_bytes, intensity=cost.intensity)
    return info


@app.command("show")
@friendly_errors
def show(file: FileArg, shape: ShapeOpt = None,
         as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Show the IR, the pattern of each statement and, with --shape, FLOPs and bytes."""
    op, _, _ = read_op(file)
    sizes = bind_sizes(op, parse_shape_spec(shape)) if shape else None
    info = describe(op, sizes)
    if as_json:
        print_json(info)
        return
    console.print(f"[bold]op {op.name}[/bold]  dims: {', '.join(op.dims)}")
    console.print(escape(f"  inputs:        {', '.join(info['inputs'])}"))
    console.print(escape(f"  outputs:       {', '.join(info['outputs'])}"))
    if info["intermediates"]:
        console.print(escape(f"  intermediates: {', '.join(info['intermediates'])}"))
    table = Table("line", "statement", "pattern")
    statement_lines = format_op(op).splitlines()[1:]
    for stmt, text, row in zip(op.stmts, statement_lines, info["statements"]):
        table.add_row(str(stmt.line), escape(text.strip()), escape(row["detail"]))
    console.print(table)
    console.print(f"  op pattern: [bold]{info['pattern']}[/bold]")
    if sizes is not None:
        console.print(f"  FLOPs {info['flops']:,}   bytes {info['bytes']:,} "
                      f"(unfused {info['unfused_bytes']:,})   intensity {info['intensity']:.3g} FLOP/B")


@app.command("eval")
@friendly_errors
def eval_cmd(
    file: FileArg,
    shape: ShapeOpt = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help="torch.save dict of named inputs")] = None,
    out: Annotated[str | None, typer.Option("--out", help="write outputs as a torch.save dict")] = None,
    seed: Annotated[int, typer.Option(help="seed for random inputs")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Run the reference evaluator on random (or given) inputs and summarise the outputs."""
    op, _, _ = read_op(file)
    if inputs:
        try:
            tensors = torch.load(inputs, weights_only=True)
        except Exception as err:  # a user file: any load failure is a user error
            raise UserError(f"cannot read inputs from {inputs}: {err}") from None
        if not isinstance(tensors, dict):
            raise UserError(f"{inputs} must hold a dict of name -> tensor")
        tensors = {k: v.to(TORCH_DTYPES[op.tensor(k).dtype]) if k in op.tensors else v
                   for k, v in tensors.items()}
    else:
        if not shape:
            raise UserError("give --shape (e.g. --shape M=64,N=32) or --inputs FILE.pt")
        tensors = random_inputs(op, bind_sizes(op, parse_shape_spec(shape)), seed=seed)
    outputs = evaluate_all(op, tensors)
    if out:
        torch.save(outputs, out)
    summary = {name: _summarise(t) for name, t in outputs.items()}
    if as_json:
        print_json({"op": op.name, "outputs": summary, "written": out})
        return
    table = Table("output", "shape", "dtype", "mean", "std", "min", "max")
    for name, s in summary.items():
        table.add_row(name, str(tuple(s["shape"])), s["dtype"], *(f"{s[k]:.6g}" for k in
                                                                  ("mean", "std", "min", "max")))
    console.print(table)
    if out:
        console.print(f"wrote {out}")


def _summarise(t: torch.Tensor) -> dict:
    f = t.double()
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "mean": f.mean().item() if f.numel() else 0.0,
            "std": f.std().item() if f.numel() > 1 else 0.0,
            "min": f.min().item() if f.numel() else 0.0, "max": f.max().item() if f.numel() else 0.0}


@app.command("grad")
@friendly_errors
def grad_cmd(
    file: FileArg,
    wrt: Annotated[str | None, typer.Option(help="comma-separated inputs (default: every float input)")] = None,
    recompute_wide: Annotated[bool, typer.Option(
        "--recompute-wide", help="recompute reductions no input or output is as large as "
        "(attention's scores), as training does where a fused backward exists")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Print the derived backward (vector-Jacobian product) op as ODL."""

    op, _, _ = read_op(file)
    grad = derive_grad(op, tuple(wrt.split(",")) if wrt else None, recompute_wide)
    if as_json:
        print_json({"op": grad.op.name, "odl": grad.text, "wrt": list(grad.wrt),
                    "grad_of_input": grad.grad_of_input, "grad_of_output": grad.grad_of_output,
                    "saved": list(grad.saved), "notes": list(grad.notes)})
        return
    print(grad.text, end="")
    for note in grad.notes:
        print(f"# {note}")
