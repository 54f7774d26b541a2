"""The cost of one NVLS loop step, fitted on every other size of one single-node NVLS log.

NCCL cuts a single-node NVLS all-reduce into loop steps (nccl_model.nvls_steps: 16 channels on
Hopper, each looping over its part 8 heads x chunkSize at a time, the chunk shrinking from
128 KiB to 16 KiB for smaller messages, NCCL's enqueue.cc). Each step hands chunks from the
scatter warps to the multimem reduce and on to the gather warps; what that costs beyond the bytes
no vendor page states, and NCCL's tuner ranks NVLS without it. Small chunks mean many steps for
few bytes, which is why NVLS ramps up to its full rate only by ~64 MiB, where chunks reach 64 KiB.

`step_us` is fitted on every other size (sorted) of `FIT_LOG` (those sizes leave its error
figures), by least absolute log error, as the network fit does; the constants file holds the
fitted figure the simulator uses, and `published` checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hcf_sim.calibration.net_fit import Prediction
from hcf_sim.collectives import nccl_model as nm
from hcf_sim.errors import HcfError

FIT_LOG = "all_reduce_h100_nvls_8.txt"  # 8 x H100 on NVSwitch, NVLS on, NCCL 2.26.2
STEP_US_GRID = np.round(np.arange(0.0, 20.0 + 1e-9, 0.05), 2)


@dataclass(frozen=True)
class NvlsStep:
    """The fitted cost of one NVLS loop step and the sizes it was fitted on."""

    step_us: float
    fitted_sizes: frozenset[int]

    def describe(self) -> str:
        """One line for the table."""
        return f"NVLS loop step fitted on every other size: {self.step_us:.2f} us"


def stored_step_us() -> float:
    """The per-step cost the simulator uses (the constants file's fitted figure)."""
    return nm._v(nm.constants()["nccl_tuning"]["nvls_pipeline"]["step_us"])


def adjusted_us(cluster: nm.Cluster, p: Prediction, step_us: float) -> float:
    """The prediction's time with `step_us` per NVLS loop step in place of the stored figure."""
    _, steps = nm.nvls_steps(cluster, p.collective, p.algorithm, p.size)
    return p.time_us + steps * (step_us - stored_step_us())


def fit_nvls_step(cluster: nm.Cluster, predictions: list[Prediction], measured_us: list[float],
                  extra_us: float = 0.0) -> NvlsStep:
    """`step_us` from every other size (sorted) of one log; `extra_us` is a time the caller adds to
    every prediction (the launch term), kept out of what is fitted."""
    sizes = sorted({p.size for p in predictions})
    held_in = frozenset(sizes[::2])
    rows = [(p, t) for p, t in zip(predictions, measured_us, strict=True) if p.size in held_in]
    if not any(nm.nvls_steps(cluster, p.collective, p.algorithm, p.size)[1] for p, _ in rows):
        raise HcfError("no size fitted on is NVLS's pick: nothing to fit the NVLS step on")
    err = np.zeros(len(STEP_US_GRID))
    for p, t in rows:
        _, steps = nm.nvls_steps(cluster, p.collective, p.algorithm, p.size)
        base = p.time_us - steps * stored_step_us() + extra_us
        err += np.abs(np.log((base + steps * STEP_US_GRID) / t))
    return NvlsStep(float(STEP_US_GRID[int(np.argmin(err))]), held_in)
