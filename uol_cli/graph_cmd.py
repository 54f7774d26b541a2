"""`uol graph ...`: show, import and run operator graphs (JSON files or torch modules).

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from uol_cli.common import print_json, user_errors

app = typer.Typer(help="Operator graphs: show, import from torch, fuse and run.", no_args_is_help=True)
console = Console()


def graph_errors(func: Callable) -> Callable:
    """User-caused errors print one clear message and exit with status 2 (no traceback)."""
    from uol_core.graph import GraphError

    return user_errors(GraphError, ValueError)(func)


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise ValueError(f"bad --input-shape '{text}': write sizes like 1,512,512") from None


def _load_zoo(spec: str, size: str, batch: int, importer: str = "auto"):
    """`zoo:<name>`: a model of either zoo (the hand-built blocks, the transformers models) by
    name, imported at its size and batch: (graph, module, example inputs)."""
    from uol_core.graph.named import PREFIX, import_zoo_model

    return import_zoo_model(spec.removeprefix(PREFIX), size, batch, method=importer)


def _load(spec: str, input_shapes: list[str] | None, importer: str = "auto", size: str = "bench",
          batch: int = 1):
    """A graph from a JSON file, a zoo model (`zoo:<name>`), or by importing `module:Class`
    (torch.export, torch.fx as the fallback) on random inputs of the given shapes."""
    import torch

    from uol_core.graph import load_graph
    from uol_core.graph.export_import import import_model
    from uol_core.graph.fx_import import load_module
    from uol_core.graph.named import PREFIX

    if spec.startswith(PREFIX):
        return _load_zoo(spec, size, batch, importer)[0]
    if spec.endswith(".json") or Path(spec).is_file():
        return load_graph(spec)
    if not input_shapes:
        raise ValueError(f"'{spec}' is not a graph file; to import a module give --input-shape")
    inputs = [torch.randn(*_shape(s)) for s in input_shapes]
    return import_model(load_module(spec), *inputs, method=importer)


def _opaque(graph) -> list[dict]:
    """Nodes left in torch that are not views, each with the reason."""
    return [{"node": n.name, "source": n.source, "reason": n.label.removeprefix("opaque: ")}
            for n in graph.nodes if n.kind == "torch" and n.label != "view"]


def _print_opaque(graph) -> None:
    for row in _opaque(graph):
        console.print(f"  opaque: {row['node']} ({row['source']}) runs in torch: {row['reason']}",
                      soft_wrap=True)


def _print_peers(peers: dict) -> None:
    table = Table("contender", "ms", "theirs / ours", "verified, or why not timed",
                  title=f"beside the deployment runtimes (median of {peers['rounds']} alternated "
                        f"rounds, {peers['threads']} threads; baseline {peers['baseline']})")
    for r in peers["rows"]:
        table.add_row(r["contender"], f"{r['ms']:.3f}" if r["ms"] else "-",
                      f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                      ("yes: " if r["verified"] else "no: ") + (r["note"] or ""))
    console.print(table)


def _describe(graph) -> list[dict]:
    rows = []
    for node in graph.nodes:
        outs = node.writes()
        spec = graph.shapes.get(outs[0])
        rows.append({"node": node.name, "kind": node.kind,
                     "op": node.op.name if node.op else node.source, "source": node.source,
                     "reads": node.reads(), "writes": outs,
                     "shape": list(spec.shape) if spec else None, "label": node.label})
    return rows


GraphArg = Annotated[str, typer.Argument(help="graph JSON file, zoo:<name> (a model of the zoos: "
                                         "see `uol graph zoo`), or module:Class with --input-shape")]
SizeOpt = Annotated[str, typer.Option("--size", help="a zoo model's size: small (tests) or bench")]
BatchOpt = Annotated[int, typer.Option("--batch", help="a zoo model's batch: 1 or 8")]
ImporterOpt = Annotated[str, typer.Option("--importer", help="auto (torch.export, then torch.fx), "
                                          "export or fx")]
ShapeOpt = Annotated[list[str] | None, typer.Option("--input-shape", help="input shape, e.g. 1,512,512 "
                                                    "(repeat for several inputs)")]


@app.command("show")
@graph_errors
def show(graph_spec: GraphArg, input_shape: ShapeOpt = None, importer: ImporterOpt = "auto",
         size: SizeOpt = "bench", batch: BatchOpt = 1,
         backend: Annotated[str, typer.Option(help="backend the fusion plan is for")] = "c",
         as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Nodes, tensor shapes and the fusion plan with the reason for every decision: the graph
    as it runs (sibling GEMMs merged, views folded into their readers)."""
    from uol_core.graph import plan_graph

    plan = plan_graph(_load(graph_spec, input_shape, importer, size, batch), backend)
    graph = plan.graph
    if as_json:
        print_json({"graph": graph.name, "description": graph.description, "nodes": _describe(graph),
                    "outputs": graph.outputs, "opaque": _opaque(graph), **plan.to_dict()})
        return
    table = Table("node", "kind", "op", "reads", "writes", "shape", title=f"{graph.name}: {graph.description}")
    for row in _describe(graph):
        table.add_row(row["node"], row["kind"] if row["kind"] == "odl" else f"torch ({row['label']})",
                      row["op"], ", ".join(row["reads"]), ", ".join(row["writes"]), str(row["shape"]))
    console.print(table)
    fusion = Table("producer", "consumer", "kind", "fused", "bytes saved", "why", title=f"fusion plan ({backend})")
    for d in plan.decisions:
        fusion.add_row(d.producer, d.consumer, d.kind, "yes" if d.fused else "no",
                       f"{d.bytes_saved:,}", d.reason)
    console.print(fusion)
    for d in plan.siblings:
        console.print(f"sibling GEMMs {', '.join(d['nodes'])}: "
                      f"{'merged' if d.get('merged') else 'kept'} ({d.get('reason', '')})")
    for d in plan.view_folds:
        console.print(f"view {d['view']} read by {d['consumer']}: "
                      f"{'folded' if d.get('folded') else 'kept'} ({d.get('reason', '')})")
    console.print(f"{len(graph.nodes)} nodes -> {len(plan.groups)} groups")
    _print_opaque(graph)


@app.command("import")
@graph_errors
def import_cmd(module: Annotated[str, typer.Argument(help="module:Class (built with no arguments), "
                                                    "or zoo:<name>")],
               input_shape: ShapeOpt = None, importer: ImporterOpt = "auto",
               size: SizeOpt = "bench", batch: BatchOpt = 1,
               output: Annotated[Path | None, typer.Option("-o", "--output", help="write graph JSON here")] = None,
               as_json: Annotated[bool, typer.Option("--json", help="print the graph JSON")] = False) -> None:
    """Import a torch module (torch.export, torch.fx as the fallback) and map its ops to ODL
    operators; every node left in torch is listed with the reason."""
    from uol_core.graph import graph_to_dict
    from uol_core.graph.named import PREFIX

    graph = (_load(module, input_shape or None, importer, size, batch)
             if input_shape or module.startswith(PREFIX) else None)
    if graph is None:
        raise ValueError("give --input-shape for every input of the module, e.g. --input-shape 1,512,512")
    data = graph_to_dict(graph)
    data["opaque"] = _opaque(graph)
    if output:
        output.write_text(json.dumps(data, indent=1) + "\n")
    if as_json:
        print_json(data)
        return
    opaque = [n for n in graph.nodes if n.kind == "torch" and n.label != "view"]
    console.print(f"{graph.description}")
    console.print(f"{graph.name}: {len(graph.nodes)} nodes, "
                  f"{sum(n.kind == 'odl' for n in graph.nodes)} ODL, "
                  f"{sum(n.label == 'view' for n in graph.nodes)} views, {len(opaque)} opaque torch")
    _print_opaque(graph)
    if output:
        console.print(f"wrote {output} (parameter values are not stored: a run of the file uses random weights)")


@app.command("zoo")
def zoo_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The models `zoo:<name>` names: the hand-built blocks and the transformers models (built
    from configs with random weights; the [models] extra), and why one cannot be built here."""
    from uol_core.graph.named import BATCHES, SIZES, zoo_models

    rows = [{"name": m.name, "label": m.label, "library": m.library,
             "unavailable": m.unavailable()} for m in zoo_models().values()]
    if as_json:
        print_json({"models": rows, "sizes": list(SIZES), "batches": list(BATCHES)})
        return
    table = Table("name", "model", "library", "here", title="zoo models (uol graph run zoo:<name>)")
    for r in rows:
        table.add_row(r["name"], r["label"], r["library"], r["unavailable"] or "yes")
    console.print(table)


@app.command("run")
@graph_errors
def run_cmd(graph_spec: GraphArg, input_shape: ShapeOpt = None,
            target: Annotated[str, typer.Option(help="HFL target")] = "host",
            backend: Annotated[str, typer.Option(help="c, triton (interpreted: slow) or reference")] = "c",
            repeat: Annotated[int, typer.Option(help="timed runs (median)")] = 5,
            no_fuse: Annotated[bool, typer.Option("--no-fuse", help="one group per node")] = False,
            compare_compile: Annotated[bool, typer.Option("--compile", help="also time torch.compile "
                                                          "of the module")] = False,
            importer: ImporterOpt = "auto", size: SizeOpt = "bench", batch: BatchOpt = 1,
            peers: Annotated[bool, typer.Option("--peers", help="a zoo model: also time torch "
                                                "eager, torch.compile, ONNX Runtime and OpenVINO, "
                                                "each verified, calls alternated")] = False,
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Compile every group, run end to end, verify, and time the whole graph against the torch
    module it came from (eager; torch.compile with --compile; the deployment runtimes with
    --peers)."""
    from uol_core.graph import run_graph
    from uol_core.graph.named import PREFIX

    module = inputs = None
    if graph_spec.startswith(PREFIX):
        graph, module, inputs = _load_zoo(graph_spec, size, batch, importer)
    else:
        graph = _load(graph_spec, input_shape, importer)
    if peers and module is None:
        raise ValueError("--peers needs a zoo model (zoo:<name>): the runtimes are given the module")
    report = run_graph(graph, backend, target, repeat=max(1, repeat), fuse=not no_fuse,
                       compare_compile=compare_compile)
    if peers:
        from uol_core.graph.peer_run import time_with_peers

        report["peers"] = time_with_peers(graph, module, inputs, rounds=max(1, repeat),
                                          backend=backend, target=target)
    if as_json:
        print_json(report)
    else:
        # ms: the kernel as the model runs it; warm ms: the same kernel repeated on its own
        table = Table("group", "nodes", "pattern", "engine", "ms", "warm ms", "reference ms",
                      "share", "note", title=f"{graph.name} on {target} ({backend})")
        for r in sorted(report["rows"], key=lambda r: -r["ms"]):
            warm = f"{r['warm_ms']:.3f}" if r.get("warm_ms") is not None else "-"
            table.add_row(r["group"], ", ".join(r["nodes"]), r["pattern"], r["engine"], f"{r['ms']:.3f}",
                          warm, f"{r['reference_ms']:.3f}", f"{100 * r['share']:.0f}%", r["note"][:60])
        console.print(table)
        status = "verified" if report["verified"] else "MISMATCH"
        console.print(f"{status} against {report['against']} (max rel. error {report['max_rel_error']:.2e}); "
                      f"total {report['total_ms']:.2f} ms")
        if report.get("mismatch"):
            console.print(f"  {report['mismatch']['message']}", soft_wrap=True)
        for key, label in (("eager", "torch eager"), ("compile", "torch.compile")):
            if report[f"torch_{key}_ms"] is not None:
                console.print(f"  vs {label} {report[f'torch_{key}_ms']:.2f} ms: "
                              f"{report[f'speedup_vs_{key}']:.2f}x (calls alternated in one run)")
        if report["torch_eager_ms"] is None:
            console.print(f"  no whole-graph speedup: {report['speed_baseline']}")
        if report.get("torch_compile_error"):
            console.print(f"  torch.compile unavailable: {report['torch_compile_error']}")
        for row in report["opaque"]:
            console.print(f"  opaque: {row['node']} ({row['source']}) runs in torch: {row['reason']}",
                      soft_wrap=True)
        rt = report["runtime"]
        console.print(f"runtime: {rt['kernels']} kernels in {rt['segments']} driver calls, "
                      f"{rt['copies']} copies, {rt['torch_calls']} torch calls; page faults per call "
                      f"{rt['page_faults_per_call']:.1f}; huge pages {rt['huge_pages']}")
        for line in rt["plan"][:4]:
            console.print(f"  {line}", soft_wrap=True)
        if report.get("peers"):
            _print_peers(report["peers"])
    if not report["verified"]:
        raise typer.Exit(1)
