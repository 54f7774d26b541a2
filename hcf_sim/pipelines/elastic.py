"""Elastic recovery of a real pipeline training: torchrun restarts, distributed checkpoints, SIGKILL.

`run_elastic` launches the 1F1B pipeline training of hcf_sim.pipelines.real_pipeline under torchrun's
elastic agent (`python -m torch.distributed.run --standalone --max-restarts N`, rendezvous on
the loopback), with a torch.distributed.checkpoint every K steps. When asked, it kills one rank
with SIGKILL once that rank has finished a given step; the agent sees the failure, stops the
other rank, restarts the group, and the ranks resume from the last complete checkpoint.
`recovery` measures detection, restart, reload and the steps lost, from the ranks' event files.

Run as a module (`-m hcf_sim.pipelines.elastic FOLDER`), it is one rank of that training.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # before the heavy imports: a restarted rank's clock starts here

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

from hcf_sim.errors import HcfError  # noqa: E402
from hcf_sim.pipelines.rank_events import RankEventTail, now, read_events  # noqa: E402
from hcf_sim.pipelines.stage_model import PipeConfig  # noqa: E402

CHECKPOINTS = "checkpoints"


@dataclass
class ElasticPlan:
    """What to run and what to break: checkpoint period, the rank to kill and after which step."""

    checkpoint_every: int = 2
    kill_rank: int = -1  # -1: an uninterrupted run
    kill_after_step: int = 3
    max_restarts: int = 1


def _latest_checkpoint(folder: Path) -> tuple[int, Path] | None:
    """The newest checkpoint whose metadata was written (DCP writes it last, so it marks a whole one)."""
    done = sorted(p for p in (folder / CHECKPOINTS).glob("step_*") if (p / ".metadata").exists())
    return (int(done[-1].name.split("_")[1]), done[-1]) if done else None


def _attempt_store(rank: int, attempt: int):
    """torchrun's store, with this attempt's keys apart: the agent may keep one store across
    restarts, and a restarted rank must not read the dead ranks' gloo addresses of the last one."""

    import torch.distributed as dist

    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"]),
                          is_master=not shared and rank == 0, timeout=timedelta(seconds=120))
    return dist.PrefixStore(f"uol/attempt_{attempt}", store)


def _rank_main(folder: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    # deferred: at the top it would load scipy (the simulator's fits) into every rank before its clock starts
    from hcf_sim.pipelines.rank_events import RankEventWriter
    from hcf_sim.pipelines.real_pipeline import _Pipe
    from hcf_sim.pipelines.stage_model import RankClock, even_split, full_state, train_step

    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    spec = json.loads((folder / "elastic.json").read_text())
    cfg, every = PipeConfig.from_dict(spec["config"]), spec["checkpoint_every"]
    writer = RankEventWriter(folder, rank)
    writer.record("start", STARTED, now(), pid=os.getpid(), attempt=attempt)
    writer.flush()
    dist.init_process_group("gloo", store=_attempt_store(rank, attempt), rank=rank,
                            world_size=int(os.environ["WORLD_SIZE"]))
    clock = RankClock(writer)
    try:
        split = list(cfg.split or even_split(cfg.layers, cfg.stages))
        pipe = _Pipe(cfg, rank, split, full_state(cfg), clock)
        first = 0
        found = _latest_checkpoint(folder)
        if found is not None:
            t0 = now()
            state = {"model": pipe.modules[0].state_dict()}
            dcp.load(state, checkpoint_id=str(found[1]))
            pipe.modules[0].load_state_dict(state["model"])
            first = found[0]
            writer.record("reload", t0, now(), attempt=attempt, from_step=first)
        writer.record("ready", now(), attempt=attempt, first_step=first)
        for step in range(first, cfg.steps):
            t0, t1, loss = train_step(pipe, cfg, rank, step, clock)
            writer.record("step", t0, t1, step=step, loss=loss, split=split, attempt=attempt)
            writer.flush()  # before the checkpoint: a kill may land while it is written
            if (step + 1) % every == 0 and step + 1 < cfg.steps:
                t2 = now()
                # the state after `step + 1` steps; each rank writes its stage, rank 0 the metadata last
                dcp.save({"model": pipe.modules[0].state_dict()},
                         checkpoint_id=str(folder / CHECKPOINTS / f"step_{step + 1:06d}"))
                writer.record("checkpoint", t2, now(), step=step + 1, attempt=attempt)
                writer.flush()
    finally:
        writer.close()
        dist.destroy_process_group()


def _alive(pid: int) -> bool:
    # deferred: at the top it would load scipy (the simulator's fits) into every rank before its clock starts
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_elastic(cfg: PipeConfig, plan: ElasticPlan, folder: str | os.PathLike, timeout_s: float = 180.0) -> dict:
    """Train `cfg` (1F1B, one chunk per rank) under torchrun; kill `plan.kill_rank` with SIGKILL after
    its step `plan.kill_after_step` when asked. Returns losses per step and the recovery figures."""
    cfg.check()
    if cfg.schedule == "interleaved" or cfg.rebalance_at:
        raise HcfError("the elastic run uses one chunk per rank and a fixed split: use 1f1b or gpipe, no rebalance")
    if plan.kill_rank >= cfg.stages or plan.checkpoint_every < 1:
        raise HcfError(f"kill a rank below {cfg.stages}; checkpoint every >= 1 step")
    if plan.kill_rank >= 0 and not plan.checkpoint_every <= plan.kill_after_step < cfg.steps - 1:
        raise HcfError(f"kill after a checkpoint was written (step >= {plan.checkpoint_every}) and before "
                       f"the last step ({cfg.steps - 1})")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("rank*.jsonl"), *out.glob("torchrun.log")]:
        old.unlink()
    if (out / CHECKPOINTS).exists():
        shutil.rmtree(out / CHECKPOINTS)
    (out / "elastic.json").write_text(json.dumps({"config": cfg.to_dict(), "checkpoint_every": plan.checkpoint_every}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={cfg.stages}", f"--max-restarts={plan.max_restarts}", "--monitor-interval=0.1",
           "-m", "hcf_sim.pipelines.elastic", str(out)]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"}
    log = open(out / "torchrun.log", "w")  # noqa: SIM115 (closed below, after the agent exits)
    agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    tail, marks = RankEventTail(out), {}
    deadline = time.monotonic() + timeout_s
    try:
        while agent.poll() is None:
            if time.monotonic() > deadline:
                raise HcfError(f"the elastic run did not finish within {timeout_s:.0f} s (log: {out / 'torchrun.log'})")
            tail.poll()
            _watch(tail.events, plan, marks)
            time.sleep(0.01)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        log.close()
    if agent.returncode != 0:
        lines = (out / "torchrun.log").read_text().strip().splitlines()[-5:]
        raise HcfError(f"torchrun failed (status {agent.returncode}): " + " | ".join(lines))
    return recovery(read_events(out), cfg, plan, marks)


def _watch(events: list[dict], plan: ElasticPlan, marks: dict) -> None:
    """Kill the chosen rank once it has finished its step; then time until the agent has
    stopped the surviving ranks (the failure is detected and the group torn down)."""
    if plan.kill_rank < 0:
        return
    if "kill" not in marks:
        pids = {e["rank"]: e["pid"] for e in events if e["kind"] == "start" and e["attempt"] == 0}
        if any(e["kind"] == "step" and e["rank"] == plan.kill_rank and e["attempt"] == 0
               and e["step"] >= plan.kill_after_step for e in events):
            marks["survivors"] = [p for r, p in pids.items() if r != plan.kill_rank]
            os.kill(pids[plan.kill_rank], signal.SIGKILL)
            marks["kill"] = now()
    elif "detected" not in marks and not any(_alive(p) for p in marks["survivors"]):
        marks["detected"] = now()


def recovery(events: list[dict], cfg: PipeConfig, plan: ElasticPlan, marks: dict) -> dict:
    """Loss per step (the last attempt's value wins), and when a rank was killed: detection,
    restart, reload, steps lost and the total, beside hcf_sim.faults' checkpoint-restart model."""
    # deferred: at the top it would load scipy (the simulator's fits) into every rank before its clock starts
    from hcf_sim.faults import recovery_time

    steps = {}
    for e in sorted((e for e in events if e["kind"] == "step" and e.get("loss") is not None),
                    key=lambda e: e["attempt"]):
        steps[e["step"]] = e["loss"]
    out: dict = {"config": cfg.to_dict(), "checkpoint_every": plan.checkpoint_every, "killed_rank": plan.kill_rank,
                 "losses": [steps[s] for s in sorted(steps)], "attempts": 1 + max(e.get("attempt", 0) for e in events)}
    if "kill" not in marks:
        return out
    kill = marks["kill"]
    before = [e for e in events if e["kind"] == "step" and e["attempt"] == 0]
    last_done = max(e["step"] for e in before if e["rank"] == plan.kill_rank)
    starts = [e for e in events if e["kind"] == "start" and e["attempt"] == 1]
    reloads = [e for e in events if e["kind"] == "reload" and e["attempt"] == 1]
    ready = [e for e in events if e["kind"] == "ready" and e["attempt"] == 1]
    if not (starts and reloads and ready):
        raise HcfError("the killed run did not come back from its checkpoint (see torchrun.log)")
    resumed = reloads[0]["from_step"]
    # back where it was: the killed step done again (or, when none was lost, the next one done)
    back = [e["t1"] for e in events if e["kind"] == "step" and e["attempt"] == 1
            and e["step"] == max(last_done, resumed)]
    step_s = sorted(e["t1"] - e["t0"] for e in before)[len(before) // 2]
    writes = [e["t1"] - e["t0"] for e in events if e["kind"] == "checkpoint"]
    detected = marks.get("detected", min(e["t0"] for e in starts))
    figures = {
        "detection_s": detected - kill,
        "restart_s": min(e["t0"] for e in starts) - detected,  # rendezvous + spawn until the rank's module runs
        "imports_s": max(e["t1"] - e["t0"] for e in starts),  # torch, pipelining, checkpoint modules
        "reload_s": max(e["t1"] - e["t0"] for e in reloads),
        "resumed_from_step": resumed, "last_step_before_kill": last_done,
        "lost_steps": last_done + 1 - resumed,
        "back_to_kill_point_s": (max(back) - kill) if back else None,
        "step_s": step_s, "checkpoint_write_s": sum(writes) / len(writes) if writes else 0.0,
    }
    figures["ready_s"] = max(e["t0"] for e in ready) - kill
    model = recovery_time(plan.checkpoint_every * step_s, figures["checkpoint_write_s"], figures["ready_s"])
    figures["model"] = {"lost_work_s": model.lost_work, "restart_s": model.restart, "total_s": model.total,
                        "measured_lost_work_s": figures["lost_steps"] * step_s}
    out["recovery"] = figures
    return out


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]))
