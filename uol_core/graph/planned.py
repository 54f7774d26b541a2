"""The memory-planned graph runtime: one recorded run per shape signature becomes a replay with
no per-node allocation, no view bookkeeping and one C call per run of consecutive kernels.

Building (once per input shapes): the groups run once on real tensors while every tensor is
traced to its storage ("root"): an input, a parameter, a kernel output, a copy, or a result a
torch call allocated. Views (reshape, transpose, getitem, ...) become fixed strided references
into their root and disappear from the run. Liveness over the steps gives every intermediate
root an interval; `memory_plan.plan_memory` packs them into one arena, allocated once,
pre-faulted, with transparent huge pages requested. Each kernel's argument array (pointers and
strides) is then built once; a run only patches the pointers of inputs and outputs.

Running: consecutive C kernels run in one call of a small C driver (`uol_graph_run`, in
runtime/driver.py) that loops over the prebuilt (function, arguments, strides) triples; copies
that make an input contiguous for a kernel that needs it write into the arena; torch calls
that allocate (opaque ops) run as they are. Outputs go into the caller's buffers when given,
else into fresh tensors: a returned tensor never aliases the arena, so the next call cannot
overwrite it.
"""

from __future__ import annotations

import ctypes
import resource
import statistics
import threading
import time
from dataclasses import dataclass, field

import torch

from uol_core.graph.arena import Arena
from uol_core.graph.memory_plan import Buffer, MemoryPlan
from uol_core.graph.verify import relative_error
from uol_core.runtime.driver import driver


@dataclass
class Root:
    """A storage the run reads or writes. kind: arena | fixed (parameter) | input | output |
    dynamic (allocated by a torch call on every run)."""

    name: str
    kind: str
    nbytes: int
    dtype: torch.dtype
    first: int
    last: int
    anchor: torch.Tensor | None = None  # fixed and arena roots: a tensor on the storage


@dataclass(frozen=True)
class Ref:
    """A tensor as a strided window on a root (offset in elements from the root's start)."""

    root: int
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def on(self, anchor: torch.Tensor) -> torch.Tensor:
        return anchor.as_strided(self.shape, self.stride, anchor.storage_offset() + self.offset)

    def byte_offset(self) -> int:
        return self.offset * torch.empty((), dtype=self.dtype).element_size()


class KernelStep:
    """One C kernel: its entry point and argument references (inputs then outputs, entry order)."""

    def __init__(self, group: str, fn, refs: list[Ref]) -> None:
        self.group, self.fn, self.refs = group, fn, refs
        self.address = ctypes.cast(fn, ctypes.c_void_p).value
        self.ptrs = (ctypes.c_void_p * max(1, len(refs)))()
        flat = [s for r in refs for s in r.stride]
        self.strides = (ctypes.c_int64 * max(1, len(flat)))(*flat)


class Segment:
    """Consecutive kernels run by one driver call."""

    def __init__(self, kernels: list[KernelStep]) -> None:
        self.kernels = kernels
        self.fns = (ctypes.c_void_p * len(kernels))(*[k.address for k in kernels])
        self.args = (ctypes.c_void_p * len(kernels))(*[ctypes.addressof(k.ptrs) for k in kernels])
        self.strides = (ctypes.c_void_p * len(kernels))(*[ctypes.addressof(k.strides) for k in kernels])
        self.call = (driver().uol_graph_run, len(kernels), ctypes.addressof(self.fns),
                     ctypes.addressof(self.args), ctypes.addressof(self.strides)) \
            if driver() is not None else None

    def run(self, anchors) -> None:
        if self.call is not None:
            fn, n, fns, args, strides = self.call
            fn(n, fns, args, strides)
            return
        for k in self.kernels:
            k.fn(k.ptrs, k.strides)

    def run_timed(self, seconds: dict[str, float]) -> None:
        """The kernels in replay order, one call each, each one's seconds added to its
        group's: what the driver does, with a clock read between kernels."""
        for k in self.kernels:
            start = time.perf_counter()
            k.fn(k.ptrs, k.strides)
            seconds[k.group] = seconds.get(k.group, 0.0) + time.perf_counter() - start


class CopyStep:
    """dst (an arena root, contiguous) <- src, reshaped to src's shape when the numel agrees."""

    def __init__(self, group: str, src: Ref, dst: Ref) -> None:
        self.group, self.src, self.dst = group, src, dst
        self.fixed: tuple[torch.Tensor, torch.Tensor] | None = None  # both views, when final

    def run(self, anchors) -> None:
        if self.fixed is not None:
            self.fixed[0].copy_(self.fixed[1])
            return
        dst = self.dst.on(anchors[self.dst.root])
        dst.view(self.src.shape).copy_(self.src.on(anchors[self.src.root]))


class CallStep:
    """A torch call or a non-C group: reads references, binds the storages it allocated."""

    def __init__(self, group: str, call, args, kwargs, binds: list[tuple[object, int]]) -> None:
        self.group, self.call, self.args, self.kwargs, self.binds = group, call, args, kwargs, binds

    def run(self, anchors) -> list[tuple[int, torch.Tensor]]:
        result = self.call(*_materialize(self.args, anchors), **_materialize(self.kwargs, anchors))
        return [(root, _pick(result, path)) for path, root in self.binds]


def _materialize(value, anchors):
    if isinstance(value, Ref):
        return value.on(anchors[value.root])
    if isinstance(value, list):
        return [_materialize(v, anchors) for v in value]
    if isinstance(value, tuple):
        return tuple(_materialize(v, anchors) for v in value)
    if isinstance(value, dict):
        return {k: _materialize(v, anchors) for k, v in value.items()}
    return value


def _pick(result, path):
    for key in path:
        result = result[key]
    return result


@dataclass
class RunStats:
    """What planning bought: bytes planned vs one allocation per buffer, steps, kernels."""

    memory: MemoryPlan
    kernels: int
    segments: int
    copies: int
    calls: int
    views_removed: int
    huge_pages: str
    # constant weights packed once (prepack.Prepacker.to_dict): memory held beside the arena
    prepacked: dict = field(default_factory=lambda: {"packed_weights": 0, "packed_bytes": 0})

    @property
    def packed_bytes(self) -> int:
        return self.prepacked["packed_bytes"]

    def to_dict(self) -> dict:
        return {"memory": self.memory.to_dict(), "kernels": self.kernels, "segments": self.segments,
                "copies": self.copies, "torch_calls": self.calls, "views_removed": self.views_removed,
                "huge_pages": self.huge_pages, "prepacked": self.prepacked,
                "planned_bytes": self.memory.arena_bytes + self.packed_bytes}


class PlannedGraph:
    """A compiled graph replayed on a planned arena; build with `plan_run` (see the module doc)."""

    def __init__(self, roots: list[Root], steps: list, patches: dict[int, list], inputs: dict[str, int],
                 params: dict[str, torch.Tensor], outputs: dict[str, Ref], stats: RunStats,
                 arena: Arena) -> None:
        self.roots, self.steps, self.patches = roots, steps, patches
        self.inputs, self.params, self.outputs, self.stats, self.arena = inputs, params, outputs, stats, arena
        self._anchors = [r.anchor for r in roots]
        self._output_roots = sorted({ref.root for ref in outputs.values() if roots[ref.root].kind == "output"})
        self._input_layout = {name: (roots[i].nbytes, roots[i].dtype) for name, i in inputs.items()}
        for i, root in enumerate(roots):  # fixed and arena pointers are final: write them once
            if root.anchor is not None:
                self._patch(i, root.anchor)
        for step in steps:  # so are copies between fixed and arena storages
            if isinstance(step, CopyStep) and None not in (roots[step.src.root].anchor,
                                                           roots[step.dst.root].anchor):
                dst = step.dst.on(roots[step.dst.root].anchor).view(step.src.shape)
                step.fixed = (dst, step.src.on(roots[step.src.root].anchor))
        self._lock = threading.Lock()  # the argument arrays are shared: one call at a time
        self.group_refs: dict[str, dict[str, Ref]] = {}  # for first_difference (record.py fills it)
        self.prepacker = None  # constant weights packed once (record.py sets it)

    def binds(self, env: dict[str, torch.Tensor]) -> bool:
        """Whether `env` holds the very parameter tensors this plan was built on."""
        return all(env.get(name) is t for name, t in self.params.items())

    def _patch(self, root: int, anchor: torch.Tensor) -> None:
        base = anchor.data_ptr()
        for ptrs, slot, offset in self.patches.get(root, ()):
            ptrs[slot] = base + offset

    def __call__(self, env: dict[str, torch.Tensor], out: dict[str, torch.Tensor] | None = None) -> dict:
        with self._lock:
            return self._run(env, out)

    def _run(self, env: dict[str, torch.Tensor], out: dict[str, torch.Tensor] | None,
             keep: list | None = None, seconds: dict[str, float] | None = None) -> dict:
        """One replay; `keep` receives every buffer the kernels' pointers were patched to (the
        outputs, torch steps' results, contiguous copies of inputs), to hold them alive; with
        `seconds`, each kernel's time in the replay is added to its group's."""
        if self.prepacker is not None:  # a weight written in place since it was packed
            self.prepacker.refresh()
        anchors = list(self._anchors)
        for name, root in self.inputs.items():
            t = env[name]
            if not t.is_contiguous():
                t = t.contiguous()
            anchors[root] = t
            self._patch(root, t)
        given = out or {}
        for root in self._output_roots:
            r = self.roots[root]
            anchor = next((given[n].view(-1) for n, ref in self.outputs.items()
                           if ref.root == root and n in given and _fits(given[n], ref, r)), None)
            if anchor is None:
                anchor = torch.empty(r.nbytes // _itemsize(r.dtype), dtype=r.dtype)
            anchors[root] = anchor
            self._patch(root, anchor)
        for step in self.steps:
            if seconds is not None and isinstance(step, Segment):
                step.run_timed(seconds)
                continue
            bound = step.run(anchors)
            if bound:
                for root, tensor in bound:
                    anchors[root] = tensor
                    self._patch(root, tensor)
        if keep is not None:
            keep.extend(anchors)
        result = {}
        for name, ref in self.outputs.items():
            value = ref.on(anchors[ref.root])
            if name in given:
                if given[name].data_ptr() != value.data_ptr():
                    given[name].copy_(value)
                value = given[name]
            result[name] = value
        return result

    def first_difference(self, env: dict[str, torch.Tensor], expected: dict, tolerance: float
                         ) -> tuple[str, str, float] | None:
        """One replay run a step (and a kernel) at a time, each group's outputs compared with
        `expected` (tensor name -> value) right after its step, before the arena reuses their
        memory: (group, tensor, relative error) of the first one over `tolerance`, or None."""

        with self._lock:
            self.arena.bytes.fill_(255)  # NaN everywhere: a value left from an earlier run cannot pass
            if self.prepacker is not None:
                self.prepacker.refresh()
            anchors = list(self._anchors)
            held: list[torch.Tensor] = []
            for name, root in self.inputs.items():
                anchors[root] = env[name].contiguous()
                self._patch(root, anchors[root])
            for root in self._output_roots:
                r = self.roots[root]
                anchors[root] = torch.empty(r.nbytes // _itemsize(r.dtype), dtype=r.dtype)
                self._patch(root, anchors[root])
            for step in self.steps:
                units = [(k.group, k) for k in step.kernels] if isinstance(step, Segment) \
                    else [(step.group, step)]
                for group, unit in units:
                    if isinstance(unit, KernelStep):
                        unit.fn(unit.ptrs, unit.strides)
                    else:
                        for root, tensor in unit.run(anchors) or ():
                            anchors[root] = tensor
                            held.append(tensor)
                            self._patch(root, tensor)
                    for tensor, ref in self.group_refs.get(group, {}).items():
                        want = expected.get(tensor)
                        if isinstance(want, torch.Tensor):
                            err = relative_error(ref.on(anchors[ref.root]), want)
                            if err > tolerance:
                                return group, tensor, err
        return None

    def chain_seconds(self, env: dict[str, torch.Tensor], repeat: int = 5) -> dict[str, float]:
        """Each group's median kernel seconds in the model: `repeat` whole replays on `env`
        (after one untimed), every kernel timed as it runs in order, so what it reads comes
        from where the kernels before it left it, as in a call of the graph. These add up to
        the driver's time; `kernel_seconds` times each kernel repeated on its own, its data
        and filter in cache from the call before. Measured on MobileNetV2 at batch 1 (2-core
        Zen 3): 3.6 ms in the chain against 2.7 ms repeated alone, the later 1x1 layers 1.3-1.7x
        their time alone, close to each kernel's time after the caches were flushed."""

        rounds: list[dict[str, float]] = []
        held: list = []
        with self._lock:
            self._run(env, None, held)
            for _ in range(max(1, repeat)):
                rounds.append({})
                self._run(env, None, held, rounds[-1])
        return {group: statistics.median(r[group] for r in rounds) for group in rounds[0]}

    def kernel_seconds(self, env: dict[str, torch.Tensor], repeat: int = 5) -> dict[str, float]:
        """Each group's median kernel seconds repeated on its own, caches warm: one run on
        `env` binds every pointer and fills every kernel's inputs, then each kernel is called
        `repeat` times on its own, reading and writing where the replay does. A group run
        alone also allocates its outputs and goes through the Python call path, which at small
        sizes costs more than the kernel. A kernel that writes over one of its inputs reads
        its own result on later calls: the time stands, the arena's values after this call do
        not. `chain_seconds` gives the times in the model's own order."""

        out: dict[str, float] = {}
        held: list = []  # the buffers the patched pointers point at, alive while kernels run
        with self._lock:
            self._run(env, None, held)
            for step in self.steps:
                for k in step.kernels if isinstance(step, Segment) else ():
                    times = []
                    for _ in range(repeat):
                        start = time.perf_counter()
                        k.fn(k.ptrs, k.strides)
                        times.append(time.perf_counter() - start)
                    out[k.group] = out.get(k.group, 0.0) + statistics.median(times)
        return out

    def overhead_us(self, calls: int = 200) -> dict:
        """Dispatch cost with every kernel replaced by an empty C function: pointer patches,
        output allocation and the driver calls per graph run, and per kernel."""

        lib = driver()
        segments = [s for s in self.steps if isinstance(s, Segment)]
        if lib is None or not segments:
            return {"per_call_us": None, "per_kernel_us": None}
        noop = ctypes.cast(lib.uol_graph_noop, ctypes.c_void_p).value
        saved = [list(s.fns) for s in segments]
        env = {name: torch.empty(self.roots[i].nbytes // _itemsize(self.roots[i].dtype),
                                 dtype=self.roots[i].dtype) for name, i in self.inputs.items()}
        anchors = list(self._anchors)
        self._lock.acquire()
        try:
            for s in segments:
                for i in range(len(s.kernels)):
                    s.fns[i] = noop
            start = time.perf_counter()
            for _ in range(calls):
                for name, root in self.inputs.items():
                    self._patch(root, env[name])
                for root in self._output_roots:
                    r = self.roots[root]
                    self._patch(root, torch.empty(r.nbytes // _itemsize(r.dtype), dtype=r.dtype))
                for s in segments:
                    s.run(anchors)
            per_call = (time.perf_counter() - start) / calls * 1e6
        finally:
            for s, fns in zip(segments, saved):
                for i, f in enumerate(fns):
                    s.fns[i] = f
            self._lock.release()
        return {"per_call_us": per_call, "per_kernel_us": per_call / max(1, self.stats.kernels)}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _fits(tensor: torch.Tensor, ref: Ref, root: Root) -> bool:
    """A caller's output buffer can be the root itself: same dtype, contiguous, whole root."""
    return (tensor.dtype == ref.dtype and tensor.is_contiguous() and ref.offset == 0
            and tuple(tensor.shape) == ref.shape and tensor.numel() * tensor.element_size() == root.nbytes
            and tensor.stride() == torch.empty(ref.shape).stride() == ref.stride)


def page_faults() -> int:
    """Minor + major page faults of this process so far (getrusage)."""

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt + usage.ru_majflt


def buffers_of(roots: list[Root]) -> list[Buffer]:
    """The arena roots as buffers for the planner."""
    return [Buffer(r.name, r.nbytes, r.first, r.last) for r in roots if r.kind == "arena"]
