"""A pipeline step on a host whose cores are shared: the simulator calibrated from one real run.

The plain simulator (`hcf_sim.pipelines.simulator.simulate_pipeline`) takes each stage's wall time per
micro-batch as a constant. On a host where the ranks compete with each other and with other
jobs for cores, a micro-batch's wall time is not a property of the stage: the same forward
takes 2 ms of CPU in every schedule but 3-10 ms of wall time, depending on who else runs.
This model separates what belongs to the stage from what belongs to the host:

* work (per rank, per micro-batch): forward and backward CPU seconds of the rank's thread, and
  the framework's CPU seconds per schedule action outside them (autograd set-up, posting the
  sends and receives, the loss): the same in every schedule;
* speed: the share of a core a computing rank gets, measured as CPU / wall over the run's
  compute events, once for a rank computing alone and once while another rank computes too;
* handover: the delay from a producer's compute end to the consumer's start when the consumer
  is waiting (the transfer plus waking the consumer and the producer's comm thread), fitted
  so that the calibration run's own step is reproduced.

`calibrate` reads these from one run's per-rank events; `simulate_host` replays any schedule and
micro-batch count with them, with ranks computing at the speed of the number of ranks busy.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.simulator import _chunks, _order
from hcf_sim.simulation.overlap import Event

HANDOVER_SEARCH_S = 0.2  # upper end of the handover fit: a delay above this is a broken run, not a host


@dataclass
class HostCalibration:
    """The parameters of one calibration run (times in seconds)."""

    fwd_cpu_s: list[float]  # per rank: forward CPU per micro-batch (its chunks summed)
    bwd_cpu_s: list[float]  # per rank: backward CPU per micro-batch
    action_cpu_s: list[float]  # per rank: framework CPU per schedule action, outside forward/backward
    speed: list[float]  # speed[n - 1]: share of a core per computing rank while n ranks compute
    handover_s: float  # producer's compute end -> the consumer's earliest compute start
    schedule: str = ""
    microbatches: int = 0
    step_s: float = 0.0  # the calibration run's measured step (mean over its steps)
    chunks_per_rank: int = 1
    # per rank: forward/backward CPU per micro-batch of the stage modules alone (hcf_sim.pipelines.stage_profile),
    # when the run profiled them; what fwd_cpu_s/bwd_cpu_s hold beyond it is the runtime's, per action
    profile_fwd_s: list[float] | None = None
    profile_bwd_s: list[float] | None = None

    def to_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)


def _overlap(a0: float, a1: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for b0, b1 in spans)


def _speeds(compute: list[dict], stages: int) -> list[float]:
    """CPU / wall of compute events, split by whether another rank computed at the same time."""
    spans = {r: [(e["t0"], e["t1"]) for e in compute if e["rank"] == r] for r in range(stages)}
    cpu, wall = [0.0, 0.0], [0.0, 0.0]  # [alone, with another rank]
    for e in compute:
        length = e["t1"] - e["t0"]
        if length <= 0:
            continue
        others = [s for r, ss in spans.items() if r != e["rank"] for s in ss]
        shared = min(1.0, _overlap(e["t0"], e["t1"], others) / length)
        for k, part in ((0, 1 - shared), (1, shared)):
            cpu[k] += e["cpu"] * part
            wall[k] += length * part
    overall = sum(cpu) / sum(wall)
    alone = cpu[0] / wall[0] if wall[0] > 0 else overall
    together = cpu[1] / wall[1] if wall[1] > 0 else overall
    # more ranks than two: the cores left to the job shared evenly (a first-order guess)
    return [min(1.0, alone), *[min(1.0, together * 2 / n) for n in range(2, stages + 1)]]


def calibrate(events: list[dict], steps: list[int], stages: int, schedule: str, microbatches: int,
              chunks: int = 2) -> HostCalibration:
    """The host parameters of one run's events over `steps` (warm-up steps left out by the caller)."""
    wanted = set(steps)
    compute = [e for e in events if e["kind"] in ("F", "B") and e.get("step") in wanted]
    if any("cpu" not in e for e in compute):
        raise HcfError("these events carry no CPU times (recorded by an older version): run the pipeline again")
    v = _chunks(schedule, stages, microbatches, chunks)
    per_step = len(steps) * microbatches
    fwd, bwd, action = [], [], []
    for r in range(stages):
        f = sum(e["cpu"] for e in compute if e["rank"] == r and e["kind"] == "F") / per_step
        b = sum(e["cpu"] for e in compute if e["rank"] == r and e["kind"] == "B") / per_step
        step_cpu = statistics.fmean(e["cpu"] for e in events
                                    if e["kind"] == "step" and e["rank"] == r and e["step"] in wanted)
        fwd.append(f)
        bwd.append(b)
        action.append(max(0.0, step_cpu / microbatches - f - b) / (2 * v))
    # the mean step: in a paired run a burst of other work falls on every configuration's steps
    # alike, while the median jumps between the quiet and the busy level of a two-level load
    measured = statistics.fmean(
        max(e["t1"] - e["t0"] for e in events if e["kind"] == "step" and e["step"] == s) for s in steps)
    cal = HostCalibration(fwd, bwd, action, _speeds(compute, stages), 0.0, schedule, microbatches, measured, v,
                          *_profiled_work(events, wanted, stages))
    cal.handover_s = _fit_handover(cal, stages, chunks)
    return cal


def _profiled_work(events: list[dict], steps: set[int], stages: int) -> tuple[list[float] | None, list[float] | None]:
    """Per rank, the median profiled forward and backward per micro-batch over `steps` (None: not profiled)."""
    profiles = [[e for e in events if e["kind"] == "profile" and e["rank"] == r and e.get("step") in steps]
                for r in range(stages)]
    if not all(profiles):
        return None, None
    return ([statistics.median(e["fwd_cpu"] for e in mine) for mine in profiles],
            [statistics.median(e["bwd_cpu"] for e in mine) for mine in profiles])


def retarget(cal: HostCalibration, profile_fwd_s: list[float], profile_bwd_s: list[float],
             chunks_per_rank: int) -> HostCalibration:
    """The calibration's host (speeds, handover, framework per action) given another run's work.

    Each rank's forward per micro-batch in the calibration run is its stage modules' profiled
    forward plus what the pipelining runtime adds around each of its actions; the other run keeps
    that per-action addition and takes its own profiled work, so a micro-batch count or a chunking
    the calibration never ran is predicted from what its modules cost, not from a proportion."""
    if cal.profile_fwd_s is None or cal.profile_bwd_s is None:
        raise HcfError("the calibration run profiled no stage work: run it again")

    def moved(run: list[float], profiled: list[float], target: list[float]) -> list[float]:
        return [max(1e-9, t + (r - p) / cal.chunks_per_rank * chunks_per_rank)
                for r, p, t in zip(run, profiled, target, strict=True)]

    return HostCalibration(**{**cal.to_dict(),
                              "fwd_cpu_s": moved(cal.fwd_cpu_s, cal.profile_fwd_s, profile_fwd_s),
                              "bwd_cpu_s": moved(cal.bwd_cpu_s, cal.profile_bwd_s, profile_bwd_s),
                              "chunks_per_rank": chunks_per_rank,
                              "profile_fwd_s": list(profile_fwd_s), "profile_bwd_s": list(profile_bwd_s)})


def _fit_handover(cal: HostCalibration, stages: int, chunks: int) -> float:
    """The handover delay with which the calibration run's own schedule takes its measured step."""
    def step(h: float) -> float:
        return simulate_host(HostCalibration(**{**cal.to_dict(), "handover_s": h}), stages, cal.microbatches,
                             cal.schedule, chunks).makespan

    lo, hi = 0.0, HANDOVER_SEARCH_S
    if step(lo) >= cal.step_s:
        return 0.0  # the work alone already fills the step: no delay left to attribute
    for _ in range(40):  # the step grows with the delay: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step(mid) < cal.step_s else (lo, mid)
    return lo


@dataclass
class HostStep:
    """A simulated step: makespan, per-rank compute wall time and the timeline."""

    makespan: float
    compute: list[float]
    events: list[Event]

    @property
    def utilisation(self) -> float:
        """Compute wall time / (ranks x makespan)."""
        return sum(self.compute) / (len(self.compute) * self.makespan)


def _dependency(kind: str, mb: int, vs: int, nv: int) -> tuple[str, int, int] | None:
    if kind == "F":
        return ("F", mb, vs - 1) if vs > 0 else None
    return ("B", mb, vs + 1) if vs < nv - 1 else ("F", mb, vs)


def simulate_host(cal: HostCalibration, stages: int, microbatches: int, schedule: str,
                  chunks: int = 2) -> HostStep:
    """One step of `schedule` with the calibrated work, speeds and handover: an event-driven replay
    in which every rank computing at a moment runs at speed[number of ranks computing - 1]."""
    if len(cal.fwd_cpu_s) != stages:
        raise HcfError(f"the calibration has {len(cal.fwd_cpu_s)} ranks, the prediction asks for {stages}")
    v = _chunks(schedule, stages, microbatches, chunks)
    nv = stages * v
    orders = [_order(schedule, d, stages, microbatches, v) for d in range(stages)]
    ptr, left = [0] * stages, [None] * stages  # CPU seconds left of each rank's running action
    began, ready = [0.0] * stages, [None] * stages
    done: dict[tuple[str, int, int], float] = {}
    wall, events, t = [0.0] * stages, [], 0.0
    while any(p < len(o) for p, o in zip(ptr, orders, strict=True)):
        for d in range(stages):
            if left[d] is not None or ptr[d] == len(orders[d]):
                continue
            kind, mb, c = orders[d][ptr[d]]
            dep = _dependency(kind, mb, c * stages + d, nv)
            if dep is not None and dep not in done:
                continue
            ready[d] = 0.0 if dep is None else done[dep] + (cal.handover_s if dep[2] % stages != d else 0.0)
            if ready[d] <= t + 1e-12:
                cpu = (cal.fwd_cpu_s[d] if kind == "F" else cal.bwd_cpu_s[d]) / v + cal.action_cpu_s[d]
                left[d], began[d], ready[d] = cpu, t, None
        running = [d for d in range(stages) if left[d] is not None]
        waits = [r for d, r in enumerate(ready) if left[d] is None and r is not None]
        if not running and not waits:
            raise HcfError(f"schedule {schedule} deadlocked with {stages} stages and {microbatches} micro-batches")
        rate = cal.speed[len(running) - 1] if running else 1.0
        t_next = min([t + left[d] / rate for d in running] + waits)
        for d in running:
            left[d] -= rate * (t_next - t)
        t = t_next
        for d in running:
            if left[d] <= 1e-12:
                kind, mb, c = orders[d][ptr[d]]
                done[(kind, mb, c * stages + d)] = t
                wall[d] += t - began[d]
                events.append(Event(d, "compute", began[d], t, f"{kind}{mb}" + (f".{c}" if v > 1 else "")))
                ptr[d] += 1
                left[d] = None
    return HostStep(t, wall, events)
