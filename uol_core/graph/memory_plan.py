"""Static memory planning for a graph run: liveness intervals over the run's steps, then offsets
in one arena so that buffers alive at the same time never overlap.

The placement is "greedy by size" (largest buffer first, each put in the smallest gap between
already placed buffers whose lifetimes overlap its own, else above them all), the heuristic of
TFLite's and PyTorch's static planners and close to TVM's: on inference graphs it lands within a
few percent of the lower bound (the largest set of buffers alive at one step).

    plan = plan_memory([Buffer("h", 4096, first=0, last=2), Buffer("y", 4096, first=2, last=3)])
    plan.arena_bytes, plan.naive_bytes, plan.explain()
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

ALIGNMENT = 64  # a cache line: every buffer starts on one, so vector loads never split lines


@dataclass(frozen=True)
class Buffer:
    """A buffer written at step `first` and last read at step `last` (inclusive)."""

    name: str
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: Buffer) -> bool:
        """Whether the two lifetimes share a step (then they may not share memory)."""
        return self.first <= other.last and other.first <= self.last


def _aligned(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


@dataclass
class MemoryPlan:
    """Arena offsets of every buffer, the arena size, and what a naive runtime would allocate."""

    buffers: list[Buffer]
    offsets: dict[str, int] = field(default_factory=dict)
    arena_bytes: int = 0
    alignment: int = ALIGNMENT

    @property
    def naive_bytes(self) -> int:
        """Every buffer in its own allocation (what a runtime without planning touches)."""
        return sum(_aligned(b.nbytes, self.alignment) for b in self.buffers)

    @property
    def lower_bound_bytes(self) -> int:
        """The most bytes alive at any one step: no placement can use less."""
        steps = {s for b in self.buffers for s in (b.first, b.last)}
        return max((sum(_aligned(b.nbytes, self.alignment) for b in self.buffers
                        if b.first <= s <= b.last) for s in steps), default=0)

    def sharing(self) -> dict[str, list[str]]:
        """For each buffer, the earlier-dead buffers whose memory it reuses."""
        out: dict[str, list[str]] = {}
        for b in self.buffers:
            lo, hi = self.offsets[b.name], self.offsets[b.name] + b.nbytes
            out[b.name] = [o.name for o in self.buffers
                           if o.name != b.name and not o.overlaps(b) and o.last < b.first
                           and self.offsets[o.name] < hi and lo < self.offsets[o.name] + o.nbytes]
        return out

    def to_dict(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "naive_bytes": self.naive_bytes,
                "lower_bound_bytes": self.lower_bound_bytes, "alignment": self.alignment,
                "buffers": [{"name": b.name, "bytes": b.nbytes, "first": b.first, "last": b.last,
                             "offset": self.offsets[b.name]} for b in self.buffers]}

    def explain(self) -> list[str]:
        """Plain lines: sizes, the saving over one allocation per buffer, and the reuse."""
        if not self.buffers:
            return ["no intermediate buffers: every tensor is an input, a parameter, an output "
                    "or a view of one"]
        saved = 1 - self.arena_bytes / self.naive_bytes if self.naive_bytes else 0.0
        how = (f"({saved:.0%} less) by reusing the memory of buffers that are dead" if saved > 0
               else "(no buffer dies before another is written: nothing to reuse)")
        lines = [f"{len(self.buffers)} intermediate buffers, {self.naive_bytes:,} bytes if each "
                 f"had its own allocation; the arena holds them in {self.arena_bytes:,} bytes {how}",
                 f"lower bound (most bytes alive at one step): {self.lower_bound_bytes:,} bytes"]
        for name, reused in self.sharing().items():
            if reused:
                lines.append(f"{name} reuses the memory of {', '.join(reused[:4])}"
                             + (" ..." if len(reused) > 4 else ""))
        return lines


def plan_memory(buffers: Iterable[Buffer], alignment: int = ALIGNMENT) -> MemoryPlan:
    """Offsets for `buffers` (greedy by size, smallest fitting gap among live neighbours)."""
    buffers = list(buffers)
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError("buffer names must be unique")
    for b in buffers:
        if b.nbytes < 0 or b.last < b.first:
            raise ValueError(f"buffer {b.name}: needs bytes >= 0 and first <= last")
    plan = MemoryPlan(buffers, alignment=alignment)
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.name)):
        size = _aligned(max(b.nbytes, 1), alignment)
        live = sorted((o, e) for o, e, other in placed if other.overlaps(b))
        best, best_gap, cursor = None, None, 0
        for offset, end in live:
            gap = offset - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, end)
        if best is None:
            best = cursor
        placed.append((best, best + size, b))
        plan.offsets[b.name] = best
    plan.arena_bytes = max((e for _, e, _ in placed), default=0)
    return plan
