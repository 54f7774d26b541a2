"""Several pipeline configurations measured in one run, their steps taking turns.

On a host shared with other jobs, the load moves within minutes: the same configuration run
twice, a minute apart, measured 130 ms and 325 ms per step here. Comparing a schedule measured
in one run with another schedule measured in the next compares two loads as much as two
schedules. Here the ranks build every configuration (its own model copy and schedule) and run
one step of each in turn, so every configuration sees the same load over the same minutes.
Each configuration's events go to a folder of its own, in the format of a single run, so
`hcf_sim.pipelines.real_pipeline.analyse` reads each as it reads a single run.

The first configuration calibrates the host model (`hcf_sim.pipelines.host_model`); the others are
held out: their steps are predicted from that calibration and compared with their measurement.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.rank_events import RankEventWriter, now, read_events
from hcf_sim.pipelines.real_pipeline import (
    _Pipe,
    analyse,
    fresh_folder,
    launch_ranks,
    predict_held_out,
)
from hcf_sim.pipelines.stage_model import PipeConfig, RankClock, even_split, full_state, train_step
from hcf_sim.pipelines.stage_profile import profile_stage_work
from hcf_sim.runtime.host_noise import HostProbe
from hcf_sim.runtime.training import free_port


def variant_name(cfg: PipeConfig) -> str:
    """The folder name of one configuration of a paired run: schedule and micro-batches."""
    return f"{cfg.schedule}_{cfg.microbatches}"


def _paired_worker(rank: int, cfg_dicts: list[dict], port: int, folders: list[str]) -> None:
    torch.set_num_threads(1)  # one core per rank, as one device per stage
    cfgs = [PipeConfig.from_dict(d) for d in cfg_dicts]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cfgs[0].stages)
    writers = [RankEventWriter(f, rank) for f in folders]
    clocks = [RankClock(w) for w in writers]
    try:
        pipes = []
        for cfg, clock in zip(cfgs, clocks, strict=True):
            split = list(cfg.split or even_split(cfg.layers, cfg.virtual_stages))
            pipes.append((_Pipe(cfg, rank, split, full_state(cfg), clock), split))
        for step in range(cfgs[0].steps):
            for cfg, (pipe, split), clock, writer in zip(cfgs, pipes, clocks, writers, strict=True):
                t0, t1, loss = train_step(pipe, cfg, rank, step, clock)
                writer.record("step", t0, t1, step=step, loss=loss, split=split, opt_s=now() - t1,
                              cpu=clock.step_cpu[step])
                writer.flush()
            # the work each configuration gives this rank, measured beside its steps (same host
            # load), then every rank starts the next round together, so no step waits for it
            for cfg, (pipe, _), writer in zip(cfgs, pipes, writers, strict=True):
                t0 = now()
                work = profile_stage_work(cfg, rank, pipe.modules, warmup=int(step == 0), repeats=1)
                writer.record("profile", t0, now(), step=step, **work)
                writer.flush()
            dist.barrier()
    finally:
        for writer in writers:
            writer.close()
        dist.destroy_process_group()


def run_paired(cfgs: list[PipeConfig], folder: str | os.PathLike | None = None, timeout_s: float = 300.0,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Run `cfgs` (same stages and steps; schedules and micro-batch counts may differ) with their
    steps taking turns. Returns each one's `analyse` report under its name, and the held-out
    predictions of cfgs[1:] from the host model calibrated on cfgs[0]."""
    if len(cfgs) < 2:
        raise HcfError("give at least two configurations: one to calibrate on, one held out")
    for cfg in cfgs:
        cfg.check()
        if cfg.rebalance_at or cfg.slow_rank >= 0:
            raise HcfError("a paired run compares schedules: run it without --slow-rank and --rebalance-at")
    if len({(c.stages, c.steps) for c in cfgs}) > 1:
        raise HcfError("every configuration of a paired run needs the same stages and steps")
    names = [variant_name(c) for c in cfgs]
    if len(set(names)) < len(names):
        raise HcfError(f"each schedule x micro-batch count once, got {', '.join(names)}")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="uol-paired-") as tmp:
            return run_paired(cfgs, tmp, timeout_s, progress)
    folders = [fresh_folder(Path(folder) / name) for name in names]
    with HostProbe() as probe:
        launch_ranks(_paired_worker, ([c.to_dict() for c in cfgs], free_port(), [str(f) for f in folders]),
                     cfgs[0].stages, folders, cfgs[0].steps * len(cfgs), timeout_s, progress)
    runs = {name: analyse(cfg, read_events(f), probe.noise) for name, cfg, f in zip(names, cfgs, folders, strict=True)}
    calibrations = [runs[name]["phases"][-1]["host_calibration"] for name in names]
    held = [predict_held_out(calibrations[source], cfg, runs[names[i]], runs[names[source]]["check"])
            for i, cfg in enumerate(cfgs) for source in calibration_sources(cfgs, i)]
    return {"runs": runs, "calibration": calibrations[0], "held_out": held, "events_folder": str(folder)}


def calibration_sources(cfgs: list[PipeConfig], i: int) -> list[int]:
    """Which earlier configurations predict configuration i: the first (the held-out schedule, or
    micro-batch count), and the latest earlier run of the same schedule when that is another one
    (only the micro-batch count held out: the schedule's own communication pattern is known)."""
    if i == 0:
        return []
    same = [j for j in range(i) if cfgs[j].schedule == cfgs[i].schedule]
    return [0] + ([same[-1]] if same and same[-1] != 0 else [])
