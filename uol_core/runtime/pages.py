"""Output tensors on huge pages (entry point `fresh_output`).

A large fresh tensor comes from its own mmap and is faulted in page by page on first write.
On a virtual machine each 4 KiB fault is a trip through the hypervisor: writing a new 32 MiB
output cost 11.8 ms here where the same write into touched memory took 1 ms, so a memory-bound
kernel (a layer norm's forward or backward) spent most of its time faulting. Asking the kernel
for transparent huge pages on the output's range (madvise MADV_HUGEPAGE, honoured when the
system's THP mode is `madvise` or `always`) takes one fault per 2 MiB instead: 3.1 ms.

Smaller tensors are left alone: glibc serves them from memory it keeps mapped after the first
free, so they do not fault again. Large ones come from the output pool (runtime/output_pool.py),
which hands a buffer out again once nobody holds it, so a repeated call faults nothing at all.
"""

from __future__ import annotations

import ctypes
import math
import sys
from functools import lru_cache
from pathlib import Path

import torch

from uol_core.runtime import output_pool

# Outputs from 4 MiB up are pooled: glibc maps each of them afresh (its mmap threshold grows
# with what is freed, to 32 MiB at most, and the heap's top is trimmed back to the system).
POOLED_BYTES = 4 * 2**20
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux (every architecture)
THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")


def huge_page_mode() -> str:
    """The system's transparent-huge-page policy (always, madvise, never) or 'unknown'."""
    try:
        text = (THP_DIR / "enabled").read_text()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()


@lru_cache(maxsize=1)
def huge_page_bytes() -> int:
    """The transparent huge page size when the OS grants them on request, else 0."""
    if not sys.platform.startswith("linux") or huge_page_mode() not in ("always", "madvise"):
        return 0
    try:
        return int((THP_DIR / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 0


@lru_cache(maxsize=1)
def _madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def madvise_huge(address: int, length: int) -> bool:
    """Ask for transparent huge pages over [address, address + length), which must start on a
    page boundary; False where the OS says no or grants none."""
    return bool(huge_page_bytes()) and length > 0 and _madvise()(address, length, MADV_HUGEPAGE) == 0


def wants_huge_pages(nbytes: int) -> bool:
    """Whether a tensor of `nbytes` asks for huge pages: the OS grants them, and it is at least
    two huge pages long (a smaller one may hold no whole page)."""
    page = huge_page_bytes()
    return bool(page) and nbytes >= 2 * page


def advise_huge(tensor: torch.Tensor) -> bool:
    """Ask for huge pages on the whole huge pages inside `tensor`'s memory, when it is at
    least two huge pages long (a smaller one may hold no whole page). True when the advice was
    taken."""
    nbytes = tensor.numel() * tensor.element_size()
    if not wants_huge_pages(nbytes) or tensor.device.type != "cpu":
        return False
    page = huge_page_bytes()
    start = -(-tensor.data_ptr() // page) * page
    end = (tensor.data_ptr() + nbytes) // page * page
    return end > start and madvise_huge(start, end - start)


def fresh_output(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor for a kernel to write: when it is large, an idle buffer of
    the output pool, or a new one on huge pages."""
    if math.prod(shape) * dtype.itemsize < POOLED_BYTES:
        return torch.empty(shape, dtype=dtype)
    return output_pool.take(shape, dtype, new_output)


def new_output(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new uninitialised CPU tensor, never a recycled one, on huge pages when it is large
    (what the pool allocates; benchmarks that give every contender fresh outputs use it)."""
    tensor = torch.empty(shape, dtype=dtype)
    advise_huge(tensor)
    return tensor
