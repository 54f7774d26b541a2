"""`uol compile | run | tune | explain`: generate, verify, measure and explain kernels on any
registered backend (C, Triton: interpreted where there is no GPU, the reference).

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json
import sys
from functools import wraps
from pathlib import Path
from typing import Annotated

import typer

from uol_cli.common import UserError, friendly_errors, print_json, read_op

FileArg = Annotated[str, typer.Argument(help="an .odl file, or a library operator name")]
ShapeOpt = Annotated[str | None, typer.Option("--shape", help="sizes, e.g. M=64,N=32,K=16")]
TargetOpt = Annotated[str, typer.Option("--target", help="HFL target name (see `uol hw list`)")]
BackendOpt = Annotated[str, typer.Option("--backend", help="code generator backend: c, triton "
                                          "(interpreted without a GPU), reference or auto")]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="k=v,... over the model's "
                                                                "choice, or 'tuned'")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def user_errors(func):
    """Compiler, build and HFL errors become one-line user errors (exit 2), never a traceback."""
    from uol_core.hfl import HflError
    from uol_core.plans.gemm import UnsupportedOp
    from uol_core.runtime.build import BuildError

    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (UnsupportedOp, BuildError, HflError, ValueError, FileNotFoundError) as err:
            if type(err).__name__ in ("OdlError", "ShapeError"):
                raise
            raise UserError(str(err).strip()) from None
    return friendly_errors(wrapper)


def _sizes(op, shape: str | None) -> dict[str, int]:
    from uol_core.odl.shapes import parse_shape_spec, runnable_sizes
    return runnable_sizes(op, parse_shape_spec(shape) if shape else {})


def _kernel(file: str, shape, target: str, backend: str, config):
    import uol_core
    op, _, _ = read_op(file)
    sizes = _sizes(op, shape)
    return op, sizes, uol_core.compile(op, shapes=sizes, target=target, backend=backend,
                                       config=config)


def compile_cmd(file: FileArg, shape: ShapeOpt = None, target: TargetOpt = "host",
                backend: BackendOpt = "c", config: ConfigOpt = None,
                show: Annotated[bool, typer.Option("--show", help="print the C source")] = False,
                as_json: JsonOpt = False) -> None:
    """Generate and build a kernel; print its config (and source with --show)."""
    op, sizes, k = _kernel(file, shape, target, backend, config)
    path = getattr(k.kernel, "path", "(in memory)")
    if as_json:
        print_json({"op": op.name, "sizes": sizes, "config": k.config, "library": str(path),
                    "entry": k.kernel_source.entry, **({"source": k.source} if show else {})})
        return
    print(f"built {op.name} at {', '.join(f'{a}={b}' for a, b in sizes.items())}: {path}")
    print("config: " + ", ".join(f"{a}={b}" for a, b in k.config.items()))
    if show:
        print(k.source)


def run_cmd(file: FileArg, shape: ShapeOpt = None, target: TargetOpt = "host",
            backend: BackendOpt = "c", config: ConfigOpt = None,
            check: Annotated[bool, typer.Option("--check", help="verify only, no timing")] = False,
            inputs: Annotated[str | None, typer.Option("--inputs", help="torch.save dict")] = None,
            out: Annotated[str | None, typer.Option("--out", help="write outputs (torch.save)")]
            = None, as_json: JsonOpt = False) -> None:
    """Build, verify against the reference, and measure a kernel (C: in a worker process)."""
    import torch

    from uol_core.backends import get_backend
    from uol_core.runtime import stats
    from uol_core.runtime.worker import Worker, make_job
    op, text, name = read_op(file)
    before = stats.load_snapshot()
    if inputs or not getattr(get_backend(backend, target), "worker_jobs", False):
        given = _load_inputs(inputs) if inputs else None
        sizes = _sizes(op, shape) if shape or given is None else None
        import uol_core
        k = uol_core.compile(op, shapes=sizes or {n: tuple(t.shape) for n, t in given.items()},
                             target=target, backend=backend, config=config)
        if given is None:
            from uol_core.runtime.inputs import random_inputs
            given = random_inputs(op, k.sizes, seed=0)
        result, outs = _run_here(op, k, given, check)
        if out:
            torch.save(outs, out)
        sizes, cfg = k.sizes, k.config
    else:
        _, sizes, k = _kernel(file, shape, target, backend, config)
        cfg = k.config
        with Worker() as worker:
            result = worker.run(make_job(k.kernel_source, text, Path(name).name, sizes,
                                         check_only=check))
    ok = result.get("status") == "ok"
    report = {"op": op.name, "sizes": sizes, "config": cfg, "ok": ok, "isa": _isa(k, cfg),
              "predicted": _prediction(k, target),
              "status": result.get("status"), "reason": result.get("reason", ""),
              "max_abs_err": result.get("max_abs_err"), "max_rel_err": result.get("max_rel_err"),
              "gflops": result.get("gflops"),
              "ms": result["median_s"] * 1e3 if result.get("median_s") else None,
              "iqr_ms": result["iqr_s"] * 1e3 if result.get("iqr_s") is not None else None}
    report.update(_rates(op, sizes, k, result.get("median_s")))
    if result.get("median_s"):
        report.update(_confidence(result, stats.load_during(before)))
    if as_json:
        print_json(report)
    else:
        line = f"{op.name}: {report['status']}" + (f" [{report['isa']}]" if report["isa"] else "")
        if report["max_abs_err"] is not None:
            line += f", max abs err {report['max_abs_err']:.3g}"
        if report["ms"]:
            line += (f", {report['ms']:.3f} ms (IQR {report['iqr_ms']:.3f}{_ci_text(report)}), "
                     + _rate_text(report))
        print(line + (f" ({report['reason']})" if report["reason"] else ""))
        if report.get("noisy"):
            print(f"  {report['noise_reason']}")
        if report["predicted"]:
            print(f"  {report['predicted']['label']}: {report['predicted']['ms']:.4g} ms")
    if not ok:
        raise typer.Exit(1)


def _rates(op, sizes: dict, k, median_s: float | None) -> dict:
    """GFLOP/s and GB/s of a measured run (the op's work and compulsory traffic over the
    median), with the roof that bounds the op on the kernel's target (its HFL facts) and the
    fraction of it reached: a memory-bound op (softmax, layernorm) is judged by GB/s against
    the memory roof, a compute-bound one by GFLOP/s against the compute roof."""
    if not median_s:
        return {}
    from uol_core.hfl.roofline import roofline
    from uol_core.odl.cost import op_cost

    cost = op_cost(op, sizes)
    rates = {"gflops": cost.flops / median_s / 1e9, "gbps": cost.bytes / median_s / 1e9}
    try:
        roof = roofline(cost.flops, cost.bytes, k.target)
    except Exception:  # a target without the facts (no fp32 peak, no bandwidth): rates only
        return rates
    if roof.bound == "memory":
        return {**rates, "bound": "memory", "roof_gbps": roof.bandwidth_gbps,
                "fraction_of_roof": rates["gbps"] / roof.bandwidth_gbps}
    return {**rates, "bound": "compute", "roof_gflops": roof.attainable_gflops,
            "fraction_of_roof": rates["gflops"] / roof.attainable_gflops}


def _confidence(result: dict, load: dict) -> dict:
    """n, the median's 95% CI in ms, and the noisy flag with its reason (thresholds and values:
    the spread, the load per core as the run started, the CPU steal during it)."""
    from uol_core.runtime import stats

    summary = stats.summary(result.get("samples"), median_s=result["median_s"],
                            iqr_s=result.get("iqr_s"), load=load)
    ci = [summary["ci_low_s"] * 1e3, summary["ci_high_s"] * 1e3] if "n" in summary else None
    return {"n": summary.get("n", result.get("repeats")), "ci_ms": ci,
            "noisy": summary["noisy"], "noise_reason": summary["noise_reason"], "load": load}


def _ci_text(report: dict) -> str:
    """', n=57, 95% CI 0.251-0.262' (empty without a CI)."""
    if not report.get("ci_ms"):
        return ""
    low, high = report["ci_ms"]
    return f", n={report['n']}, 95% CI {low:.3f}-{high:.3f}"


def _rate_text(report: dict) -> str:
    """'8.1 GB/s, 12% of the 68 GB/s memory roof' or '95.2 GFLOP/s, 71% of the 134 GFLOP/s
    compute roof': the rate that matters for the op's bound first."""
    if report.get("bound") == "memory":
        return (f"{report['gbps']:.1f} GB/s, {100 * report['fraction_of_roof']:.0f}% of the "
                f"{report['roof_gbps']:.0f} GB/s memory roof ({report['gflops']:.2f} GFLOP/s)")
    text = f"{report['gflops']:.1f} GFLOP/s"
    if report.get("bound") == "compute":
        text += (f", {100 * report['fraction_of_roof']:.0f}% of the "
                 f"{report['roof_gflops']:.0f} GFLOP/s compute roof")
    return text


def _isa(k, cfg) -> str | None:
    """The vector ISA the kernel was emitted for (its template says so, or its config)."""
    try:
        meta = k.kernel_source.meta
    except Exception:  # a backend without a kernel source (the reference evaluator)
        meta = {}
    given = cfg.get("isa") if isinstance(cfg, dict) else getattr(cfg, "isa", None)
    return meta.get("isa") or given


def _prediction(k, target: str) -> dict | None:
    """The cost model's time for the kernel's config, labelled as a prediction (None where the
    explanation has no time)."""
    try:
        roof = k.explain().roofline
    except Exception:  # an explanation is extra information: its failure never fails a run
        return None
    seconds = roof.get("predicted_seconds")
    label = f"model-predicted for {target} (ACG cost model; not measured)"
    if not seconds and roof.get("predicted_gflops") and roof.get("flops"):
        seconds = roof["flops"] / (roof["predicted_gflops"] * 1e9)
    if not seconds and roof.get("min_seconds"):
        seconds, label = roof["min_seconds"], f"model-predicted for {target} (roofline bound)"
    return {"ms": seconds * 1e3, "label": label} if seconds else None


def _load_inputs(path: str) -> dict:
    import torch

    try:
        given = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"cannot read inputs {path}: {err}") from None
    if not isinstance(given, dict):
        raise UserError(f"{path} must hold a dict of named tensors")
    return given


def _run_here(op, k, given: dict, check: bool) -> tuple[dict, dict]:
    """Run the kernel in this process on `given`, compare with the reference, time it unless
    `check` or the kernel says its time means nothing (Triton interpreted)."""
    from uol_core.odl.cost import op_cost
    from uol_core.runtime.measure import time_call
    from uol_core.runtime.reference import evaluate_all
    from uol_core.runtime.verify import compare

    given = {n: t.float() if t.is_floating_point() else t for n, t in given.items()}
    outs = k(**given)
    outs = outs if isinstance(outs, dict) else {op.outputs[0].name: outs}
    meta = k.kernel_source.meta
    depth = int(meta.get("reduction_length") or max(k.sizes.values(), default=1))
    verdict = compare(outs, evaluate_all(op, given), depth)
    result = {"status": "ok" if verdict.ok else "mismatch", **verdict.to_dict()}
    note = getattr(k.kernel, "timing_note", "")
    if verdict.ok and not check and note:
        result["reason"] = note
    elif verdict.ok and not check:
        timing = time_call(lambda: k(**given), min_seconds=0.2)
        flops = meta.get("flops") or op_cost(op, k.sizes).flops
        result.update(median_s=timing.median_s, iqr_s=timing.iqr_s, repeats=timing.repeats,
                      samples=timing.samples, gflops=flops / timing.median_s / 1e9)
    return result, outs


def tune_cmd(file: FileArg, shape: ShapeOpt = None, target: TargetOpt = "host",
             backend: BackendOpt = "c",
             budget: Annotated[int, typer.Option("--budget", help="max measurements")] = 12,
             seconds: Annotated[float | None, typer.Option("--seconds", help="time budget")]
             = None,
             replay: Annotated[bool, typer.Option("--replay", help="answer from the database "
                                                                   "only")] = False,
             db: Annotated[str | None, typer.Option("--db", help="tuning database file")] = None,
             as_json: JsonOpt = False,
             targets: Annotated[str | None, typer.Option("--targets", help="a,b,...: tune on "
                                "remote workers of these targets at once (needs --broker)")]
             = None,
             broker: Annotated[str | None, typer.Option("--broker", help="Redis URL of the "
                               "workers (`uol worker`), for --targets")] = None) -> None:
    """Tune a kernel: rank with the model, measure the best few, search around the best."""
    from rich.progress import Progress

    from uol_core.runtime.tuningdb import TuningDB
    from uol_core.runtime.untimed import NEEDS_GPU

    op, _, _ = read_op(file)
    sizes = _sizes(op, shape)
    if targets:
        from uol_cli.worker_cmd import tune_on_workers

        tune_on_workers(op, sizes, [t for t in targets.split(",") if t], broker, budget, db,
                        as_json)
        return
    session = _session(op, sizes, target, backend, TuningDB(db) if db else None, replay)
    try:
        with Progress(transient=True, disable=as_json or not sys.stderr.isatty()) as bar:
            task = bar.add_task(f"tuning {op.name}", total=budget)
            result = session.tune(budget=budget, seconds=seconds,
                                  progress=lambda t, n: bar.update(task, completed=n))
    finally:
        session.close()
    trials = [{"config": t.config.key(), "status": t.result.get("status"),
               "gflops": t.result.get("gflops"), "predicted_gflops": t.predicted_gflops,
               "model_rank": t.model_rank, "from_db": t.from_db,
               "reason": t.result.get("reason", "")} for t in result.trials]
    report = {"op": op.name, "sizes": sizes, "best": result.best.to_dict() if result.best else None,
              "best_gflops": result.best_gflops, "measurements": result.measurements,
              "stopped": result.stopped, "trials": trials}
    untimed = _untimed_note(result, trials)
    if untimed:  # nothing was timed: no rate at all, rather than a rate of 0
        report.update(note=untimed, best_gflops=None)
    if as_json:
        print_json(report)
        return
    for t in trials:
        rate = f"{t['gflops']:7.1f} GF/s" if t["gflops"] else \
            f"{NEEDS_GPU:>12}" if t["status"] == "verified" else f"{'-':>12}"
        predicted = f", {t['predicted_gflops']:.1f}" if t["predicted_gflops"] else ""
        print(f"  {t['status']:>11}  {rate}  (model #{t['model_rank']}{predicted})  "
              f"{t['config']}")
    if untimed:
        print(untimed)
        return
    if result.best is None:
        print(f"no timed config after {result.measurements} measurements ({result.stopped})")
        return
    print(f"best: {report['best_gflops']:.1f} GFLOP/s after {result.measurements} measurements "
          f"({result.stopped})")


def _untimed_note(result, trials: list[dict]) -> str:
    """The tune's verdict when configs were verified but none timed (Triton without a GPU)."""
    from uol_core.runtime.untimed import untimed_summary

    verified = sum(t["status"] == "verified" for t in trials)
    if result.best is not None or not verified:
        return ""
    first = next(t for t in trials if t["status"] == "verified")  # the model's pick comes first
    return untimed_summary(verified, len(trials), first["config"])


def _session(op, sizes, target, backend, db, replay):
    """The backend's tuning session (C: GEMM or pattern tuner; others: their own space)."""
    from uol_core.acg.session import open_session

    try:
        return open_session(op, sizes, target, backend, db=db, replay=replay)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def explain_cmd(file: FileArg, shape: ShapeOpt = None, target: TargetOpt = "host",
                backend: BackendOpt = "c", config: ConfigOpt = None,
                as_json: JsonOpt = False) -> None:
    """Explain the chosen kernel: binding constraints, roofline, HFL facts, tile picture."""
    _, _, k = _kernel(file, shape, target, backend, config)
    exp = k.explain()
    if as_json:
        print(json.dumps(exp.to_dict(), indent=2, default=str))
    else:
        print(exp.render())


def register(app: typer.Typer) -> None:
    """Add the kernel commands to the top-level `uol` app."""
    app.command("compile")(user_errors(compile_cmd))
    app.command("run")(user_errors(run_cmd))
    app.command("tune")(user_errors(tune_cmd))
    app.command("explain")(user_errors(explain_cmd))
