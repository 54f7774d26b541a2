"""Optimisation reports as data: an operator (or an HCF scenario) with config, measurements, figures."""

from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Mapping, Sequence

import uol_core
from profilers.callgrind import CallgrindUnavailable
from profilers.compare import compare
from profilers.flame import FlameNode
from profilers.hotspots import _kernel_source, kernel_hotspots
from profilers.pyinstrument_source import _compile_api, op_spec_text, profile_call
from profilers.roofline_points import RooflinePoint, point, resolve, roof_curve
from profilers.runs import Run
from profilers.timing import time_kernel
from profilers.traces import Timeline
from uol_core.acg.session import open_session
from uol_core.hfl.roofline import peak_key
from uol_core.odl.cost import peak_dtype
from uol_core.odl.patterns import classify
from uol_core.odl.shapes import bind_sizes, shape_of
from uol_core.runtime.build import BuildError
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.stats import thin

REPORT_VERSION = 1
# The baseline is uol_core.evaluate (the ODL's torch reference evaluator), not a torch library
# call: every label and verdict names it so ("faster than torch" would claim more).
REFERENCE_LABEL = "the reference evaluator (torch)"


def _header(kind: str, title: str) -> dict:
    return {"version": REPORT_VERSION, "kind": kind, "title": title,
            "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "tool": "uol-studio", "machine": {"system": platform.system(),
                                              "machine": platform.machine(),
                                              "python": platform.python_version()},
            "notes": []}


def operator_report(op_spec: str, sizes: Mapping[str, int], target: str = "host",
                    config: dict | str | None = None, *, repeats: int = 7,
                    hotspots: bool = True, hotspot_reps: int = 1,
                    compare_targets: Sequence[str] = ()) -> dict:
    """Compile, verify, time, profile and explain one operator; returns the report's data."""
    import torch

    text = op_spec_text(op_spec)
    op = uol_core.parse(text)
    sizes = bind_sizes(op, sizes)
    cost = uol_core.op_cost(op, sizes)
    report = _header("operator", f"Optimisation report: {op.name}")
    report["op"] = {"name": op.name, "odl": text, "pattern": classify(op).kind, "sizes": sizes,
                    "flops": cost.flops, "bytes": cost.bytes, "intensity": cost.intensity}
    inputs = random_inputs(op, sizes)
    compile_fn = _compile_api()

    def compile_and_run():
        kernel = compile_fn(op, shapes=sizes, target=target, backend="c", config=config)
        return kernel, kernel(**inputs)
    # the flame graph covers the whole pipeline once: solve, rank, emit, gcc, first call
    prof = profile_call(compile_and_run, label=f"compile + run {op.name}")
    kernel, out = prof.result
    report["flame"] = prof.tree.to_dict()
    tgt = kernel.target
    report["target"] = {"name": tgt.name, "peak_gflops": dict(tgt.peak_gflops),
                        "bandwidth_gbps": tgt.mem_bandwidth_gbps}
    report["config"] = dict(kernel.config)

    ref = uol_core.evaluate(op, **inputs)
    ref_out = ref if isinstance(ref, torch.Tensor) else ref[op.outputs[0].name]
    got = out if isinstance(out, torch.Tensor) else out[op.outputs[0].name]
    err = (got - ref_out).abs().max().item() if got.numel() else 0.0
    report["verification"] = {"max_abs_err": err, "reference": "uol_core.evaluate (torch)",
                              "ok": bool(torch.allclose(got, ref_out, rtol=1e-3, atol=1e-3))}

    c_time = time_kernel(lambda: kernel(**inputs), f"C {tgt.name}", "c", repeats=repeats,
                         flops=cost.flops, nbytes=cost.bytes, min_seconds=0.05)
    torch_time = time_kernel(lambda: uol_core.evaluate(op, **inputs), REFERENCE_LABEL, "torch",
                             repeats=repeats, flops=cost.flops, nbytes=cost.bytes,
                             min_seconds=0.05)
    report["measurements"] = [c_time.to_dict(), torch_time.to_dict()]
    report["notes"].append("baseline 'torch' is uol_core.evaluate (the torch reference evaluator "
                           "of the ODL), not a hand-picked torch library call")
    if c_time.noisy or torch_time.noisy:
        report["notes"].append("timings flagged noisy (IQR > 10 % of the median or outliers): "
                               "the machine was busy; rerun on an idle machine before concluding")

    try:
        measured = {"gflops": c_time.gflops, "median_s": c_time.median_s}
        expl = kernel.explain(measured=measured)
        report["explanation"] = expl.to_dict()
        report["explanation_text"] = expl.render()
    except Exception as exc:  # an explanation is optional; the report says why it is missing
        report["notes"].append(f"no explanation: {exc}")
    report["history"] = _history(op, sizes, tgt, report["notes"])

    # held to the peak of the units the op runs on (a bf16 GEMM: the bf16 peak)
    wanted = peak_dtype(op)
    peak = peak_key(tgt, wanted)
    curves = [roof_curve(tgt, peak)] + [roof_curve(t, peak_key(resolve(t), wanted))
                                        for t in compare_targets if t != tgt.name]
    placed = [roof_point(f"C ({_cfg_short(kernel.config)})", cost.flops, cost.bytes,
                         c_time.median_s, tgt, report["notes"], peak),
              roof_point(REFERENCE_LABEL, cost.flops, cost.bytes, torch_time.median_s, tgt,
                         report["notes"], peak)]
    report["roofline"] = {"curves": [c.to_dict() for c in curves],
                          "points": [p.to_dict() for p in placed if p is not None]}

    hot = None
    if hotspots:
        src = _kernel_source(kernel)
        shapes = {n: shape_of(op, n, sizes) for n in src.meta.get("args", [])}
        try:  # callgrind where valgrind decodes the kernel, else the cycle-counter build
            hot = kernel_hotspots(src, shapes, reps=hotspot_reps, odl_text=text).to_dict()
            report["kernel_source"] = src.text
        except (CallgrindUnavailable, BuildError) as exc:
            report["notes"].append(str(exc))
            report["hotspots_missing"] = str(exc)
    else:
        report["hotspots_missing"] = "per-line hotspots were not requested"
    report["hotspots"] = hot
    base = Run(REFERENCE_LABEL, op.name, tgt.name, "torch", {}, dict(sizes),
               torch_time.median_s,
               torch_time.iqr_s, cost.flops, cost.bytes, samples=thin(torch_time.samples))
    mine = Run(f"C {_cfg_short(kernel.config)}", op.name, tgt.name, "c", dict(kernel.config),
               dict(sizes), c_time.median_s, c_time.iqr_s, cost.flops, cost.bytes, hotspots=hot,
               samples=thin(c_time.samples))
    report["runs"] = {"baseline": base.to_dict(), "kernel": mine.to_dict()}
    report["comparison"] = compare(base, mine).to_dict()
    return report


def scenario_report(title: str, timeline: Timeline, summary: Mapping | None = None,
                    tables: Mapping[str, Sequence[Mapping]] | None = None) -> dict:
    """Report of an HCF scenario (or any timeline): its Gantt, a summary and tables of results."""
    report = _header("scenario", title)
    report["summary"] = dict(summary or {})
    report["timeline"] = timeline.to_dict()
    report["tables"] = {k: [dict(r) for r in v] for k, v in (tables or {}).items()}
    return report


def roof_point(label: str, flops: float, nbytes: float, seconds: float | None, target,
               notes: list, dtype: str = "fp32") -> RooflinePoint | None:
    """A timed run's roofline point against the `dtype` peak, or None (with a note) when it
    cannot stand there: no time, or a rate above the target's roof. Above the compute roof
    only a wrong time or FLOP count gets; above the memory roof, also a working set that
    stayed in a cache between timed calls (the memory roof is DRAM's)."""
    if not seconds:
        notes.append(f"{label}: no time, so no roofline point")
        return None
    placed = point(label, flops, nbytes, seconds, target, dtype)
    if placed.achieved_gflops > placed.attainable_gflops:
        why = ("its time or FLOP count is wrong" if placed.bound == "compute" else
               f"its {nbytes / 2 ** 20:,.1f} MiB stayed in a cache between the timed calls, "
               "or its time is wrong")
        notes.append(f"{label}: {placed.achieved_gflops:,.0f} GFLOP/s is above the roof of "
                     f"{placed.target} ({placed.attainable_gflops:,.0f} GFLOP/s at "
                     f"{placed.intensity:.3g} FLOP/B): {why}, so it is not placed on the "
                     "roofline")
        return None
    return placed


def _history(op, sizes: dict, target, notes: list) -> list[dict]:
    """Rows of the tuning database for this op, sizes and target (oldest first)."""
    try:
        session = open_session(op, sizes, target)  # the GEMM or the pattern tuner's records
        try:
            rows = session.db.rows(session.key)
        finally:
            session.close()
    except Exception as exc:  # no database yet, or no tuner for this pattern
        notes.append(f"no tuning history: {exc}")
        return []
    keep = ("id", "ts", "config", "status", "reason", "median_s", "iqr_s", "gflops",
            "predicted_gflops")
    return [{k: r.get(k) for k in keep} for r in rows]


def _cfg_short(config: Mapping) -> str:
    keys = ("isa", "mr", "nr", "kc", "threads")
    return ",".join(f"{k}={config[k]}" for k in keys if k in config)


def flame_of(report: Mapping) -> FlameNode | None:
    """The report's flame tree as an object."""
    return FlameNode.from_dict(report["flame"]) if report.get("flame") else None
