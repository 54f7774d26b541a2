"""Real pipeline-parallel training on gloo processes (torch.distributed.pipelining), measured per
micro-batch, compared with the simulator, and re-partitioned at a step boundary when a stage lags.

`run_pipeline` spawns one process per stage on 127.0.0.1. Every rank streams its events to a
JSON-lines file (hcf_sim.pipelines.rank_events); `analyse` turns them into per-stage times, feeds those to
`hcf_sim.pipelines.simulator.simulate_pipeline` and reports the simulated against the measured step.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.host_model import HostCalibration, calibrate, retarget, simulate_host
from hcf_sim.pipelines.rank_events import (
    RankEventTail,
    RankEventWriter,
    completed_steps,
    now,
    read_events,
    stage_times,
    step_times,
    step_view,
    timeline_rows,
    transfer_times,
)
from hcf_sim.pipelines.simulator import rebalance
from hcf_sim.pipelines.stage_model import (
    PipeConfig,
    RankClock,
    build_stage,
    even_split,
    full_state,
    make_schedule,
    timed_stage,
    train_step,
)
from hcf_sim.pipelines.uncertainty import simulate_steps, step_check
from hcf_sim.runtime.host_noise import HostNoise, HostProbe
from hcf_sim.runtime.training import free_port

STRAGGLER_RATIO = 1.25  # a rank this much slower than the median rank is called a straggler
PING_ROUNDS = 10


class _Pipe:
    """This rank's stages (one, or `chunks` when interleaved), their schedule and optimizer."""

    def __init__(self, cfg: PipeConfig, rank: int, split: list[int], weights: dict, clock: RankClock) -> None:
        per_rank = cfg.virtual_stages // cfg.stages
        repeat = cfg.slow_factor if rank == cfg.slow_rank else 1
        self.modules, stages = [], []
        for chunk in range(per_rank):
            virtual = chunk * cfg.stages + rank
            module = build_stage(cfg, split, virtual, weights, repeat)
            self.modules.append(module)
            stages.append(timed_stage(module, virtual, cfg.virtual_stages, clock, chunk))
        self.schedule = make_schedule(cfg, stages)
        self.optimizer = torch.optim.SGD([p for m in self.modules for p in m.parameters()], lr=cfg.lr)

    def state(self) -> dict[str, torch.Tensor]:
        """This rank's slice of the model's weights."""
        return {k: v.detach().clone() for m in self.modules for k, v in m.state_dict().items()}


def _ping(cfg: PipeConfig, rank: int) -> float:
    """One-way time of an activation tensor between ranks 0 and 1 (half the median round trip)."""
    x = torch.zeros(cfg.batch // cfg.microbatches, cfg.seq, cfg.d_model)
    rounds = []
    for _ in range(PING_ROUNDS):
        t0 = now()
        if rank == 0:
            dist.send(x, 1)
            dist.recv(x, 1)
        elif rank == 1:
            dist.recv(x, 0)
            dist.send(x, 0)
        rounds.append(now() - t0)
    out = torch.tensor([statistics.median(rounds) / 2 if rank == 0 else 0.0])
    dist.broadcast(out, 0)
    return float(out)


def _rebalanced(cfg: PipeConfig, rank: int, split: list[int], pipe: _Pipe, clock: RankClock,
                writer: RankEventWriter, step: int) -> tuple[list[int], _Pipe]:
    """At a step boundary: gather every rank's measured busy time, re-split the blocks with
    `hcf_sim.pipelines.simulator.rebalance`, move the weights and rebuild the stages."""
    t0 = now()
    mine = statistics.median([clock.busy[s] for s in range(cfg.warmup, step)])
    measured: list[float] = [0.0] * cfg.stages
    dist.all_gather_object(measured, mine)
    plan = rebalance(split, measured)
    weights: list[dict] = [{}] * cfg.stages
    dist.all_gather_object(weights, pipe.state())  # every rank learns the whole current model
    merged = {k: v for part in weights for k, v in part.items()}
    new_split = plan["layers_after"]
    new_pipe = _Pipe(cfg, rank, new_split, merged, clock)
    writer.record("rebalance", t0, now(), step=step, measured=measured, before=split, after=new_split,
                  slowdown=plan["slowdown"], predicted_speedup=plan["speedup"])
    return new_split, new_pipe


def _worker(rank: int, cfg_dict: dict, port: int, folder: str) -> None:
    torch.set_num_threads(1)  # one core per rank, as one device per stage
    cfg = PipeConfig.from_dict(cfg_dict)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cfg.stages)
    writer = RankEventWriter(folder, rank)
    clock = RankClock(writer)
    try:
        writer.record("start", now(), pid=os.getpid())
        t0 = now()
        p2p = _ping(cfg, rank)
        writer.record("p2p", t0, now(), one_way_s=p2p)
        split = list(cfg.split or even_split(cfg.layers, cfg.virtual_stages))
        pipe = _Pipe(cfg, rank, split, full_state(cfg), clock)
        writer.flush()
        for step in range(cfg.steps):
            if cfg.rebalance_at and step == cfg.rebalance_at:
                split, pipe = _rebalanced(cfg, rank, split, pipe, clock, writer, step)
            t0, t1, loss = train_step(pipe, cfg, rank, step, clock)
            writer.record("step", t0, t1, step=step, loss=loss, split=split, opt_s=now() - t1,
                          cpu=clock.step_cpu[step])
            writer.flush()  # the live stream: readers see each step as it ends
    finally:
        writer.close()
        dist.destroy_process_group()


def run_pipeline(cfg: PipeConfig, folder: str | os.PathLike | None = None, timeout_s: float = 120.0,
                 progress: Callable[[int, int], None] | None = None) -> dict:
    """Run `cfg` on `cfg.stages` gloo processes; events go to `folder` (a temporary one if None).
    Returns `analyse`'s report; progress(steps done, steps) is called while it runs."""
    cfg.check()
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="uol-pipe-") as tmp:
            return run_pipeline(cfg, tmp, timeout_s, progress)
    out = fresh_folder(folder)
    with HostProbe() as probe:
        launch_ranks(_worker, (cfg.to_dict(), free_port(), str(out)), cfg.stages, [out], cfg.steps, timeout_s,
                     progress)
    report = analyse(cfg, read_events(out), probe.noise)
    report["events_folder"] = str(out)
    return report


def fresh_folder(folder: str | os.PathLike) -> Path:
    """`folder`, created, without the rank files of an earlier run."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.jsonl"):
        old.unlink()
    return out


def launch_ranks(worker: Callable, args: tuple, stages: int, folders: list[Path], steps: int, timeout_s: float,
                 progress: Callable[[int, int], None] | None) -> None:
    """Run worker(rank, *args) on `stages` processes until they end, tailing the event `folders`
    for progress (steps every rank finished, summed over the folders, of `steps`)."""
    # fork: the ranks inherit the imported torch instead of importing it again (seconds each); the
    # parent has run no torch op yet, so no thread pool is copied half-initialised
    import torch.distributed.pipelining  # noqa: F401  (seconds to import: once, before the fork)
    import torch.multiprocessing as mp

    method = "fork" if "fork" in mp.get_all_start_methods() and not _torch_threads_started() else "spawn"
    ctx = mp.start_processes(worker, args=args, nprocs=stages, start_method=method, join=False)
    tails, deadline = [RankEventTail(f) for f in folders], time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=0.2):
            for tail in tails:
                tail.poll()
            if progress:
                progress(sum(len(completed_steps(t.events, stages)) for t in tails), steps)
            if time.monotonic() > deadline:
                raise HcfError(f"the pipeline run did not finish within {timeout_s:.0f} s; try fewer steps or layers")
    except mp.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        raise HcfError(f"rank {exc.error_index} failed: {last}") from None
    except mp.ProcessExitedException as exc:
        raise HcfError(f"rank {exc.error_index} died (exit {exc.exit_code}) during the pipeline run") from None
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()


def _torch_threads_started() -> bool:
    """Whether this process has more threads than its main one (fork copies none of them)."""

    return threading.active_count() > 1


def stragglers(compute_s: list[float]) -> list[int]:
    """Ranks whose measured busy time is STRAGGLER_RATIO x the median rank's or more."""
    mid = statistics.median(compute_s)
    return [r for r, t in enumerate(compute_s) if t >= STRAGGLER_RATIO * mid]


def predict_held_out(calibration: dict, cfg: PipeConfig, measured: dict, source_check: dict | None = None) -> dict:
    """A run held out from the calibration: its step predicted by the host model calibrated on
    another run (`calibration`, a phase's "host_calibration"), against its measured step. When
    both runs profiled their stage work, the held-out run's profiled work replaces the
    calibration's (`retarget`); its steps' own times are never used. With the calibration
    run's `check`, the prediction gets that run's interval in proportion (the same host, its
    steps taking turns with these)."""
    cal = HostCalibration(**calibration)
    own = measured["phases"][-1]["host_calibration"]
    profiled = cal.profile_fwd_s is not None and own.get("profile_fwd_s") is not None
    if profiled:
        cal = retarget(cal, own["profile_fwd_s"], own["profile_bwd_s"], own["chunks_per_rank"])
    sim = simulate_host(cal, cfg.stages, cfg.microbatches, cfg.schedule, cfg.chunks)
    step = measured["phases"][-1]["step_mean_s"]  # the calibration's statistic: see pipeline_paired
    held = [what for what, same in (("schedule", cal.schedule == cfg.schedule),
                                    ("micro-batch count", calibration["microbatches"] == cfg.microbatches))
            if not same]
    return {"schedule": cfg.schedule, "microbatches": cfg.microbatches, "step_s": step,
            "sim_step_s": sim.makespan, "error": (sim.makespan - step) / step,
            "calibrated_on": f"{cal.schedule} x {calibration['microbatches']}",
            "held_out": " and ".join(held) or "nothing", "work": "profiled" if profiled else "calibration's",
            "host_speed": own["speed"]} | _scaled_interval(sim.makespan, step, source_check)


def _scaled_interval(predicted: float, measured: float, check: dict | None) -> dict:
    """`check`'s interval around its own prediction, carried over to `predicted` in proportion."""
    if not check:
        return {}
    low, high = (x / check["predicted_step_s"] * predicted for x in check["interval_s"])
    return {"interval_s": [low, high], "inside_interval": low <= measured <= high}


def transfer_s(events: list[dict], steps: list[int], ping_s: float) -> float:
    """The stage-to-stage delay the simulator is given: the mean observed in the run's own steps
    (it includes waking the waiting process), else the idle ping's."""
    seen = transfer_times(events, steps)
    return statistics.fmean(seen) if seen else ping_s


def _phase(cfg: PipeConfig, events: list[dict], steps: list[int], ping_s: float,
           noise: HostNoise | None = None) -> dict:
    per_rank = stage_times(events, steps)
    p2p_s = transfer_s(events, steps, ping_s)
    if len(per_rank) < cfg.stages:
        raise HcfError(f"events of {len(per_rank)} of {cfg.stages} ranks: the run ended early")
    measured = statistics.median(step_times(events, steps))
    sim = simulate_steps(cfg, events, steps, ping_s)
    typical = min(steps, key=lambda s: abs(step_times(events, [s])[0] - measured))
    view = step_view(events, typical)
    busy = [cfg.microbatches * (per_rank[r]["F"] + per_rank[r]["B"]) for r in range(cfg.stages)]
    split = next(e["split"] for e in events if e["kind"] == "step" and e["step"] == typical)
    host = calibrate(events, steps, cfg.stages, cfg.schedule, cfg.microbatches, cfg.chunks)
    check = step_check(cfg, events, steps, ping_s, noise)
    predicted = check["predicted_step_s"]  # the one predicted step; the timeline is the mean times' run
    return {
        "host_calibration": host.to_dict(),
        "steps": steps, "split": split, "step_s": measured, "sim_step_s": predicted,
        "step_mean_s": statistics.fmean(step_times(events, steps)),
        "sim_error": (predicted - measured) / measured,
        "check": check,
        "bubble_fraction": 1 - sum(busy) / (cfg.stages * measured),
        # compute only, as measured: the framework time the simulated actions carry is not compute
        "sim_bubble_fraction": 1 - sum(busy) / (cfg.stages * predicted),
        "ideal_bubble_fraction": sim.ideal_bubble_fraction,
        "stage_times": {str(r): t for r, t in per_rank.items()}, "compute_s": busy, "p2p_s": p2p_s,
        "stragglers": stragglers(busy), "typical_step": typical,
        "measured_timeline": timeline_rows(view.events), "sim_timeline": timeline_rows(sim.events),
    }


def analyse(cfg: PipeConfig, events: list[dict], noise: HostNoise | None = None) -> dict:
    """Per phase (before/after a rebalance): measured step, per-stage times, the simulator's step
    for those times, its error and its interval on this host (`noise`, measured around the run),
    bubble fractions, both timelines; the rebalance gain."""
    done = completed_steps(events, cfg.stages)
    p2p = next((e["one_way_s"] for e in events if e["kind"] == "p2p"), 0.0)
    losses = {e["step"]: e["loss"] for e in events if e["kind"] == "step" and e.get("loss") is not None}
    report: dict = {"config": cfg.to_dict(), "p2p_one_way_s": p2p, "losses": [losses[s] for s in sorted(losses)],
                    "steps_done": len(done)}
    if cfg.rebalance_at:
        # the first step after a re-partition infers shapes again: left out like the warm-up
        before = [s for s in done if cfg.warmup <= s < cfg.rebalance_at]
        after = [s for s in done if s > cfg.rebalance_at]
        report["phases"] = [_phase(cfg, events, before, p2p, noise), _phase(cfg, events, after, p2p, noise)]
        move = next(e for e in events if e["kind"] == "rebalance")
        b, a = report["phases"][0]["step_s"], report["phases"][1]["step_s"]
        report["rebalance"] = {"before": move["before"], "after": move["after"], "slowdown": move["slowdown"],
                               "measured_stage_s": move["measured"], "predicted_speedup": move["predicted_speedup"],
                               "step_s_before": b, "step_s_after": a, "gain": 1 - a / b,
                               "repartition_s": move["t1"] - move["t0"]}
    else:
        report["phases"] = [_phase(cfg, events, [s for s in done if s >= cfg.warmup], p2p, noise)]
    report["check"] = report["phases"][-1]["check"]  # the prediction for the run as it ends
    return report


def live_snapshot(cfg: PipeConfig, events: list[dict]) -> dict:
    """What a monitor draws while the run goes on: the latest finished step of every rank (its
    timeline and the simulator's for the stage times measured so far), steps done, last loss."""
    done = [s for s in completed_steps(events, cfg.stages) if s >= min(cfg.warmup, cfg.steps - 1)]
    out: dict = {"steps_done": len(completed_steps(events, cfg.stages)), "steps": cfg.steps}
    losses = [e["loss"] for e in events if e["kind"] == "step" and e.get("loss") is not None]
    out["loss"] = losses[-1] if losses else None
    if not done:
        return out
    latest = done[-1]
    if cfg.rebalance_at and latest >= cfg.rebalance_at:
        done = [s for s in done if s > cfg.rebalance_at] or [latest]
    p2p = next((e["one_way_s"] for e in events if e["kind"] == "p2p"), 0.0)
    per_rank = stage_times(events, done)
    if len(per_rank) == cfg.stages:
        sim = simulate_steps(cfg, events, done, p2p)
        out["sim_timeline"] = timeline_rows(sim.events)
        out["sim_step_s"] = sim.makespan
    out["measured_timeline"] = timeline_rows(step_view(events, latest).events)
    out["step"], out["step_s"] = latest, step_times(events, [latest])[0]
    return out
