"""Large kernel outputs recycled across calls (entry point `take`).

torch's CPU allocator hands every large tensor its own fresh mapping, so each new output is
faulted in and zeroed by the OS before the kernel writes it. On a virtual machine that costs
more than a memory-bound kernel's work: a layer norm's forward wrote its 32 MiB output in
1.7 ms into memory it had written before, and took 4.5 ms into a fresh output on huge pages
(torch's own forward, the same fresh-output policy: 4.8 ms). A training loop asks for the same
shapes every step, so the runtime keeps the buffers of its large outputs and hands one out
again once nobody holds it any more, as a GPU caching allocator does.

A buffer is idle when the pool's own storage handle is its only owner (torch's use count of
the storage is 1): a tensor, view, numpy array or autograd graph that still reads the output
holds the storage and keeps the buffer out of reach. Outputs are handed out as tensors that
share the buffer's storage, not views of a pool tensor, so autograd sees plain tensors.

The pool tracks at most `limit_bytes` of buffers, idle or in use: past it, outputs are
allocated plainly and the pool never keeps more than that much memory from the system. The
limit comes from UOL_OUTPUT_POOL_MB (0 turns the pool off), else an eighth of the machine's
memory.
"""

from __future__ import annotations

import math
import os
import threading
import warnings

import torch

ENV_LIMIT = "UOL_OUTPUT_POOL_MB"
_use_count = getattr(torch._C, "_storage_Use_Count", None)  # absent: the pool stays off


def default_limit_bytes() -> int:
    """UOL_OUTPUT_POOL_MB in bytes when set, else an eighth of physical memory (a policy, not
    a hardware fact: enough for a training step's large activations and gradients, small
    beside what the step itself holds)."""
    given = os.environ.get(ENV_LIMIT, "").strip()
    if given:
        try:
            return max(0, int(float(given) * 2**20))
        except ValueError:  # a typo must not stop the IDE from starting: say so, use the default
            warnings.warn(f"{ENV_LIMIT}={given!r} is not a number of MiB (0 turns the pool "
                          "off); using an eighth of physical memory", stacklevel=2)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8
    except (ValueError, OSError, AttributeError):
        return 0


class OutputPool:
    """Buffers of large outputs, handed out again when idle."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes if _use_count is not None else 0
        self._buffers: list[torch.UntypedStorage] = []
        self._lock = threading.Lock()
        self.reused = 0
        self.allocated = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, allocate) -> torch.Tensor:
        """An uninitialised tensor of `shape`: an idle buffer of its size when there is one,
        else `allocate(shape, dtype)`, kept for later calls while the limit allows."""
        if not self.limit_bytes:
            return allocate(shape, dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            storage = self._idle_of(nbytes)
            if storage is not None:
                self.reused += 1
                return _tensor_on(storage, shape, dtype)
            self._drop_idle(self.tracked_bytes() + nbytes - self.limit_bytes)
            tensor = allocate(shape, dtype)
            self.allocated += 1
            if self.tracked_bytes() + nbytes <= self.limit_bytes:
                self._buffers.append(tensor.untyped_storage())
            return tensor

    def tracked_bytes(self) -> int:
        """Bytes of every buffer the pool keeps, idle or in use."""
        return sum(s.nbytes() for s in self._buffers)

    def idle_bytes(self) -> int:
        """Bytes of the buffers nobody but the pool holds."""
        with self._lock:
            return sum(s.nbytes() for s in self._buffers if _idle(s))

    def release_idle(self) -> int:
        """Give every idle buffer back to the system; returns the bytes released."""
        with self._lock:
            return self._drop_idle(self.tracked_bytes())

    def _idle_of(self, nbytes: int) -> torch.UntypedStorage | None:
        for storage in self._buffers:
            if storage.nbytes() == nbytes and _idle(storage):
                return storage
        return None

    def _drop_idle(self, excess: int) -> int:
        """Forget idle buffers, oldest first, until `excess` bytes are gone (or none is idle)."""
        dropped = 0
        for storage in list(self._buffers):
            if dropped >= excess:
                break
            if _idle(storage):
                self._buffers.remove(storage)
                dropped += storage.nbytes()
        return dropped


def _idle(storage: torch.UntypedStorage) -> bool:
    return _use_count(storage._cdata) == 1


def _tensor_on(storage: torch.UntypedStorage, shape: tuple[int, ...],
               dtype: torch.dtype) -> torch.Tensor:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape, tuple(reversed(strides)))


POOL = OutputPool(default_limit_bytes())


def take(shape, dtype: torch.dtype, allocate) -> torch.Tensor:
    """A large output from the process's pool (see the module's docstring)."""
    return POOL.take(tuple(shape), dtype, allocate)
