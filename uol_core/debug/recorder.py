"""Trace recorder: run Triton kernels under the interpreter and record every load/store per program.

Works like triton-viz: the interpreter's builder ops `create_masked_load/store` (and atomics) are
wrapped while a launch runs; each call gives the lane addresses, the mask and the values. Lanes
that are unmasked but fall outside their tensor are recorded as out-of-bounds and masked off
before the real access, so a buggy kernel is reported instead of crashing the process.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_PROGRAMS = 64  # programs recorded per launch; larger grids are sampled evenly
MAX_EVENTS_PER_PROGRAM = 4096


@dataclass
class MemEvent:
    """One load or store of one program: lane offsets (elements) into `tensor`, mask, OOB lanes."""

    kind: str  # load | store | atomic
    launch: int
    program: tuple[int, int, int]
    tensor: str | None
    line: int
    offsets: np.ndarray
    mask: np.ndarray
    oob: np.ndarray
    itemsize: int
    values: dict[str, float] = field(default_factory=dict)  # min/max/mean over active lanes

    @property
    def active(self) -> int:
        return int(self.mask.sum())

    @property
    def nbytes(self) -> int:
        return (self.active - int(self.oob.sum())) * self.itemsize


@dataclass
class TensorInfo:
    """A tensor argument as the trace saw it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass
class Launch:
    """One kernel launch: its name, grid, tensors, which programs were recorded."""

    kernel: str
    file: str
    grid: tuple[int, int, int]
    tensors: dict[str, TensorInfo]
    recorded: list[tuple[int, int, int]] = field(default_factory=list)
    sampled: bool = False
    dropped_events: int = 0


@dataclass
class Trace:
    """Every recorded launch and memory event, plus the kernel source text for line lookups."""

    launches: list[Launch] = field(default_factory=list)
    events: list[MemEvent] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # file -> text
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def source_line(self, launch: int, line: int) -> str:
        lines = self.sources.get(self.launches[launch].file, "").splitlines()
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""


class _Recorder:
    """Holds the state of the launch being interpreted."""

    def __init__(self, trace: Trace, max_programs: int) -> None:
        self.trace = trace
        self.max_programs = max_programs
        self.launch: int | None = None
        self.ranges: list[tuple[int, int, str, int]] = []  # start, end, name, itemsize
        self.sample: set[int] | None = None
        self.counts: dict[tuple, int] = {}
        self.file = ""

    def begin(self, fn: Callable, bound: dict[str, Any], grid: tuple[int, ...]) -> None:
        grid3 = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        tensors, ranges = {}, []
        for name, arg in bound.items():
            if hasattr(arg, "data_ptr") and hasattr(arg, "element_size"):
                label = name[:-4] if name.endswith("_ptr") else name
                info = TensorInfo(label, tuple(arg.shape), str(arg.dtype).replace("torch.", ""),
                                  arg.element_size())
                tensors[label] = info
                start = arg.data_ptr()
                ranges.append((start, start + info.numel * info.itemsize, label, info.itemsize))
        self.file = inspect.getsourcefile(fn) or ""
        if self.file and self.file not in self.trace.sources:
            with contextlib.suppress(OSError):
                self.trace.sources[self.file] = Path(self.file).read_text()
        total = grid3[0] * grid3[1] * grid3[2]
        self.sample = None
        if total > self.max_programs:
            self.sample = set(np.linspace(0, total - 1, self.max_programs).astype(int).tolist())
        self.trace.launches.append(Launch(fn.__name__, self.file, grid3, tensors,
                                          sampled=self.sample is not None))
        self.launch = len(self.trace.launches) - 1
        self.ranges = sorted(ranges)
        self.counts = {}

    def program(self) -> tuple[int, int, int] | None:
        """The current program id when it is being recorded."""
        from triton.runtime.interpreter import interpreter_builder as b

        pid = tuple(int(x) for x in b.grid_idx)
        _gx, gy, gz = b.grid_dim
        linear = (pid[0] * gy + pid[1]) * gz + pid[2]
        if self.sample is not None and linear not in self.sample:
            return None
        launch = self.trace.launches[self.launch]
        if not launch.recorded or launch.recorded[-1] != pid:
            launch.recorded.append(pid)
        return pid

    def line(self) -> int:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.file:
                return frame.f_lineno
            frame = frame.f_back
        return 0

    def attribute(self, addrs: np.ndarray, mask: np.ndarray, itemsize: int):
        """The tensor the lanes point into (majority of in-range lanes), offsets, OOB lanes."""
        flat = addrs.reshape(-1).astype(np.int64)
        owner = np.full(flat.shape, -1)
        for i, (start, end, _, _) in enumerate(self.ranges):
            owner[(flat >= start) & (flat < end)] = i
        inside = owner[mask.reshape(-1)] if mask.any() else owner
        inside = inside[inside >= 0]
        if inside.size:
            best = int(np.bincount(inside).argmax())
        elif self.ranges:  # every lane is outside: blame the nearest tensor at or below
            starts = np.array([r[0] for r in self.ranges])
            below = np.nonzero(starts <= flat.min())[0]
            best = int(below[-1]) if below.size else 0
        else:
            return None, flat // max(itemsize, 1), np.zeros_like(mask.reshape(-1))
        start, end, name, size = self.ranges[best]
        offsets = (flat - start) // size
        oob = mask.reshape(-1) & ((flat < start) | (flat >= end))
        return name, offsets, oob

    def record(self, kind: str, ptrs, mask_data: np.ndarray, values: np.ndarray | None):
        if self.launch is None:
            return np.zeros(np.shape(ptrs.data), dtype=bool), None
        pid = self.program()
        itemsize = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
        mask = np.broadcast_to(np.asarray(mask_data, dtype=bool), ptrs.data.shape)
        name, offsets, oob = self.attribute(ptrs.data, mask, itemsize)
        event = None
        if pid is not None:
            key = (self.launch, pid)
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.counts[key] > MAX_EVENTS_PER_PROGRAM:
                self.trace.launches[self.launch].dropped_events += 1
            else:
                summary = {}
                if values is not None:
                    active = np.broadcast_to(values, mask.shape)[mask & ~oob.reshape(mask.shape)]
                    if active.size and np.issubdtype(active.dtype, np.number):
                        summary = {"min": float(active.min()), "max": float(active.max()),
                                   "mean": float(active.astype(np.float64).mean())}
                event = MemEvent(kind, self.launch, pid, name, self.line(),
                                 offsets.astype(np.int64), mask.reshape(-1).copy(), oob.copy(),
                                 itemsize, summary)
                self.trace.events.append(event)
        return oob.reshape(mask.shape), event


@contextlib.contextmanager
def recording(max_programs: int = MAX_PROGRAMS) -> Iterator[Trace]:
    """Record every interpreted Triton launch inside the block into the yielded Trace."""
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime import interpreter as itp

    trace = Trace()
    rec = _Recorder(trace, max_programs)
    builder = itp.interpreter_builder
    orig_call = itp.GridExecutor.__call__
    orig_load, orig_store = builder.create_masked_load, builder.create_masked_store

    def call(self, *args, **kwargs):
        spec = inspect.getfullargspec(self.fn)
        kw = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
        bound = inspect.getcallargs(self.fn, *args, **kw)
        grid = self.grid(bound) if callable(self.grid) else self.grid
        rec.begin(self.fn, bound, tuple(grid))
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            rec.launch = None

    def load(ptrs, mask, other, cache_policy, is_volatile):
        oob, ev = rec.record("load", ptrs, mask.data, None)
        if oob.any():  # never touch memory outside the tensor
            mask = itp.TensorHandle(np.broadcast_to(mask.data, oob.shape) & ~oob, mask.dtype)
        out = orig_load(ptrs, mask, other, cache_policy, is_volatile)
        if ev is not None and out.data.size == ev.mask.size:
            active = out.data.reshape(-1)[ev.mask & ~ev.oob]
            if active.size and np.issubdtype(out.data.dtype, np.number):
                ev.values = {"min": float(np.min(active)), "max": float(np.max(active)),
                             "mean": float(np.mean(active.astype(np.float64)))}
        return out

    def store(ptrs, value, mask, cache_policy):
        oob, _ = rec.record("store", ptrs, mask.data, value.data)
        if oob.any():
            mask = itp.TensorHandle(np.broadcast_to(mask.data, oob.shape) & ~oob, mask.dtype)
        return orig_store(ptrs, value, mask, cache_policy)

    itp.GridExecutor.__call__ = call
    builder.create_masked_load, builder.create_masked_store = load, store
    try:
        yield trace
    finally:
        itp.GridExecutor.__call__ = orig_call
        del builder.create_masked_load, builder.create_masked_store
