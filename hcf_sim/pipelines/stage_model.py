"""The small transformer of the real pipeline runs, its split into stages and the timed pipeline stage.

The model is built whole on every rank from one seed and each rank keeps its slice, so any
partition (and any re-partition after a rebalance) starts from the same weights. Parameter
names carry the global layer index (`blocks.3.…`), so a stage's state dict is a piece of the
whole model's: checkpoints and layer moves need no renaming.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from hcf_sim.errors import HcfError
from hcf_sim.pipelines.rank_events import RankEventWriter, now

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass
class PipeConfig:
    """One real pipeline run: model size, split, schedule, steps and the deliberate straggler."""

    stages: int = 2  # processes (ranks)
    microbatches: int = 4
    schedule: str = "1f1b"
    chunks: int = 2  # model chunks per rank (interleaved)
    layers: int = 8  # transformer blocks
    d_model: int = 64
    seq: int = 16
    batch: int = 16  # sequences per step, split into micro-batches
    vocab: int = 32
    heads: int = 4
    steps: int = 6
    warmup: int = 1  # first steps left out of the statistics (shape inference, allocator)
    slow_rank: int = -1  # rank given extra work (-1: none)
    slow_factor: int = 1  # every block of the slow rank runs this many times
    rebalance_at: int = 0  # step at which measured stage times re-partition the layers (0: never)
    seed: int = 0
    lr: float = 0.05
    split: tuple[int, ...] | None = None  # blocks per (virtual) stage; None: as even as possible

    def check(self) -> None:
        """Refuse configurations the run cannot do, saying what to change."""
        if self.schedule not in PIPELINE_SCHEDULES:
            raise HcfError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(PIPELINE_SCHEDULES)}")
        if not 2 <= self.stages <= 8:
            raise HcfError(f"use 2-8 stages (processes) on one machine, got {self.stages}")
        if self.microbatches < 1 or self.batch % self.microbatches:
            raise HcfError(f"the batch ({self.batch}) must split evenly into {self.microbatches} micro-batches")
        if self.layers < self.virtual_stages:
            raise HcfError(f"{self.layers} blocks cannot fill {self.virtual_stages} stages: use --layers "
                           f">= {self.virtual_stages}")
        if self.d_model % self.heads:
            raise HcfError(f"d_model {self.d_model} must be a multiple of heads {self.heads}")
        if self.steps <= self.warmup:
            raise HcfError(f"run more steps ({self.steps}) than warm-up steps ({self.warmup})")
        if self.rebalance_at and not self.warmup < self.rebalance_at < self.steps - 1:
            raise HcfError(f"rebalance between the warm-up ({self.warmup}) and the last step but one "
                           f"({self.steps - 1}), got step {self.rebalance_at}")
        if self.rebalance_at and self.schedule == "interleaved":
            raise HcfError("rebalancing re-partitions one chunk per rank: use --schedule 1f1b or gpipe")
        if self.slow_factor < 1 or self.slow_rank >= self.stages:
            raise HcfError(f"slow rank must be below {self.stages} and its factor >= 1")
        if self.split is not None and (len(self.split) != self.virtual_stages or sum(self.split) != self.layers
                                       or min(self.split) < 1):
            raise HcfError(f"the split {list(self.split)} must give >= 1 of the {self.layers} blocks to each of "
                           f"{self.virtual_stages} stages")

    @property
    def virtual_stages(self) -> int:
        """Model pieces: one per rank, or `chunks` per rank when interleaved."""
        return self.stages * (self.chunks if self.schedule == "interleaved" else 1)

    def to_dict(self) -> dict:
        """JSON-ready (for the spawned ranks and the result file)."""
        d = asdict(self)
        d["split"] = list(self.split) if self.split else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PipeConfig:
        """Inverse of to_dict."""
        d = dict(d)
        d["split"] = tuple(d["split"]) if d.get("split") else None
        return cls(**d)


def even_split(layers: int, parts: int) -> list[int]:
    """Blocks per stage, as even as possible (earlier stages take the remainder)."""
    return [layers // parts + (i < layers % parts) for i in range(parts)]


class Block(nn.Module):
    """A pre-norm transformer block: self-attention and a 4x MLP, each with a residual."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def repeated(block: nn.Module, x: torch.Tensor, times: int) -> torch.Tensor:
    """A block run `times` times with the results averaged: the same output and gradient
    (x + x = 2x is exact), `times` x the work: how a slower device is imitated on one host."""
    out = block(x)
    for _ in range(times - 1):
        out = out + block(x)
    return out / times if times > 1 else out


class StageModule(nn.Module):
    """Blocks [first, last) of the model, with the embedding on stage 0 and the head on the last stage."""

    def __init__(self, cfg: PipeConfig, first: int, last: int, has_embed: bool, has_head: bool,
                 repeat: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model) if has_embed else None
        self.pos = nn.Parameter(torch.zeros(cfg.seq, cfg.d_model)) if has_embed else None
        self.blocks = nn.ModuleDict({str(i): Block(cfg.d_model, cfg.heads) for i in range(first, last)})
        self.norm = nn.LayerNorm(cfg.d_model) if has_head else None
        self.head = nn.Linear(cfg.d_model, cfg.vocab) if has_head else None
        self.repeat = repeat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x) + self.pos
        for block in self.blocks.values():
            x = repeated(block, x, self.repeat)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def full_state(cfg: PipeConfig) -> dict[str, torch.Tensor]:
    """The whole model's initial weights for `cfg.seed` (every rank computes the same ones)."""
    torch.manual_seed(cfg.seed)
    return StageModule(cfg, 0, cfg.layers, True, True).state_dict()


def build_stage(cfg: PipeConfig, split: Sequence[int], virtual: int, weights: dict[str, torch.Tensor],
                repeat: int = 1) -> StageModule:
    """The module of virtual stage `virtual` under `split`, loaded with its slice of `weights`."""
    first = sum(split[:virtual])
    module = StageModule(cfg, first, first + split[virtual], virtual == 0, virtual == len(split) - 1, repeat)
    mine = module.state_dict()
    module.load_state_dict({k: weights[k] for k in mine})
    return module


def batch_for(cfg: PipeConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s tokens and targets, a function of (seed, step) only, so a restarted run sees
    the same data: each target is the sum of the token and the one before it, mod the vocabulary."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    tokens = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    return tokens, (tokens + torch.roll(tokens, 1, dims=1)) % cfg.vocab


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of one micro-batch."""
    return nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


class RankClock:
    """One rank's open communication intervals, shared by its stages (interleaved ranks hold two)."""

    def __init__(self, writer: RankEventWriter) -> None:
        self.writer, self.step = writer, 0
        self.recv_asked: dict[tuple[str, int, int], float] = {}
        self.open_send: tuple[float, int, int] | None = None
        # step -> forward + backward CPU seconds of this rank's thread: what the stage costs,
        # without the time a shared host's other processes held its core (the rebalance's input)
        self.busy: dict[int, float] = {}
        self.step_cpu: dict[int, float] = {}  # step -> CPU seconds of the rank's thread in schedule.step()

    def close_send(self, t: float) -> None:
        if self.open_send is not None:
            start, mb, chunk = self.open_send
            self.writer.record("send", start, t, step=self.step, mb=mb, chunk=chunk)
            self.open_send = None


def timed_stage(module: nn.Module, virtual: int, num_virtual: int, clock: RankClock, chunk: int):
    """A torch.distributed.pipelining stage whose forward, backward, send and recv are timed.

    recv is the time a stage waits for its input (from asking for it to the compute start: the
    transfer plus the producer still computing); send is the time spent posting the outputs
    until the rank moves on.
    """
    from torch.distributed.pipelining import PipelineStage

    class TimedStage(PipelineStage):
        def _asked(self, kind: str, mb: int, ops: list) -> list:
            t = now()
            clock.close_send(t)
            if ops:
                clock.recv_asked[(kind, mb, chunk)] = t
            return ops

        def get_fwd_recv_ops(self, fwd_chunk_id: int) -> list:
            return self._asked("F", fwd_chunk_id, super().get_fwd_recv_ops(fwd_chunk_id))

        def get_bwd_recv_ops(self, bwd_chunk_id: int) -> list:
            return self._asked("B", bwd_chunk_id, super().get_bwd_recv_ops(bwd_chunk_id))

        def _sending(self, mb: int, ops: list) -> list:
            if ops:
                clock.close_send(now())
                clock.open_send = (now(), mb, chunk)
            return ops

        def get_fwd_send_ops(self, fwd_chunk_id: int) -> list:
            return self._sending(fwd_chunk_id, super().get_fwd_send_ops(fwd_chunk_id))

        def get_bwd_send_ops(self, bwd_chunk_id: int) -> list:
            return self._sending(bwd_chunk_id, super().get_bwd_send_ops(bwd_chunk_id))

        def _timed(self, kind: str, mb: int, run):
            t0 = now()
            clock.close_send(t0)
            asked = clock.recv_asked.pop((kind, mb, chunk), None)
            if asked is not None:
                clock.writer.record("recv", asked, t0, step=clock.step, mb=mb, chunk=chunk, stage=virtual, of=kind)
            cpu0 = time.thread_time()
            out = run()
            t1 = now()
            # the thread's own CPU time: wall time beyond it is time the rank waited for a core
            cpu = time.thread_time() - cpu0
            clock.writer.record(kind, t0, t1, step=clock.step, mb=mb, chunk=chunk, stage=virtual,
                                cpu=cpu)
            clock.busy[clock.step] = clock.busy.get(clock.step, 0.0) + cpu
            return out

        def forward_one_chunk(self, fwd_chunk_id: int, *args, **kwargs):
            return self._timed("F", fwd_chunk_id, lambda: super(TimedStage, self).forward_one_chunk(
                fwd_chunk_id, *args, **kwargs))

        def backward_one_chunk(self, bwd_chunk_id: int, *args, **kwargs):
            return self._timed("B", bwd_chunk_id, lambda: super(TimedStage, self).backward_one_chunk(
                bwd_chunk_id, *args, **kwargs))

    return TimedStage(module, virtual, num_virtual, torch.device("cpu"))


def make_schedule(cfg: PipeConfig, stages: list):
    """The torch.distributed.pipelining schedule of `cfg.schedule` over this rank's stages."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    if cfg.schedule == "interleaved":
        return ScheduleInterleaved1F1B(stages, cfg.microbatches, loss_fn=loss_fn)
    kind = Schedule1F1B if cfg.schedule == "1f1b" else ScheduleGPipe
    return kind(stages[0], cfg.microbatches, loss_fn=loss_fn)


def run_schedule(schedule, cfg: PipeConfig, rank: int, step: int) -> float | None:
    """One pipeline step on this rank; the mean micro-batch loss on the rank holding the head."""
    tokens, target = batch_for(cfg, step)
    last = rank == cfg.stages - 1
    losses: list[torch.Tensor] = []
    if rank == 0:
        schedule.step(tokens, target=target if last else None, losses=losses if last else None)
    elif last:
        schedule.step(target=target, losses=losses)
    else:
        schedule.step()
    return float(torch.stack(losses).detach().mean()) if last and losses else None


def train_step(pipe, cfg: PipeConfig, rank: int, step: int, clock) -> tuple[float, float, float | None]:
    """One optimiser step of this rank's stage: (start, end of the schedule, loss). The end is
    taken before the optimiser, so a rank's step time is its share of the pipeline."""
    clock.step = step
    pipe.optimizer.zero_grad()
    t0, cpu0 = now(), time.thread_time()
    loss = run_schedule(pipe.schedule, cfg, rank, step)
    t1 = now()
    clock.step_cpu[step] = time.thread_time() - cpu0
    clock.close_send(t1)
    pipe.optimizer.step()
    return t0, t1, loss
