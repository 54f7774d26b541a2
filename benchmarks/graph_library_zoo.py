"""Library models against the deployment runtimes: each model of uol_core/graph/hf_zoo.py (and,
with `graph_bench.py --zoo`, of the hand-built zoo) imported whole and run by UOL, then UOL,
torch eager, torch.compile, ONNX Runtime and OpenVINO (uol_core/graph/peers.py) timed in f32,
calls alternated round by round in one process, every contender verified against eager first.

    python benchmarks/graph_bench.py --zoo --zoos library [--models bert_base,gpt2]
        [--batches 1,8 --repeat 5 --model-timeout 900 --update]

A model that fails to build, import or run is a row with its error; a peer that does not verify
is reported and never counted as the best peer. The JSON is rewritten after every row, so an
interrupted run keeps what it measured (`--render` writes the section from it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from uol_core.graph.export_import import import_model
from uol_core.graph.peers import PEERS, prepare_peers, relative_error, verify_peers
from uol_core.graph.run import compile_graph, interleaved_times, make_inputs
from uol_core.graph.verify import TOLERANCE
from uol_core.runtime.turns import PEER_LEAD_IN_S

SECTION = "Library models against the deployment runtimes"
OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "graph_library.json"
LABELS = {"uol": "UOL", "eager": "eager", "compile": "compile", "onnxruntime": "ORT",
          "openvino": "OpenVINO"}


def host() -> dict:
    """The host as the table names it: CPU model, ISA flags (the HFL's host probe), cores."""
    from uol_core.hfl.sysinfo import host_info, widest_vector_isa

    info = host_info()
    try:
        widest = widest_vector_isa(info.flags)
        isa = f"{widest.get('flag', '?')} ({widest.get('vector_bits', '?')}-bit)"
    except RuntimeError:
        isa = "unknown"
    fields = {}
    with contextlib.suppress(OSError):  # family and model tell AMD generations apart ("AMD EPYC")
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    cpu = info.model
    if fields.get("cpu family") and fields.get("model"):
        cpu += f" (family {fields['cpu family']}, model {fields['model']})"
    return {"cpu": cpu, "flags": info.flags, "widest_isa": isa, "cores": info.cores,
            "amx": any(f.startswith("amx") for f in info.flags),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "loadavg": os.getloadavg()}


def _line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:240] if text else ''}".rstrip(": ")


@contextlib.contextmanager
def _deadline(seconds: int):
    """Raise TimeoutError in this thread after `seconds` (0: none), so that one model stuck in a
    compiler becomes a row with an error instead of ending the run."""
    def expire(signum, frame):
        raise TimeoutError(f"over the {seconds} s limit per model")
    previous = signal.signal(signal.SIGALRM, expire) if seconds else None
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)


def _uol(module, inputs, name: str, backend: str, expected: torch.Tensor, row: dict
         ) -> Callable[[], torch.Tensor] | None:
    """Import and compile the module; its call, with import facts and its error in `row`."""
    start = time.perf_counter()
    try:
        graph = import_model(module, *inputs, name=name)
        ours = compile_graph(graph, backend, "host")
    except Exception as err:  # (an import or build failure is this row's result)
        row["uol_failed"] = _line(err)
        return None
    ours.verify = False  # verified below into the row: a mismatch is reported, not raised
    row["uol_build_s"] = time.perf_counter() - start
    kept = [n for n in graph.nodes if n.kind == "torch" and n.label != "view"]
    # lookups by integer ids move rows in torch by design (ODL has no data-dependent
    # addressing); only the nodes no rule maps are opaque
    row["opaque"] = [f"{n.source} ({n.label})" for n in kept if n.label.startswith("opaque")]
    row["lookups"] = [n.source for n in kept if n.label.startswith("lookup")]
    env = make_inputs(graph, 0)
    env.update(zip(graph.inputs, inputs, strict=True))
    out = graph.outputs[0]

    def call() -> torch.Tensor:
        return ours(env)[out]
    try:
        with torch.no_grad():
            row["uol_error"] = relative_error(call(), expected)
    except Exception as err:  # (a kernel or shape failure at run time)
        row["uol_failed"] = _line(err)
        return None
    row["uol_verified"] = row["uol_error"] <= TOLERANCE
    return call


def _spread(mine: list[float], theirs: list[float]) -> tuple[float, float]:
    """Interquartile range of the per-round ratio theirs/mine (both called in the same round,
    so a load spike from another process moves both)."""
    ratios = sorted(t / m for m, t in zip(mine, theirs, strict=True))
    if len(ratios) < 4:
        return ratios[0], ratios[-1]
    q = statistics.quantiles(ratios, n=4, method="inclusive")
    return q[0], q[2]


def peer_row(name: str, make: Callable[[], tuple], batch: int, rounds: int, backend: str = "c",
             peers: tuple[str, ...] = PEERS, limit_s: int = 0) -> dict:
    """One model at one batch: UOL and every peer built, verified against eager, then timed
    alternately. Never raises: whatever fails is the row's `error`, `uol_failed` or a peer's
    reason."""
    row: dict = {"model": name, "batch": batch, "peers": {}, "ms": {}}
    start = time.perf_counter()
    try:
        with _deadline(limit_s):
            module, inputs = make()
            row["input"] = [list(x.shape) for x in inputs]
            with torch.no_grad():
                expected = module(*inputs)
            calls = {}
            uol = _uol(module, inputs, name, backend, expected, row)
            if uol is not None:
                calls["uol"] = uol
            prepared = prepare_peers(module, inputs, peers)
            reasons = verify_peers(prepared, expected)
            for peer, p in prepared.items():
                row["peers"][peer] = {"note": p.note, "reason": reasons[peer]}
                if reasons[peer] is None:  # only verified peers are timed (and can win)
                    calls[peer] = p.call
            with torch.no_grad():
                times = interleaved_times(calls, rounds, PEER_LEAD_IN_S)
    except Exception as err:  # (one model's failure is its row, the run goes on)
        row["error"] = _line(err)
        return row
    finally:
        row["wall_s"] = time.perf_counter() - start
        gc.collect()
    row["ms"] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    timed = [p for p in peers if p in times]
    if "uol" in times and timed:
        best = min(timed, key=lambda p: row["ms"][p])
        row["best_peer"] = best
        for key, peer in (("eager", "eager"), ("best", best)):
            if peer in times:
                row[f"x_{key}"] = row["ms"][peer] / row["ms"]["uol"]
                row[f"x_{key}_iqr"] = _spread(times["uol"], times[peer])
    return row


def _no_cache(built: tuple) -> tuple:
    """The model's forward pass without building a KV cache: the zoo returns only the hidden
    state, and OpenVINO cannot convert the cache's concatenation onto an empty tensor."""
    module, inputs = built
    config = getattr(getattr(module, "model", None), "config", None)
    if getattr(config, "use_cache", None):
        config.use_cache = False
    return module, inputs


def summary(rows: list[dict]) -> dict:
    """Medians over the rows where UOL verified and was timed against the best peer."""
    ok = [r for r in rows if r.get("uol_verified") and "x_best" in r]
    eager = [r["x_eager"] for r in ok if "x_eager" in r]
    best = [r["x_best"] for r in ok]
    return {"rows": len(rows), "compared": len(ok),
            "median_x_eager": statistics.median(eager) if eager else None,
            "median_x_best_peer": statistics.median(best) if best else None,
            "below_0.8x_best_peer": sum(x < 0.8 for x in best),
            "failed": [f"{r['model']} b{r['batch']}" for r in rows if r.get("error") or r.get("uol_failed")],
            "wrong": [f"{r['model']} b{r['batch']}" for r in rows if r.get("uol_verified") is False]}


def _ms(row: dict, key: str) -> str:
    if key in row["ms"]:
        return f"{row['ms'][key]:.1f}"
    reason = row["peers"].get(key, {}).get("reason") if key != "uol" else None
    return "fails" if key == "uol" and row.get("uol_failed") else ("not verified" if reason and
                                                                     "max error" in reason else "-")


def _x(row: dict, key: str) -> str:
    if f"x_{key}" not in row:
        return "-"
    low, high = row[f"x_{key}_iqr"]
    return f"{row[f'x_{key}']:.2f} ({low:.2f}-{high:.2f})"


def _notes(row: dict) -> str:
    notes = []
    if row.get("error"):
        notes.append(row["error"])
    if row.get("uol_failed"):
        notes.append(f"UOL: {row['uol_failed']}")
    if row.get("uol_verified") is False:
        notes.append(f"UOL output wrong (max rel. error {row['uol_error']:.2g})")
    if row.get("opaque"):
        notes.append(f"{len(row['opaque'])} opaque nodes")
    if row.get("lookups"):
        notes.append(f"{len(row['lookups'])} id lookups in torch")
    for peer, info in row["peers"].items():
        if info["reason"]:
            notes.append(f"{LABELS.get(peer, peer)}: {info['reason']}")
    return "; ".join(notes).replace("|", "/")[:400]


def table(report: dict) -> list[str]:
    """The docs section's lines: how it was run, the table, the medians."""
    h, s = report["host"], report["summary"]
    flags = " ".join(f for f in h["flags"] if f.startswith(("avx", "amx", "fma", "f16c")))
    lines = [f"Command: `{report['command']}` ({report['date']}). Host: {h['cpu']}, "
             f"{h['cores']} cores, widest vector ISA {h['widest_isa']}, AMX: "
             f"{'yes' if h['amx'] else 'no'}; flags {flags}. torch {h['torch']}, "
             f"{h['torch_threads']} threads; {', '.join(report['versions'])}. Load average "
             f"{report['load_before'][0]:.1f} at the start, {report['load_after'][0]:.1f} at the "
             "end: other work ran on this host during the run, so single numbers are noisy; the "
             "per-round ratios (IQR in brackets) compare calls made back to back."
             + "".join(f" Rows not rerun since come from `{e['command']}` ({e['date']})."
                       for e in report.get("earlier_runs", [])), "",
             "Each model built from its config with random weights (uol_core/graph/hf_zoo.py, "
             "bench size), imported with `import_model`, compiled on the C backend; every "
             "contender's output checked against torch eager (relative error <= 1e-3) before "
             f"timing; then the verified ones called in turn, median of {report['repeat']} rounds, "
             "f32 throughout. x eager / x best = that contender's median ms over UOL's (above 1: "
             "UOL faster); best = the fastest verified of eager, torch.compile, ONNX Runtime "
             "(CPU EP, intra-op threads = cores, `torch.onnx.export`) and OpenVINO (CPU, "
             "`INFERENCE_PRECISION_HINT` f32).", "",
             "| model | batch | UOL ms | eager ms | compile ms | ORT ms | OpenVINO ms | best peer "
             "| x eager (IQR) | x best (IQR) | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(
            _ms(r, k) for k in ("uol", "eager", "compile", "onnxruntime", "openvino"))
            + f" | {LABELS.get(r.get('best_peer'), '-')} | {_x(r, 'eager')} | {_x(r, 'best')} "
            f"| {_notes(r)} |")

    def fmt(v):
        return "n/a" if v is None else f"{v:.2f}x"
    lines += ["", f"Over the {s['compared']} of {s['rows']} rows where UOL imported, verified and "
              f"was timed: median {fmt(s['median_x_eager'])} torch eager, "
              f"{fmt(s['median_x_best_peer'])} the best peer; {s['below_0.8x_best_peer']} below "
              f"0.8x the best peer. Failed to import or run: {', '.join(s['failed']) or 'none'}. "
              f"Wrong output: {', '.join(s['wrong']) or 'none'}."]
    if report.get("reading"):  # the run's interpretation, written into its JSON by whoever ran it
        lines += ["", report["reading"]]
    return lines


def _versions() -> list[str]:
    out = []
    for module in ("onnxruntime", "openvino", "transformers"):
        try:
            mod = __import__(module)
            out.append(f"{module} {str(getattr(mod, '__version__', '?')).split('-')[0]}")
        except ImportError:
            out.append(f"{module} not installed")
    return out


def run_library(args, command: str) -> dict:
    """Every selected model at every batch; JSON after each row; the docs section at the end
    of a whole-zoo run (or of a `--update` run, whose rows replace those of the last JSON)."""
    from docs_section import write_report

    from uol_core.graph.hf_zoo import HF_MODELS, available, build

    out = Path(args.out_library) if getattr(args, "out_library", "") else OUT
    if args.render:
        report = json.loads(out.read_text())
        write_report(SECTION, report, table(report), slug=out.stem)
        return report
    reason = available()
    names = [n for n in (args.models.split(",") if args.models else HF_MODELS) if n in HF_MODELS]
    batches = [int(b) for b in args.batches.split(",")]
    size = getattr(args, "size", "bench")
    kept: list[dict] = []
    earlier: list[dict] = []
    reading = None
    if args.update and out.exists():  # keep the last run's rows of what is not rerun now
        last = json.loads(out.read_text())
        kept = [r for r in last["rows"] if not (r["model"] in names and r["batch"] in batches)]
        earlier = [*last.get("earlier_runs", []), {k: last.get(k) for k in (
            "command", "date", "load_before", "load_after")}]
        reading = last.get("reading")
    report = {"benchmark": "library models vs deployment runtimes (CPU f32)", "command": command,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeat": args.repeat,
              "host": host(), "versions": _versions(), "load_before": os.getloadavg(),
              "earlier_runs": earlier, "rows": [], "load_after": os.getloadavg(),
              "reading": reading}
    order = {n: k for k, n in enumerate(HF_MODELS)}

    def merge() -> dict:
        rows = sorted(kept + report["rows"], key=lambda r: (r["batch"], order.get(r["model"], 99)))
        return {**report, "rows": rows, "summary": summary(rows)}
    merged = merge()
    # batch outer: an interrupted run has every model at the first batch
    for batch, name in ((b, n) for b in batches for n in names):
        if reason:
            row = {"model": name, "batch": batch, "peers": {}, "ms": {}, "error": reason}
        else:
            row = peer_row(name, lambda name=name, batch=batch: _no_cache(build(name, size, batch)),
                           batch, args.repeat, args.backend,
                           tuple(p for p in PEERS if not (args.no_compile and p == "compile")),
                           args.model_timeout)
        row["measured"] = report["date"]
        report["rows"].append(row)
        _print(row)
        report["load_after"] = os.getloadavg()
        merged = merge()
        if not args.models or args.update:
            out.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    if not args.models or args.update:
        write_report(SECTION, merged, table(merged), slug=out.stem)
    return merged


def _print(row: dict) -> None:
    ms = " | ".join(f"{LABELS[k]} {v:8.1f}" for k, v in row["ms"].items())
    print(f"{row['model']:<16} b{row['batch']} {ms} | x eager {row.get('x_eager', float('nan')):.2f}"
          f" | x best {row.get('x_best', float('nan')):.2f} ({row.get('best_peer', '-')}) | "
          f"{_notes(row)[:200]}", flush=True)
