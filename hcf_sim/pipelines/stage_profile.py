"""The work of a rank's stages per micro-batch, measured outside the pipelining runtime.

The host model (`hcf_sim.pipelines.host_model`) takes a rank's forward and backward CPU per micro-batch
from the run it is calibrated on. A held-out run with another micro-batch count or schedule
gives the rank other work: smaller micro-batches, or the same blocks cut into more chunks. At
this model's size (64-wide, 16-token sequences) the work does not scale with the tokens: halving
a micro-batch cut its forward by 7% here, while halving a chunk's blocks cut it by 40%, because
every layer's kernel launch and autograd bookkeeping cost the same at any size. So the work is
measured, not scaled: each rank runs one step of its stage modules' forwards and backwards on
micro-batches of the configuration's shape, in the schedule's order, alone (no pipelining
runtime, no communication), and the thread's CPU time is taken, as a layer profile feeds a
simulator. What the pipelining runtime adds around each forward and backward is not in it: the
host model takes that per action from its calibration run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
from torch import nn

from hcf_sim.pipelines.simulator import _order
from hcf_sim.pipelines.stage_model import PipeConfig

PROFILE_WARMUP = 1  # the first step allocates and picks kernels
PROFILE_REPEATS = 5  # the median of these is kept: a burst of other work moves one call, not the median


def _input(cfg: PipeConfig, virtual: int, rows: int, gen: torch.Generator) -> torch.Tensor:
    if virtual == 0:
        return torch.randint(cfg.vocab, (rows, cfg.seq), generator=gen)
    return torch.randn(rows, cfg.seq, cfg.d_model, generator=gen).requires_grad_()


def _timed_pass(cfg: PipeConfig, rank: int, modules: Sequence[nn.Module],
                inputs: dict[tuple[int, int], torch.Tensor]) -> tuple[float, float]:
    """Thread CPU seconds of every forward and of every backward of one step, in the schedule's order."""
    order = _order(cfg.schedule, rank, cfg.stages, cfg.microbatches, len(modules))
    outputs: dict[tuple[int, int], torch.Tensor] = {}
    fwd = bwd = 0.0
    for kind, mb, chunk in order:
        cpu0 = time.thread_time()
        if kind == "F":
            outputs[mb, chunk] = modules[chunk](inputs[mb, chunk])
            fwd += time.thread_time() - cpu0
        else:
            out = outputs.pop((mb, chunk))
            out.backward(torch.ones_like(out))
            bwd += time.thread_time() - cpu0
    return fwd, bwd


def profile_stage_work(cfg: PipeConfig, rank: int, modules: Sequence[nn.Module], warmup: int = PROFILE_WARMUP,
                       repeats: int = PROFILE_REPEATS) -> dict:
    """Forward and backward CPU seconds per micro-batch of this rank's stage modules (its chunks
    summed), for `cfg`'s micro-batch size, run in the order `cfg.schedule` runs them on this rank
    (GPipe keeps every micro-batch's activations alive until its backwards, 1F1B a few: the
    backward's memory traffic differs). The modules' gradients are cleared afterwards."""
    rows = cfg.batch // cfg.microbatches
    gen = torch.Generator().manual_seed(cfg.seed + rank)
    inputs = {(mb, chunk): _input(cfg, chunk * cfg.stages + rank, rows, gen)
              for mb in range(cfg.microbatches) for chunk in range(len(modules))}
    # one torch thread, as each rank of the real pipeline runs: with a team of threads the
    # calling thread's CPU time would also count its spins at the team's barriers, which a busy
    # host stretches far past the work of a small stage
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(warmup):
            _timed_pass(cfg, rank, modules, inputs)
        passes = [_timed_pass(cfg, rank, modules, inputs) for _ in range(repeats)]
    finally:
        torch.set_num_threads(threads)
    for param in (p for module in modules for p in module.parameters()):
        param.grad = None
    return {"fwd_cpu": statistics.median(p[0] for p in passes) / cfg.microbatches,
            "bwd_cpu": statistics.median(p[1] for p in passes) / cfg.microbatches,
            "chunks": len(modules), "rows": rows}
