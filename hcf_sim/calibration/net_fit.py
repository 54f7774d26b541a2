"""What a multi-node run's network actually delivered, fitted on half of one log's sizes.

NCCL's tuner ranks algorithms with its own constants: a network step costs hwLat NET (14 us for
Simple) plus what the network plugin reports, and a NIC carries its full rate. Published runs
fall short of both, by amounts no vendor page states: GPUDirect-TCPXO, EFA and SHARP reach a
fraction of their line rate, and a step over the network costs more than the tuner's figure.
Two numbers per log describe that:

* `step_us`: time per inter-node step of the pick beyond NCCL's hwLat NET, in the form NCCL gives
  the network plugin's latency (`interLat += latencyInter`, again for Simple's flush); it takes
  the place of the latency the plugin reports (EFA's 75 us), which the tuner ranks with but which
  is a tuning figure, not a measured one;
* `efficiency`: the share of the NICs' rate (the preset's) the run reached, which scales every
  bandwidth the NICs bound (ring and tree across nodes, NVLS-tree, SHARP).

Both are fitted on every other size of the log (`fitted_sizes`; those sizes leave its error
figures), by least absolute log error, since the goal is a median. NCCL's pick is not refitted:
the tuner does not see what the run reached, so it picks as it would on the presets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hcf_sim.collectives import nccl_model as nm
from hcf_sim.errors import HcfError

STEP_US_GRID = np.arange(0.0, 300.0 + 1e-9, 1.0)  # us per inter-node step
EFFICIENCY_GRID = np.arange(0.20, 1.0 + 1e-9, 0.01)  # share of the NIC rate
# a log whose sizes all reach this holds no trace of a per-step latency (the rate hides it): only
# the efficiency is fitted there, the latency is left at NCCL's
LATENCY_VISIBLE_BELOW = 64 << 20


@dataclass(frozen=True)
class AchievedNet:
    """The fitted network: extra us per inter-node step, share of the NIC rate, sizes fitted on."""

    step_us: float | None  # None: not fitted (no size small enough to show it), NCCL's tuner latency kept
    efficiency: float
    fitted_sizes: frozenset[int]
    nic_bound: bool = True  # False: the NICs bound no pick fitted on, so their rate is not fitted (1.0)

    def describe(self) -> str:
        """One line for the table."""
        step = ("latency not fitted (every size >= 64 MiB)" if self.step_us is None else
                f"{self.step_us:.0f} us per inter-node step (x2 Simple)")
        rate = (f"{self.efficiency:.2f} of the NIC rate" if self.nic_bound else
                "NIC rate not fitted (the NICs bound none of the picks)")
        return f"net fitted on every other size: {step}, {rate}"


@dataclass(frozen=True)
class Prediction:
    """The model's answer at one size, in the parts the fit adjusts."""

    collective: str
    size: int
    time_us: float  # NCCL's pick timed by the flow model
    latency_us: float  # the pick's NCCL latency (the rest of time_us is its bandwidth term)
    algorithm: str
    protocol: str


def _terms(cluster: nm.Cluster, p: Prediction) -> tuple[float, float, float]:
    """(time at the presets less the plugin's reported latency, inter-node steps weighted as NCCL
    weighs that latency, bandwidth term)."""
    steps = nm.inter_steps(cluster, p.collective, p.algorithm) * (2 if p.protocol == "Simple" else 1)
    return p.time_us - steps * cluster.net_latency_us, float(steps), p.time_us - p.latency_us


def _stretch(cluster: nm.Cluster, p: Prediction, efficiency: np.ndarray) -> np.ndarray:
    """How much longer the pick's bandwidth term gets when the NICs reach `efficiency` of their rate."""
    full = nm.algbw_gbps(cluster, p.collective, p.algorithm, p.protocol)
    out = []
    for eta in np.atleast_1d(efficiency):
        slow = dataclasses.replace(cluster, nic_gbps=cluster.nic_gbps * float(eta))
        out.append(full / nm.algbw_gbps(slow, p.collective, p.algorithm, p.protocol))
    return np.array(out)


def adjusted_us(cluster: nm.Cluster, p: Prediction, net: AchievedNet) -> float:
    """The prediction's time on the network the run got."""
    if net.step_us is None:
        time, steps, bandwidth = p.time_us, 0.0, p.time_us - p.latency_us
    else:
        time, steps, bandwidth = _terms(cluster, p)
    return time + steps * (net.step_us or 0.0) + bandwidth * (float(_stretch(cluster, p, np.array([net.efficiency]))[0]) - 1)


def fit_achieved_net(cluster: nm.Cluster, predictions: list[Prediction], measured_us: list[float],
                     extra_us: float = 0.0) -> AchievedNet:
    """`step_us` and `efficiency` from every other size (sorted) of one log; `extra_us` is a time the
    caller adds to every prediction (the launch term), kept out of what is fitted."""
    if cluster.nodes < 2:
        raise HcfError("one node: no network to fit")
    sizes = sorted({p.size for p in predictions})
    held_in = frozenset(sizes[::2])
    rows = [(p, t) for p, t in zip(predictions, measured_us, strict=True) if p.size in held_in]
    if len(rows) < 2:
        raise HcfError(f"{len(sizes)} sizes: too few to fit the network on half of them")
    latency_visible = min(sizes) < LATENCY_VISIBLE_BELOW
    grid = STEP_US_GRID if latency_visible else np.zeros(1)
    # a pick the NICs do not bound (CollNet chain: its node's NVLink does) says nothing of their rate
    nic_bound = any(float(_stretch(cluster, p, EFFICIENCY_GRID[:1])[0]) > 1 + 1e-9 for p, _ in rows)
    rates = EFFICIENCY_GRID if nic_bound else np.ones(1)
    err = np.zeros((len(grid), len(rates)))
    for p, t in rows:
        time, steps, bandwidth = _terms(cluster, p) if latency_visible else (p.time_us, 0.0, p.time_us - p.latency_us)
        model = (time + extra_us + steps * grid[:, None]
                 + bandwidth * (_stretch(cluster, p, rates)[None, :] - 1))
        err += np.abs(np.log(model / t))
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    step = float(grid[i]) if latency_visible else None
    return AchievedNet(step, round(float(rates[j]), 2), held_in, nic_bound)
