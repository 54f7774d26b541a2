"""Derived views of a trace: access heatmaps, masked-lane ratios, bytes per program, OOB findings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from uol_core.debug.recorder import Trace


@dataclass
class Finding:
    """Unmasked lanes outside their tensor: where (line, program) and which offsets."""

    kind: str
    kernel: str
    tensor: str | None
    line: int
    source: str
    programs: list[tuple[int, int, int]]
    lanes: int
    offsets: list[int]  # the first few offending element offsets
    numel: int

    def describe(self) -> str:
        return (f"out-of-bounds {self.kind} of {self.tensor} at line {self.line} "
                f"(`{self.source}`) in {self.kernel}: {self.lanes} lane(s) in "
                f"{len(self.programs)} program(s), offsets {self.offsets[:4]} outside "
                f"[0, {self.numel})")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _match(ev, program) -> bool:
    return program is None or ev.program == tuple(program) + (0,) * (3 - len(program))


def heatmap(trace: Trace, tensor: str, program: tuple[int, ...] | None = None,
            kind: str | None = None, launch: int | None = None) -> np.ndarray:
    """Per-element access counts of `tensor` (all programs, or one), shaped like the tensor."""
    info = None
    for lc in trace.launches:
        info = lc.tensors.get(tensor, info)
    if info is None:
        raise KeyError(f"no tensor '{tensor}' in the trace; known: {tensor_names(trace)}")
    counts = np.zeros(info.numel, dtype=np.int64)
    for ev in trace.events:
        if ev.tensor != tensor or not _match(ev, program) or (kind and ev.kind != kind):
            continue
        if launch is not None and ev.launch != launch:
            continue
        ok = ev.mask & ~ev.oob
        np.add.at(counts, ev.offsets[ok], 1)
    return counts.reshape(info.shape) if info.shape else counts.reshape(())


def tensor_names(trace: Trace) -> list[str]:
    """Every tensor name the trace saw, in order."""
    names: list[str] = []
    for lc in trace.launches:
        names += [n for n in lc.tensors if n not in names]
    return names


def mask_ratios(trace: Trace) -> list[dict]:
    """Per load/store source line: lanes issued, lanes masked off, and the masked share."""
    rows: dict[tuple, dict] = {}
    for ev in trace.events:
        key = (ev.launch, ev.kind, ev.line)
        row = rows.setdefault(key, {"kernel": trace.launches[ev.launch].kernel, "kind": ev.kind,
                                    "line": ev.line, "tensor": ev.tensor, "lanes": 0,
                                    "masked": 0, "source": trace.source_line(ev.launch, ev.line)})
        row["lanes"] += int(ev.mask.size)
        row["masked"] += int(ev.mask.size - ev.mask.sum())
    for row in rows.values():
        row["masked_ratio"] = row["masked"] / row["lanes"] if row["lanes"] else 0.0
    return sorted(rows.values(), key=lambda r: (r["kernel"], r["line"]))


def bytes_per_program(trace: Trace, launch: int | None = None) -> dict[tuple, dict[str, int]]:
    """Bytes loaded and stored by each recorded program (active, in-bounds lanes only)."""
    out: dict[tuple, dict[str, int]] = {}
    for ev in trace.events:
        if launch is not None and ev.launch != launch:
            continue
        row = out.setdefault((ev.launch, *ev.program), {"load": 0, "store": 0, "atomic": 0})
        row[ev.kind] += ev.nbytes
    return out


def oob_findings(trace: Trace) -> list[Finding]:
    """Out-of-bounds accesses grouped by kernel, kind and source line."""
    groups: dict[tuple, Finding] = {}
    for ev in trace.events:
        if not ev.oob.any():
            continue
        lc = trace.launches[ev.launch]
        key = (ev.launch, ev.kind, ev.line, ev.tensor)
        numel = lc.tensors[ev.tensor].numel if ev.tensor in lc.tensors else 0
        f = groups.setdefault(key, Finding(ev.kind, lc.kernel, ev.tensor, ev.line,
                                           trace.source_line(ev.launch, ev.line), [], 0, [],
                                           numel))
        if ev.program not in f.programs:
            f.programs.append(ev.program)
        f.lanes += int(ev.oob.sum())
        f.offsets += [int(o) for o in ev.offsets[ev.oob][: 8 - len(f.offsets)]]
    return list(groups.values())


def program_events(trace: Trace, program: tuple[int, ...], launch: int | None = None) -> list[dict]:
    """The loads and stores of one program in order, summarised for display."""
    rows = []
    for ev in trace.events:
        if not _match(ev, program) or (launch is not None and ev.launch != launch):
            continue
        active = ev.offsets[ev.mask]
        rows.append({"launch": ev.launch, "kind": ev.kind, "tensor": ev.tensor, "line": ev.line,
                     "lanes": int(ev.mask.size), "active": int(ev.mask.sum()),
                     "oob": int(ev.oob.sum()),
                     "offset_range": [int(active.min()), int(active.max())] if active.size else [],
                     "values": ev.values})
    return rows


def summary(trace: Trace) -> dict:
    """A JSON-ready overview: launches, events, bytes, OOB findings, sampling notes."""
    moved = bytes_per_program(trace)
    return {
        "launches": [{"kernel": lc.kernel, "grid": list(lc.grid), "recorded": len(lc.recorded),
                      "sampled": lc.sampled, "dropped_events": lc.dropped_events,
                      "tensors": {n: {"shape": list(t.shape), "dtype": t.dtype}
                                  for n, t in lc.tensors.items()}}
                     for lc in trace.launches],
        "events": len(trace.events),
        "bytes_loaded": sum(r["load"] for r in moved.values()),
        "bytes_stored": sum(r["store"] + r["atomic"] for r in moved.values()),
        "findings": [f.to_dict() for f in oob_findings(trace)],
        "mask_ratios": mask_ratios(trace),
        "notes": trace.notes,
    }
