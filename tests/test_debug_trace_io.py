"""Trace files: exact round trip, damaged pairs refused, and loading linear in the trace's size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from uol_core.debug.recorder import Launch, MemEvent, TensorInfo, Trace
from uol_core.debug.trace_io import load_trace, save_trace

REPO = Path(__file__).resolve().parents[1]


def synthetic_trace(events: int, lanes: int) -> Trace:
    """A trace of `events` loads/stores over two tensors, lane counts varying from event to event."""
    rng = np.random.default_rng(7)
    numel = 4096
    trace = Trace(sources={"k.py": "x = tl.load(p)\ntl.store(q, x)\n"}, notes=["synthetic"])
    trace.launches.append(Launch("k", "k.py", (64, 1, 1),
                                 {"x": TensorInfo("x", (numel,), "float32", 4),
                                  "y": TensorInfo("y", (64, 64), "float32", 4)},
                                 [(p, 0, 0) for p in range(64)]))
    for i in range(events):
        width = lanes - (i % 3)  # unequal sizes: a wrong split point would show
        offsets = rng.integers(-8, numel + 8, width, dtype=np.int64)
        mask = rng.random(width) < 0.9
        oob = mask & ((offsets < 0) | (offsets >= numel))
        kind, tensor, line = ("load", "x", 1) if i % 2 == 0 else ("store", "y", 2)
        trace.events.append(MemEvent(kind, 0, (i % 64, 0, 0), tensor, line, offsets, mask, oob,
                                     4, {"min": float(i), "max": float(i + 1)}))
    return trace


def test_round_trip_keeps_every_event_exactly(tmp_path) -> None:
    trace = synthetic_trace(events=50, lanes=16)
    json_path, _ = save_trace(trace, tmp_path / "t")
    again = load_trace(json_path)
    assert len(again.events) == len(trace.events)
    for before, after in zip(trace.events, again.events, strict=True):
        assert (after.kind, after.launch, after.program, after.tensor, after.line, after.itemsize,
                after.values) == (before.kind, before.launch, before.program, before.tensor,
                                  before.line, before.itemsize, before.values)
        assert np.array_equal(after.offsets, before.offsets)
        assert np.array_equal(after.mask, before.mask)
        assert np.array_equal(after.oob, before.oob)
    assert again.launches[0].tensors["y"].shape == (64, 64)
    assert again.notes == ["synthetic"]


def test_trace_without_events_round_trips(tmp_path) -> None:
    trace = synthetic_trace(events=0, lanes=4)
    again = load_trace(save_trace(trace, tmp_path / "empty")[0])
    assert again.events == [] and again.launches[0].kernel == "k"


def test_json_and_npz_of_different_traces_are_refused(tmp_path) -> None:
    json_path, _ = save_trace(synthetic_trace(events=10, lanes=8), tmp_path / "a")
    _, other_npz = save_trace(synthetic_trace(events=12, lanes=8), tmp_path / "b")
    other_npz.replace(json_path.with_suffix(".npz"))
    with pytest.raises(ValueError, match="not from the same trace"):
        load_trace(json_path)


LOAD_UNDER_CAP = textwrap.dedent('''
    import json, resource, sys, time, tracemalloc

    from uol_core.debug.trace_io import load_trace

    def vm_bytes():
        for row in open("/proc/self/status"):
            if row.startswith("VmSize:"):
                return int(row.split()[1]) * 1024
        raise RuntimeError("no VmSize")

    cap = int(sys.argv[2])
    # the address-space cap sits `cap` bytes above what the interpreter already maps, so a
    # loader that grows past it fails here with MemoryError instead of swapping the machine
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + cap, resource.RLIM_INFINITY))
    tracemalloc.start()  # numpy reports its buffers to tracemalloc: the peak counts the arrays
    start = time.perf_counter()
    trace = load_trace(sys.argv[1])
    seconds = time.perf_counter() - start
    grown = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"events": len(trace.events), "grown": grown, "seconds": seconds}))
''')


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmSize from /proc (Linux)")
def test_ten_thousand_events_load_under_a_memory_cap(tmp_path) -> None:
    # 10,000 events of ~128 lanes hold ~13 MB of lanes; a loader linear in the size needs a few
    # tens of MB on top of that, one that re-reads the arrays per event needs gigabytes
    events, cap, grown_limit = 10_000, 1 << 30, 256 << 20
    json_path, _ = save_trace(synthetic_trace(events=events, lanes=128), tmp_path / "big")
    run = subprocess.run([sys.executable, "-c", LOAD_UNDER_CAP, str(json_path), str(cap)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1",
                              "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, f"loading {events} events under a {cap >> 20} MiB cap failed:\n" \
                                f"{run.stderr[-2000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["events"] == events
    assert result["grown"] < grown_limit, f"loading peaked at {result['grown'] >> 20} MiB"
    assert result["seconds"] < 60, f"loading took {result['seconds']:.1f} s"
