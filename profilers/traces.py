"""One timeline model (lanes of timed events) and Chrome trace JSON (opens in Perfetto) in and out."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TraceEvent:
    """One span on one lane (a rank, a thread, a tuner): seconds from the timeline's start."""

    lane: str
    name: str
    start_s: float
    dur_s: float
    category: str = ""
    args: dict = field(default_factory=dict)


@dataclass
class Timeline:
    """Events of one session (a tuning run, an HCF scenario, a reference run)."""

    title: str
    events: list[TraceEvent] = field(default_factory=list)

    @property
    def lanes(self) -> list[str]:
        """Lane names in order of first appearance."""
        return list(dict.fromkeys(e.lane for e in self.events))

    @property
    def span_s(self) -> float:
        """Time from the first start to the last end."""
        if not self.events:
            return 0.0
        return max(e.start_s + e.dur_s for e in self.events) - min(e.start_s for e in self.events)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"title": self.title, "events": [asdict(e) for e in self.events]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Timeline:
        """Inverse of `to_dict`."""
        return cls(data.get("title", "timeline"), [TraceEvent(**e) for e in data["events"]])


def from_rows(rows: Iterable[Any], title: str = "timeline") -> Timeline:
    """Timeline from generic rows: (lane, name, start_s, dur_s, category) tuples or dicts.

    This is the plug for HCF's Gantt data (rank, op, start, duration, kind) and any other source.
    """
    events = []
    for row in rows:
        if isinstance(row, Mapping):
            lane = row.get("lane", row.get("rank", row.get("resource", 0)))
            events.append(TraceEvent(str(lane), str(row.get("name", row.get("op", "?"))),
                                     float(row.get("start_s", row.get("start", 0.0))),
                                     float(row.get("dur_s", row.get("duration", 0.0))),
                                     str(row.get("category", row.get("kind", ""))),
                                     dict(row.get("args", {}))))
        else:
            lane, name, start, dur, *rest = row
            events.append(TraceEvent(str(lane), str(name), float(start), float(dur),
                                     str(rest[0]) if rest else ""))
    return Timeline(title, events)


def from_tuning_rows(rows: Iterable[Mapping], title: str = "tuning session") -> Timeline:
    """Timeline of a tuning session from TuningDB rows: one span per measured or failed config."""
    rows = sorted(rows, key=lambda r: r["ts"])
    if not rows:
        return Timeline(title)
    t0 = rows[0]["ts"]
    events = []
    for r in rows:
        median = r.get("median_s") or 0.0
        # a row is written when its measurement ends; draw it ending there
        dur = max(median * 7, 1e-6)
        events.append(TraceEvent("tuner", r["config"], max(0.0, r["ts"] - t0 - dur), dur,
                                 r.get("status", ""),
                                 {k: r.get(k) for k in ("gflops", "median_s", "iqr_s", "reason",
                                                        "predicted_gflops") if r.get(k)}))
    return Timeline(title, events)


def to_chrome_trace(timeline: Timeline) -> dict:
    """Chrome trace JSON: complete ('X') events in microseconds, one named thread per lane."""
    lanes = {lane: i + 1 for i, lane in enumerate(timeline.lanes)}
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                           "args": {"name": timeline.title}}]
    for lane, tid in lanes.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                       "args": {"name": lane}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid,
                       "args": {"sort_index": tid}})
    for e in sorted(timeline.events, key=lambda e: e.start_s):
        events.append({"ph": "X", "name": e.name, "cat": e.category or "uol", "pid": 1,
                       "tid": lanes[e.lane], "ts": e.start_s * 1e6, "dur": e.dur_s * 1e6,
                       "args": _jsonable(e.args)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "uol-studio", "title": timeline.title}}


def write_chrome_trace(timeline: Timeline, path: str | Path) -> Path:
    """Write `to_chrome_trace` to a file (open it at ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.write_text(json.dumps(to_chrome_trace(timeline)), encoding="utf-8")
    return path


def from_chrome_trace(data: dict | list | str | Path, title: str = "") -> Timeline:
    """Read Chrome trace JSON ('X' and matched 'B'/'E' events) into a timeline; lanes pid/tid."""
    if isinstance(data, (str, Path)):
        data = json.loads(Path(data).read_text(encoding="utf-8"))
    raw = data["traceEvents"] if isinstance(data, dict) else data
    names: dict[tuple, str] = {}
    for e in raw:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name"))
    spans: list[tuple] = []
    open_: dict[tuple, list[dict]] = {}
    for e in raw:
        ph, key = e.get("ph"), (e.get("pid"), e.get("tid"))
        if ph == "X":
            spans.append((key, e, float(e["ts"]), float(e.get("dur", 0.0))))
        elif ph == "B":
            open_.setdefault(key, []).append(e)
        elif ph == "E" and open_.get(key):
            begin = open_[key].pop()
            spans.append((key, begin, float(begin["ts"]), float(e["ts"]) - float(begin["ts"])))
    if not spans:
        return Timeline(title or "trace")
    t0 = min(s[2] for s in spans)
    events = [TraceEvent(names.get(key, f"{key[0]}/{key[1]}"), str(e.get("name", "?")),
                         (ts - t0) / 1e6, dur / 1e6, str(e.get("cat", "")),
                         dict(e.get("args") or {}))
              for key, e, ts, dur in spans]
    events.sort(key=lambda ev: ev.start_s)
    return Timeline(title or "trace", events)


def torch_reference_timeline(op_spec: str, sizes: Mapping[str, int], repeats: int = 3) -> Timeline:
    """torch.profiler trace of the reference evaluator on random inputs, as a timeline."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    import uol_core
    from profilers.pyinstrument_source import op_spec_text
    from uol_core.runtime.inputs import random_inputs

    op = uol_core.parse(op_spec_text(op_spec))
    inputs = random_inputs(op, sizes)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            uol_core.evaluate(op, **inputs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        timeline = from_chrome_trace(path, title=f"torch reference: {op.name}")
    # torch also writes flow and instant events; keep the spans
    timeline.events = [e for e in timeline.events if e.dur_s > 0]
    return timeline


def _jsonable(args: Mapping) -> dict:
    return json.loads(json.dumps(dict(args), default=str))
