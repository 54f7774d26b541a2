"""Per-rank event streams of real training runs: one JSON-lines file per rank, tailed while it runs.

Each rank appends its measured events (forward, backward, send, recv, step, loss, checkpoint)
to `rank<N>.jsonl` in a run folder and flushes at every step boundary, so a reader (the CLI,
the IDE's Training page, the elastic launcher) sees the run progress live. Times are seconds of
the host's monotonic clock, which every process of one machine shares; ranks on different hosts
would need their clocks aligned first.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hcf_sim.simulation.overlap import Event

COMPUTE_KINDS = ("F", "B")
COMM_KINDS = ("send", "recv")


class RankEventWriter:
    """Appends one rank's events to `<folder>/rank<rank>.jsonl`; flush() makes them visible."""

    def __init__(self, folder: str | os.PathLike, rank: int) -> None:
        self.rank = rank
        self.path = Path(folder) / f"rank{rank}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        self._pending: list[str] = []

    def record(self, kind: str, start: float, end: float | None = None, **fields) -> None:
        """Queue one event: kind, start and end (monotonic s; end defaults to start) and extras."""
        row = {"rank": self.rank, "kind": kind, "t0": start, "t1": start if end is None else end}
        row.update(fields)
        self._pending.append(json.dumps(row))

    def flush(self) -> None:
        """Write the queued events (called at step boundaries, so the cost stays off the step)."""
        if self._pending:
            self._file.write("\n".join(self._pending) + "\n")
            self._pending.clear()
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self.flush()
        self._file.close()


def now() -> float:
    """The clock every rank of one host stamps its events with."""
    return time.monotonic()


class RankEventTail:
    """Reads new complete lines of every rank file of a run folder since the last call."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self._offsets: dict[Path, int] = {}
        self.events: list[dict] = []

    def poll(self) -> list[dict]:
        """New events since the previous poll (a half-written last line waits for the next)."""
        fresh: list[dict] = []
        for path in sorted(self.folder.glob("rank*.jsonl")):
            start = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = start + end
            for line in data[:end].splitlines():
                if line.strip():
                    fresh.append(json.loads(line))
        self.events.extend(fresh)
        return fresh


def read_events(folder: str | os.PathLike) -> list[dict]:
    """Every complete event of a run folder."""
    tail = RankEventTail(folder)
    tail.poll()
    return tail.events


@dataclass
class StepView:
    """One measured pipeline step of every rank: its events (times from the step's start)."""

    step: int
    step_s: float  # the slowest rank's schedule.step() wall time
    events: list[Event] = field(default_factory=list)
    compute_s: dict[int, float] = field(default_factory=dict)  # per rank: forward + backward busy time


def completed_steps(events: Iterable[dict], ranks: int) -> list[int]:
    """Steps every one of `ranks` ranks has finished (its `step` event is written)."""
    done: dict[int, set[int]] = {}
    for e in events:
        if e["kind"] == "step":
            done.setdefault(e["step"], set()).add(e["rank"])
    return sorted(s for s, who in done.items() if len(who) >= ranks)


def step_view(events: Iterable[dict], step: int) -> StepView:
    """The events of one step on a common time axis (0 = the earliest event of any rank)."""
    mine = [e for e in events if e.get("step") == step and e["kind"] in (*COMPUTE_KINDS, *COMM_KINDS, "step")]
    if not mine:
        return StepView(step, 0.0)
    origin = min(e["t0"] for e in mine)
    view = StepView(step, max(e["t1"] - e["t0"] for e in mine if e["kind"] == "step") if any(
        e["kind"] == "step" for e in mine) else 0.0)
    for e in mine:
        if e["kind"] == "step":
            continue
        kind = "compute" if e["kind"] in COMPUTE_KINDS else "comm"
        label = f"{e['kind']}{e.get('mb', '')}" + (f".{e['chunk']}" if e.get("chunk") else "")
        view.events.append(Event(e["rank"], kind, e["t0"] - origin, e["t1"] - origin, label))
        if kind == "compute":
            view.compute_s[e["rank"]] = view.compute_s.get(e["rank"], 0.0) + e["t1"] - e["t0"]
    return view


def stage_times(events: Iterable[dict], steps: Iterable[int]) -> dict[int, dict[str, float]]:
    """Per rank, the mean forward and backward time of one micro-batch (all its chunks summed)
    over `steps`, and the mean send and recv time (means, because a step's length is their sum)."""
    wanted = set(steps)
    per: dict[int, dict[str, dict[tuple[int, int], float]]] = {}
    for e in events:
        if e.get("step") not in wanted or e["kind"] not in (*COMPUTE_KINDS, *COMM_KINDS):
            continue
        slot = per.setdefault(e["rank"], {}).setdefault(e["kind"], {})
        key = (e["step"], e.get("mb", 0))
        slot[key] = slot.get(key, 0.0) + e["t1"] - e["t0"]  # a micro-batch's chunks add up
    out = {}
    for rank, kinds in sorted(per.items()):
        out[rank] = {k: statistics.fmean(kinds[k].values()) if kinds.get(k) else 0.0
                     for k in (*COMPUTE_KINDS, *COMM_KINDS)}
    return out


def transfer_times(events: Iterable[dict], steps: Iterable[int]) -> list[float]:
    """Observed stage-to-stage delays inside the run: from a producer's compute end to its
    consumer's compute start, counted where the consumer was already waiting for that input."""
    wanted = set(steps)
    ends, waits = {}, []
    for e in events:
        if e.get("step") in wanted and e["kind"] in COMPUTE_KINDS:
            ends[(e["kind"], e["step"], e["mb"], e["stage"])] = e["t1"]
    for e in events:
        if e.get("step") not in wanted or e["kind"] != "recv" or "of" not in e:
            continue
        source = e["stage"] - 1 if e["of"] == "F" else e["stage"] + 1
        produced = ends.get((e["of"], e["step"], e["mb"], source))
        if produced is not None and e["t0"] <= produced <= e["t1"]:
            waits.append(e["t1"] - produced)
    return waits


def step_times(events: Iterable[dict], steps: Iterable[int]) -> list[float]:
    """The slowest rank's step wall time for each of `steps`."""
    worst: dict[int, float] = {}
    wanted = set(steps)
    for e in events:
        if e["kind"] == "step" and e["step"] in wanted:
            worst[e["step"]] = max(worst.get(e["step"], 0.0), e["t1"] - e["t0"])
    return [worst[s] for s in sorted(worst)]


def timeline_rows(events: Iterable[Event], lane: str = "rank") -> list[dict]:
    """Gantt rows (rank, name, start, duration, kind) of timeline events, for the figures."""
    return [{"rank": f"{lane} {e.rank}", "name": e.label, "start": e.start, "duration": e.end - e.start,
             "kind": e.kind} for e in events]
