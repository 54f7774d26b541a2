"""DDP gradient bucketing: when each bucket's all-reduce runs during backward, and how much communication is exposed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hcf_sim.errors import HcfError, require_nonnegative, require_positive

FIRST_BUCKET_BYTES = 1 << 20  # DDP's first bucket is capped at 1 MiB so communication starts early


@dataclass(frozen=True)
class Event:
    """One bar of a per-rank timeline: what ran on which rank from start to end (s)."""

    rank: int
    kind: str  # compute | comm | bubble
    start: float
    end: float
    label: str


@dataclass
class BucketPlan:
    """A DDP bucket: the layers in it, its bytes, when its gradients are ready and when its all-reduce runs."""

    layers: list[int]
    nbytes: int
    ready: float
    start: float = 0.0
    end: float = 0.0


@dataclass
class OverlapResult:
    """A DDP step: compute, per-bucket all-reduces, the exposed part of communication and the timeline."""

    step_time: float
    compute_time: float
    comm_time: float
    exposed_comm: float
    buckets: list[BucketPlan]
    events: list[Event] = field(default_factory=list)

    @property
    def overlap_fraction(self) -> float:
        """Share of communication hidden behind backward compute."""
        return 1 - self.exposed_comm / self.comm_time if self.comm_time else 1.0


def make_buckets(layer_bytes: Sequence[int], bucket_cap_mb: float) -> list[list[int]]:
    """Group layers into buckets in reverse order (gradients arrive last layer first), as DDP does."""
    require_positive("bucket_cap_mb", bucket_cap_mb, "MB")
    cap_bytes = bucket_cap_mb * (1 << 20)
    out: list[list[int]] = [[]]
    size = 0
    for i in reversed(range(len(layer_bytes))):
        limit = FIRST_BUCKET_BYTES if len(out) == 1 else cap_bytes
        if out[-1] and size + layer_bytes[i] > limit:
            out.append([])
            size = 0
        out[-1].append(i)
        size += layer_bytes[i]
    return out


def ddp_step(layer_bytes: Sequence[int], layer_bwd_s: Sequence[float], forward_s: float, bucket_cap_mb: float,
             allreduce_s: Callable[[float], float], rank_slowdown: Sequence[float] = (1.0,)) -> OverlapResult:
    """Model one DDP step: start_i = max(ready_i, end_{i-1}), end_i = start_i + T_AR(bytes_i); slow ranks delay readiness."""
    if len(layer_bytes) != len(layer_bwd_s) or not layer_bytes:
        raise HcfError("give one gradient size and one backward time per layer (same, non-zero count)")
    require_nonnegative("forward time", forward_s)
    for t in layer_bwd_s:
        require_nonnegative("layer backward time", t)
    slow = max(rank_slowdown)  # an all-reduce waits for the slowest rank's gradients
    require_positive("rank slowdown", slow)
    grad_ready, t = {}, forward_s * slow
    for i in reversed(range(len(layer_bytes))):
        t += layer_bwd_s[i] * slow
        grad_ready[i] = t
    bwd_end = t
    plans, prev_end, events = [], 0.0, []
    for b, layers in enumerate(make_buckets(layer_bytes, bucket_cap_mb)):
        nb = sum(layer_bytes[i] for i in layers)
        plan = BucketPlan(layers, nb, max(grad_ready[i] for i in layers))
        plan.start = max(plan.ready, prev_end)  # one communication stream: buckets run in order
        plan.end = plan.start + allreduce_s(nb)
        prev_end = plan.end
        plans.append(plan)
        for r in range(len(rank_slowdown)):
            events.append(Event(r, "comm", plan.start, plan.end, f"all-reduce bucket {b} ({nb} B)"))
    for r, s in enumerate(rank_slowdown):
        events.append(Event(r, "compute", 0.0, forward_s * s, "forward"))
        events.append(Event(r, "compute", forward_s * s, forward_s * s + sum(layer_bwd_s) * s, "backward"))
        if s < slow:  # fast ranks wait for the straggler at the first bucket
            events.append(Event(r, "bubble", (forward_s + sum(layer_bwd_s)) * s, bwd_end, "wait for straggler"))
    comm = sum(p.end - p.start for p in plans)
    end = max(bwd_end, prev_end)
    return OverlapResult(end, bwd_end, comm, end - bwd_end, plans, events)
