"""Trace files: metadata as JSON (`name.json`) and lane arrays in numpy's npz (`name.npz`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from uol_core.debug.recorder import Launch, MemEvent, TensorInfo, Trace

FORMAT = "uol-trace/1"


def save_trace(trace: Trace, path: str | Path) -> tuple[Path, Path]:
    """Write `path`.json and `path`.npz; returns both paths."""
    base = Path(path).with_suffix("")
    meta = {
        "format": FORMAT,
        "notes": trace.notes,
        "sources": trace.sources,
        "launches": [{"kernel": lc.kernel, "file": lc.file, "grid": list(lc.grid),
                      "recorded": [list(p) for p in lc.recorded], "sampled": lc.sampled,
                      "dropped_events": lc.dropped_events,
                      "tensors": {n: {"shape": list(t.shape), "dtype": t.dtype,
                                      "itemsize": t.itemsize} for n, t in lc.tensors.items()}}
                     for lc in trace.launches],
        "events": [{"kind": ev.kind, "launch": ev.launch, "program": list(ev.program),
                    "tensor": ev.tensor, "line": ev.line, "itemsize": ev.itemsize,
                    "values": ev.values, "lanes": int(ev.offsets.size)} for ev in trace.events],
    }
    arrays = {
        "offsets": np.concatenate([ev.offsets for ev in trace.events]) if trace.events
        else np.zeros(0, np.int64),
        "mask": np.concatenate([ev.mask for ev in trace.events]) if trace.events
        else np.zeros(0, bool),
        "oob": np.concatenate([ev.oob for ev in trace.events]) if trace.events
        else np.zeros(0, bool),
    }
    json_path, npz_path = base.with_suffix(".json"), base.with_suffix(".npz")
    json_path.write_text(json.dumps(meta, indent=1))
    np.savez_compressed(npz_path, **arrays)
    return json_path, npz_path


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by save_trace (either file's path, or the common stem)."""
    base = Path(path).with_suffix("")
    meta = json.loads(base.with_suffix(".json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{base}.json is not a {FORMAT} trace (format={meta.get('format')})")
    lanes = read_lane_arrays(base.with_suffix(".npz"))
    trace = Trace(sources=meta["sources"], notes=meta["notes"])
    for lc in meta["launches"]:
        tensors = {n: TensorInfo(n, tuple(t["shape"]), t["dtype"], t["itemsize"])
                   for n, t in lc["tensors"].items()}
        trace.launches.append(Launch(lc["kernel"], lc["file"], tuple(lc["grid"]), tensors,
                                     [tuple(p) for p in lc["recorded"]], lc["sampled"],
                                     lc["dropped_events"]))
    counts = [ev["lanes"] for ev in meta["events"]]
    if sum(counts) != lanes["offsets"].size:
        raise ValueError(f"{base}.npz holds {lanes['offsets'].size} lanes but {base}.json lists "
                         f"{sum(counts)}: the two files are not from the same trace (trace the kernel again)")
    # one split per array, each event a view into it: memory and time stay linear in the size
    if not counts:
        return trace
    bounds = np.cumsum(counts)[:-1]
    offsets, mask, oob = (np.split(lanes[name], bounds) for name in ("offsets", "mask", "oob"))
    for ev, ev_offsets, ev_mask, ev_oob in zip(meta["events"], offsets, mask, oob, strict=True):
        trace.events.append(MemEvent(ev["kind"], ev["launch"], tuple(ev["program"]), ev["tensor"],
                                     ev["line"], ev_offsets, ev_mask, ev_oob, ev["itemsize"],
                                     ev["values"]))
    return trace


def read_lane_arrays(npz_path: Path) -> dict[str, np.ndarray]:
    """The three lane arrays, each decompressed once. Indexing an open npz file decompresses
    the whole array again on every access, so reading it per event made loading quadratic."""
    with np.load(npz_path) as archive:
        lanes = {name: archive[name] for name in ("offsets", "mask", "oob")}
    if not lanes["offsets"].size == lanes["mask"].size == lanes["oob"].size:
        raise ValueError(f"{npz_path}: offsets, mask and oob differ in length (damaged file)")
    return lanes
