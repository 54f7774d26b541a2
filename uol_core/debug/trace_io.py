"""Trace files: metadata as JSON (`name.json`) and lane arrays in numpy's npz (`name.npz`)."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import numpy as np

from uol_core.debug.recorder import Launch, MemEvent, TensorInfo, Trace

FORMAT = "uol-trace/1"
# What the Debugger loads from a trace (its files may come from a sandboxed run: data from an
# untrusted process, checked before it is parsed or inflated).
MAX_TRACE_JSON_BYTES = 64 << 20
MAX_TRACE_NPZ_BYTES = 64 << 20
MAX_TRACE_LANES = 1 << 24  # 16 Mi lanes: 64 programs x 4096 events x 64 lanes
MAX_LANE_BYTES = MAX_TRACE_LANES * 10 + (64 << 10)  # int64 offsets + two bool arrays + headers
LANE_KINDS = {"offsets": "iu", "mask": "b", "oob": "b"}  # numpy dtype kinds per member


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
    """Read a trace written by save_trace (either file's path, or the common stem). Both files
    may come from a sandboxed run, so sizes are checked before anything is parsed or inflated."""
    base = Path(path).with_suffix("")
    meta = json.loads(_read_regular(base.with_suffix(".json"), MAX_TRACE_JSON_BYTES))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{base}.json is not a {FORMAT} trace (format="
                         f"{meta.get('format') if isinstance(meta, dict) else None})")
    counts = [ev["lanes"] for ev in meta["events"]]
    if not all(isinstance(c, int) and c >= 0 for c in counts):
        raise ValueError(f"{base}.json: lane counts must be non-negative integers")
    if sum(counts) > MAX_TRACE_LANES:
        raise ValueError(f"{base}.json lists {sum(counts)} lanes, over the {MAX_TRACE_LANES} "
                         f"the Debugger loads: trace fewer programs or smaller shapes")
    lanes = read_lane_arrays(base.with_suffix(".npz"), expected=sum(counts))
    trace = Trace(sources=meta["sources"], notes=meta["notes"])
    for lc in meta["launches"]:
        tensors = {n: TensorInfo(n, tuple(t["shape"]), t["dtype"], t["itemsize"])
                   for n, t in lc["tensors"].items()}
        trace.launches.append(Launch(lc["kernel"], lc["file"], tuple(lc["grid"]), tensors,
                                     [tuple(p) for p in lc["recorded"]], lc["sampled"],
                                     lc["dropped_events"]))
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


def _open_regular(path: Path, max_bytes: int) -> int:
    """A descriptor of `path` if it is a regular file (never through a link, never blocking
    on a FIFO) of at most `max_bytes`."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(info.st_mode) else
               f"is {info.st_size} bytes, over the {max_bytes >> 20} MiB a trace file may have"
               if info.st_size > max_bytes else "")
    if problem:
        os.close(fd)
        raise ValueError(f"{path} {problem}")
    return fd


def _read_regular(path: Path, max_bytes: int) -> bytes:
    with os.fdopen(_open_regular(path, max_bytes), "rb") as src:
        size = os.fstat(src.fileno()).st_size  # read(n) reserves n bytes: ask for what is there
        data = src.read(size + 1)
    if len(data) > size:
        raise ValueError(f"{path} grew while it was read (trace the kernel again)")
    return data


def read_lane_arrays(npz_path: Path, expected: int | None = None) -> dict[str, np.ndarray]:
    """The three lane arrays, each decompressed once (indexing an open npz file decompresses
    the whole array again on every access, so reading it per event made loading quadratic).
    Before anything is inflated: exactly the three members, each one's uncompressed size
    within the cap, its array header a 1-d array of the right kind whose length is `expected`
    (the lanes the JSON lists) and whose data is exactly the member's size."""
    with os.fdopen(_open_regular(npz_path, MAX_TRACE_NPZ_BYTES), "rb") as src, \
            zipfile.ZipFile(src) as archive:
        members = archive.infolist()
        names = sorted(m.filename for m in members)
        if names != sorted(f"{n}.npy" for n in LANE_KINDS):
            raise ValueError(f"{npz_path}: not a trace's lane file (members {names[:5]})")
        total = sum(m.file_size for m in members)
        if total > MAX_LANE_BYTES:
            raise ValueError(f"{npz_path} inflates to {total} bytes, over the "
                             f"{MAX_LANE_BYTES >> 20} MiB the Debugger loads")
        lanes = {m.filename[:-4]: _read_member(archive, m, npz_path, expected) for m in members}
    if not lanes["offsets"].size == lanes["mask"].size == lanes["oob"].size:
        raise ValueError(f"{npz_path}: offsets, mask and oob differ in length (damaged file)")
    return lanes


def _read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, npz_path: Path,
                 expected: int | None) -> np.ndarray:
    name = member.filename[:-4]
    with archive.open(member) as data:
        version = np.lib.format.read_magic(data)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _fortran_order, dtype = read_header(data)
        header = data.tell()
        if dtype.kind not in LANE_KINDS[name] or dtype.hasobject or len(shape) != 1:
            raise ValueError(f"{npz_path}: {name} is {dtype} of shape {shape}, not a 1-d "
                             f"array of {LANE_KINDS[name]} (damaged file)")
        count = shape[0]
        if expected is not None and count != expected:
            raise ValueError(f"{npz_path} holds {count} lanes but its JSON lists {expected}: "
                             f"the two files are not from the same trace (trace the kernel "
                             f"again)")
        if count > MAX_TRACE_LANES or header + count * dtype.itemsize != member.file_size:
            raise ValueError(f"{npz_path}: {name} holds {count} lanes in {member.file_size} "
                             f"bytes (damaged file, or over the {MAX_TRACE_LANES} lanes the "
                             f"Debugger loads)")
        array = np.empty(count, dtype)
        buffer, filled = memoryview(array.view(np.uint8)), 0
        while filled < buffer.nbytes:
            got = data.readinto(buffer[filled:])
            if not got:
                raise ValueError(f"{npz_path}: {name} ends early (damaged file)")
            filled += got
    return array
