"""How sure a pipeline step prediction is on this host.

A step predicted from a run's measured stage times is right on a quiet machine; on a shared
one the same schedule takes a different time from step to step. This module turns the host's
spread (measured by `hcf_sim.runtime.host_noise` and by the run's own events) into an interval
around the prediction:

* wake-up latency: how late a short sleep returns (the delay a rank waiting on a receive pays
  before it runs again), probed before and after the run;
* CPU steal: the share of CPU time the hypervisor gave to other guests during the run
  (`/proc/stat`), which stretches every compute;
* load: the 1-minute load average against the host's cores;
* handover jitter: the spread of the stage-to-stage delays the run's own steps showed.

The prediction is the simulator's mean step over draws of the run's own times: each action's
time drawn from what that rank measured for that kind (forward, backward), charged the framework
time the rank spends outside compute and receives (posting sends, autograd set-up: time that is
the stage's, not a wait), and each handover's delay drawn from the delays the run showed. A
schedule waits for the later of two paths, so under times that vary its mean length is above
its length at the mean times (on a 2-vCPU host by 2-9%). The interval's ends are the simulator's
steps for the quietest and the busiest measured step's own inputs and the draws' 10th and 90th
percentiles, the busy end widened by what the host may add to each
handover on the critical path: the late tail of a wake-up or of a handover (the larger), times
the number of handovers the step's length depends on. The tails on one busy host come together,
so they add up rather than average out; a noisy host gets a wider interval, not a failed check.
"""

from __future__ import annotations

import random
import statistics

from hcf_sim.pipelines.rank_events import COMPUTE_KINDS, stage_times, step_times, transfer_times
from hcf_sim.pipelines.simulator import PipelineResult, _chunks, simulate_pipeline
from hcf_sim.runtime.host_noise import HostNoise, quantile

CHECK_TOLERANCE = 0.15  # a prediction this close to the measured step passes even outside its interval
HANDOVER_NUDGE_S = 1e-4  # the handover step used to count the handovers a step's length depends on
DRAWS = 64  # steps simulated with the run's own action times and handovers drawn at random


def framework_per_action(events: list[dict], steps: list[int], stages: int, actions: int) -> list[float]:
    """Per rank, the mean wall time per schedule action spent neither computing nor waiting in a
    receive (sends posted, autograd set-up, the loss), over `steps`."""
    wanted = set(steps)
    out = []
    for r in range(stages):
        walls = [e["t1"] - e["t0"] for e in events if e["rank"] == r and e["kind"] == "step" and e["step"] in wanted]
        inside = sum(e["t1"] - e["t0"] for e in events
                     if e["rank"] == r and e.get("step") in wanted and e["kind"] in ("F", "B", "recv"))
        out.append(max(0.0, sum(walls) - inside) / (len(walls) * actions) if walls else 0.0)
    return out


def simulate_steps(cfg, events: list[dict], steps: list[int], ping_s: float, handover_s: float | None = None
                   ) -> PipelineResult:
    """The simulator's step for the mean stage times of `steps`, framework time per action
    included, handing over after the mean delay the steps showed (else `ping_s`)."""
    per_rank = stage_times(events, steps)
    v = _chunks(cfg.schedule, cfg.stages, cfg.microbatches, cfg.chunks)
    extra = framework_per_action(events, steps, cfg.stages, 2 * cfg.microbatches * v)
    seen = transfer_times(events, steps)
    if handover_s is None:
        handover_s = statistics.fmean(seen) if seen else ping_s
    fwd = [max(per_rank[r]["F"] + v * extra[r], 1e-9) for r in range(cfg.stages)]
    bwd = [max(per_rank[r]["B"] + v * extra[r], 1e-9) for r in range(cfg.stages)]
    return simulate_pipeline(cfg.stages, cfg.microbatches, cfg.schedule, fwd, p2p_s=handover_s,
                             chunks=cfg.chunks, bwd_s=bwd)


def drawn_steps(cfg, events: list[dict], steps: list[int], ping_s: float, draws: int = DRAWS,
                seed: int = 0) -> list[float]:
    """The simulator's step `draws` times, each action's time (framework time included) and each
    handover's delay drawn from what the run's `steps` measured for that rank and kind. A schedule
    waits for the later of two paths, so its mean length under varying times is above its length
    at the mean times; these draws measure that, and their spread."""
    v = _chunks(cfg.schedule, cfg.stages, cfg.microbatches, cfg.chunks)
    extra = framework_per_action(events, steps, cfg.stages, 2 * cfg.microbatches * v)
    wanted, seen = set(steps), transfer_times(events, steps)
    times: dict[tuple[int, str], list[float]] = {}
    for e in events:
        if e.get("step") in wanted and e["kind"] in COMPUTE_KINDS:
            times.setdefault((e["rank"], e["kind"]), []).append(e["t1"] - e["t0"] + extra[e["rank"]])
    if not seen or len(times) < 2 * cfg.stages:
        return [simulate_steps(cfg, events, steps, ping_s).makespan]
    rng = random.Random(seed)
    return [simulate_pipeline(cfg.stages, cfg.microbatches, cfg.schedule, 1.0, chunks=cfg.chunks, bwd_s=[1.0] * cfg.stages,
                              p2p_draw=lambda: rng.choice(seen),
                              action_draw=lambda d, kind: rng.choice(times[(d, kind)])).makespan
            for _ in range(draws)]


def critical_handovers(cfg, events: list[dict], steps: list[int], ping_s: float) -> float:
    """How many handovers the predicted step's length depends on: its growth per second of delay."""
    seen = transfer_times(events, steps)
    base = statistics.fmean(seen) if seen else ping_s
    slower = simulate_steps(cfg, events, steps, ping_s, base + HANDOVER_NUDGE_S).makespan
    return max(0.0, (slower - simulate_steps(cfg, events, steps, ping_s, base).makespan) / HANDOVER_NUDGE_S)


def step_check(cfg, events: list[dict], steps: list[int], ping_s: float, noise: HostNoise | None) -> dict:
    """The predicted step with its interval against the measured (median) step of `steps`."""
    drawn = drawn_steps(cfg, events, steps, ping_s)
    predicted = statistics.fmean(drawn)
    per_step = [simulate_steps(cfg, events, [s], ping_s).makespan for s in steps]
    per_step += [quantile(drawn, 0.1), quantile(drawn, 0.9)]
    seen = transfer_times(events, steps)
    handover_tail = quantile(seen, 0.9) - statistics.fmean(seen) if seen else 0.0
    wake_tail = noise.wake_p90_s - noise.wake_median_s if noise else 0.0
    hops = critical_handovers(cfg, events, steps, ping_s)
    steal = min(noise.steal_share, 0.5) if noise else 0.0  # above half the host is not ours to predict
    low = min([predicted, *per_step])
    high = max([predicted, *per_step]) / (1 - steal) + hops * max(handover_tail, wake_tail)
    measured = statistics.median(step_times(events, steps))
    error = (predicted - measured) / measured
    inside = low <= measured <= high
    return {
        "predicted_step_s": predicted, "interval_s": [low, high], "measured_step_s": measured,
        "error": error, "inside_interval": inside, "within_tolerance": abs(error) <= CHECK_TOLERANCE,
        "passes": inside or abs(error) <= CHECK_TOLERANCE, "tolerance": CHECK_TOLERANCE,
        "critical_handovers": hops, "handover_tail_s": handover_tail, "wake_tail_s": wake_tail,
        "host_noise": noise.to_dict() if noise else None,
        "model": f"the simulator's mean step over {len(drawn)} draws of the run's own action times (framework "
                 "time per action included) and handovers; interval: the quietest and busiest step's own "
                 "inputs and the draws' 10th-90th percentiles, the busy end widened by CPU steal and by each "
                 "critical handover's late tail",
    }
