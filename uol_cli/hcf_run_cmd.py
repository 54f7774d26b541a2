"""`uol hcf run-pipeline`: a real pipeline-parallel training on gloo processes, measured per rank,
against the simulator; a straggler and its rebalance; elastic recovery from a SIGKILL under torchrun.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json
import tempfile

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from hcf_sim.errors import HcfError

console = Console()


def _ms(t: float) -> str:
    return f"{t * 1e3:.2f}"


def _msl(values: list[float]) -> str:
    return "/".join(_ms(v) for v in values)


def _phase_table(title: str, ph: dict, stages: int) -> Table:
    tab = Table("rank", "fwd ms/mb", "bwd ms/mb", "recv wait ms/mb", "busy ms/step", title=title)
    for r in range(stages):
        st = ph["stage_times"][str(r)]
        tab.add_row(str(r) + (" (straggler)" if r in ph["stragglers"] else ""), _ms(st["F"]), _ms(st["B"]),
                    _ms(st["recv"]), _ms(ph["compute_s"][r]))
    return tab


def _check_line(check: dict) -> str:
    """The prediction with its interval on this host, the measured step and the verdict."""
    low, high = check["interval_s"]
    noise = check.get("host_noise") or {}
    verdict = "inside the interval" if check["inside_interval"] else "outside the interval"
    if not check["inside_interval"] and check["within_tolerance"]:
        verdict += f", within {check['tolerance']:.0%}"
    host = (f"; host: load {noise['loadavg']:.1f} on {noise['cores']} cores, CPU steal {noise['steal_share']:.1%}, "
            f"wake-up {noise['wake_median_s'] * 1e6:.0f}/{noise['wake_p90_s'] * 1e6:.0f} µs (median/p90)"
            if noise else "")
    return (f"check: predicted {_ms(check['predicted_step_s'])} ms, interval {_ms(low)}-{_ms(high)} ms, measured "
            f"{_ms(check['measured_step_s'])} ms ({check['error']:+.1%}): {verdict}, "
            f"{'PASS' if check['passes'] else 'FAIL'}{host}")


def _print_report(rep: dict) -> None:
    cfg = rep["config"]
    names = ["before rebalance", "after rebalance"] if len(rep["phases"]) > 1 else ["measured"]
    for name, ph in zip(names, rep["phases"], strict=True):
        console.print(_phase_table(f"{cfg['schedule']}, {cfg['stages']} stages x {cfg['microbatches']} micro-batches, "
                                   f"blocks per stage {ph['split']} ({name})", ph, cfg["stages"]))
        console.print(f"step: measured {_ms(ph['step_s'])} ms, simulated {_ms(ph['sim_step_s'])} ms for the "
                      f"measured stage times ({ph['sim_error']:+.1%}); bubble fraction measured "
                      f"{ph['bubble_fraction']:.1%}, simulated {ph['sim_bubble_fraction']:.1%}; "
                      f"stage-to-stage delay {ph['p2p_s'] * 1e6:.0f} µs")
        if "check" in ph:
            console.print(_check_line(ph["check"]))
    host = rep["phases"][-1].get("host_calibration")
    if host and rep.get("held_out"):
        console.print(f"host model from this run: CPU per micro-batch fwd {_msl(host['fwd_cpu_s'])} / bwd "
                      f"{_msl(host['bwd_cpu_s'])} ms, framework {_msl(host['action_cpu_s'])} ms per action, share "
                      f"of a core per computing rank {', '.join(f'{x:.2f}' for x in host['speed'])} (alone, both), "
                      f"handover {_ms(host['handover_s'])} ms")
    if "rebalance" in rep:
        rb = rep["rebalance"]
        fastest = min(rb["slowdown"])
        relative = ", ".join(f"{s / fastest:.2f}" for s in rb["slowdown"])
        console.print(f"rebalance: blocks {rb['before']} -> {rb['after']} (stage slowdowns {relative}), step "
                      f"{_ms(rb['step_s_before'])} -> {_ms(rb['step_s_after'])} ms: {rb['gain']:.1%} faster "
                      f"(re-partition took {_ms(rb['repartition_s'])} ms)")
    for held in rep.get("held_out", []):
        console.print(f"held-out {held['held_out']}: {held['schedule']} x {held['microbatches']} predicted by the "
                      f"host model calibrated on {held['calibrated_on']} ({held['work']} work) "
                      f"{_ms(held['sim_step_s'])} ms"
                      + (f" (interval {_ms(held['interval_s'][0])}-{_ms(held['interval_s'][1])} ms, measured "
                         f"{'inside' if held['inside_interval'] else 'outside'})" if "interval_s" in held else "")
                      + ", measured "
                      f"{_ms(held['step_s'])} ms (mean step; {held['error']:+.1%}; share of a core per computing rank "
                      f"{', '.join(f'{x:.2f}' for x in held['host_speed'])})")
    rec = rep.get("recovery")
    if rec:
        console.print(f"elastic: rank {rep['killed_rank']} SIGKILLed after step {rec['last_step_before_kill']}; "
                      f"detected in {_ms(rec['detection_s'])} ms, restarted in {rec['restart_s']:.2f} s, imports "
                      f"{rec['imports_s']:.2f} s, ranks ready {rec['ready_s']:.2f} s after the kill (checkpoint "
                      f"reload {_ms(rec['reload_s'])} ms), "
                      f"resumed from step {rec['resumed_from_step']}, {rec['lost_steps']} step(s) lost, back at the "
                      f"kill point after {rec['back_to_kill_point_s']:.2f} s; largest loss difference to the "
                      f"uninterrupted run {rep['loss_max_abs_diff']:.2e}")


def run_pipeline_command(
        stages: int = typer.Option(2, help="pipeline stages = gloo processes (2-4 on a small machine)"),
        microbatches: int = typer.Option(4, help="micro-batches per step"),
        schedule: str = typer.Option("1f1b", help="gpipe | 1f1b | interleaved; a list (1f1b,gpipe,1f1b:8) runs each "
                                                  "(name:M with M micro-batches) and predicts the later ones "
                                                  "from the first run's calibration (and from an earlier "
                                                  "run of their own schedule)"),
        layers: int = typer.Option(8, help="transformer blocks"),
        d_model: int = typer.Option(64, help="model width"),
        batch: int = typer.Option(16, help="sequences per step"),
        steps: int = typer.Option(6, help="training steps"),
        slow_rank: int = typer.Option(-1, help="rank given extra work (a straggler); -1: none"),
        slow_factor: int = typer.Option(2, help="the straggler runs each of its blocks this many times"),
        rebalance_at: int = typer.Option(0, help="re-partition the blocks from measured stage times at this step"),
        kill_rank: int = typer.Option(-1, help="elastic run under torchrun: SIGKILL this rank mid-run"),
        kill_after: int = typer.Option(4, help="... once it has finished this step"),
        checkpoint_every: int = typer.Option(2, help="distributed checkpoint every K steps (elastic run)"),
        events: str = typer.Option(None, help="folder for the per-rank event files (kept; default: temporary)"),
        timeout: float = typer.Option(300.0, help="seconds before a run is stopped"),
        as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Train a small transformer split into stages with torch.distributed.pipelining (gloo, 127.0.0.1): per-rank
    forward/backward/send/recv times, the simulator's step for them, a straggler's rebalance, elastic recovery."""
    from hcf_sim.pipelines.stage_model import PipeConfig

    names = [s.strip() for s in schedule.split(",") if s.strip()]
    if not names:
        raise HcfError("give a schedule: gpipe, 1f1b or interleaved")
    first, _, count = names[0].partition(":")
    if any(not n.partition(":")[2].isdigit() for n in names if ":" in n):
        raise HcfError(f"write a schedule with its micro-batch count as name:M, e.g. gpipe:8, got {schedule!r}")
    cfg = PipeConfig(stages=stages, microbatches=int(count or microbatches), schedule=first, layers=layers, d_model=d_model,
                     batch=batch, steps=steps, slow_rank=slow_rank, slow_factor=slow_factor if slow_rank >= 0 else 1,
                     rebalance_at=rebalance_at)
    cfg.check()
    with tempfile.TemporaryDirectory(prefix="uol-pipe-") as tmp:
        folder = events or tmp
        rep = _measure(cfg, names, folder, timeout, as_json)
        if kill_rank >= 0:
            rep.update(_elastic(cfg, kill_rank, kill_after, checkpoint_every, folder, timeout, rep["losses"]))
    if as_json:
        typer.echo(json.dumps(rep, indent=2, default=str))
    else:
        _print_report(rep)


def _measure(cfg, names: list[str], folder: str, timeout: float, quiet: bool) -> dict:
    import dataclasses
    import os

    from hcf_sim.pipelines.paired import run_paired, variant_name
    from hcf_sim.pipelines.real_pipeline import run_pipeline

    with Progress(console=Console(stderr=True), disable=quiet, transient=True) as prog:
        if len(names) == 1:
            task = prog.add_task(f"{cfg.schedule}: steps", total=cfg.steps)
            return run_pipeline(cfg, os.path.join(folder, cfg.schedule), timeout,
                                progress=lambda done, total: prog.update(task, completed=done))
        # held-out schedules ("gpipe", or "gpipe:8" for another micro-batch count) run in the same
        # processes, their steps taking turns with the calibration's, so they share the host's load
        cfgs = [cfg]
        for name in names[1:]:
            sched, _, count = name.partition(":")
            cfgs.append(dataclasses.replace(cfg, schedule=sched, microbatches=int(count or cfg.microbatches)))
        task = prog.add_task(f"{', '.join(names)}: steps taking turns", total=cfg.steps * len(cfgs))
        paired = run_paired(cfgs, folder, timeout, progress=lambda done, total: prog.update(task, completed=done))
    rep = paired["runs"][variant_name(cfg)]
    rep["held_out"] = paired["held_out"]
    return rep


def _elastic(cfg, kill_rank: int, kill_after: int, every: int, folder: str, timeout: float,
             reference: list[float]) -> dict:
    import os

    from hcf_sim.pipelines.elastic import ElasticPlan, run_elastic

    if cfg.slow_rank >= 0 or cfg.rebalance_at:
        raise HcfError("run the elastic recovery without --slow-rank and --rebalance-at")
    with console.status("elastic run under torchrun (a rank will be killed)"):
        out = run_elastic(cfg, ElasticPlan(every, kill_rank, kill_after), os.path.join(folder, "elastic"), timeout)
    out["loss_max_abs_diff"] = max(abs(a - b) for a, b in zip(out["losses"], reference, strict=True))
    return {k: out[k] for k in ("recovery", "killed_rank", "attempts", "loss_max_abs_diff")} | {
        "elastic_losses": out["losses"]}
