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
    arrays = np.load(base.with_suffix(".npz"))
    trace = Trace(sources=meta["sources"], notes=meta["notes"])
    for lc in meta["launches"]:
        tensors = {n: TensorInfo(n, tuple(t["shape"]), t["dtype"], t["itemsize"])
                   for n, t in lc["tensors"].items()}
        trace.launches.append(Launch(lc["kernel"], lc["file"], tuple(lc["grid"]), tensors,
                                     [tuple(p) for p in lc["recorded"]], lc["sampled"],
                                     lc["dropped_events"]))
    start = 0
    for ev in meta["events"]:
        end = start + ev["lanes"]
        trace.events.append(MemEvent(ev["kind"], ev["launch"], tuple(ev["program"]), ev["tensor"],
                                     ev["line"], arrays["offsets"][start:end],
                                     arrays["mask"][start:end], arrays["oob"][start:end],
                                     ev["itemsize"], ev["values"]))
        start = end
    return trace
