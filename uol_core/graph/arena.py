"""One arena per planned graph and shape: allocated once, aligned to a huge page, transparent huge
pages requested with madvise where the OS offers them, and every page touched at once, so that a
steady-state run takes no page fault (first touches cost more than the work in large
memory-bound ops: a fresh tensor is written at a fraction of the speed of a warm one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

HUGE_PAGE = 2 * 2**20  # x86-64 and arm64 transparent huge page size
MADV_HUGEPAGE = 14  # linux/mman.h


def _madvise_hugepage(address: int, length: int) -> bool:
    """Ask Linux for transparent huge pages over the range; False where it says no (or is not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return False
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_HUGEPAGE) == 0


class Arena:
    """`nbytes` of memory starting on a huge-page boundary, pre-faulted."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.huge_pages = False
        if nbytes == 0:
            self.storage = torch.empty(0, dtype=torch.uint8)
            self.bytes = self.storage
            return
        big = nbytes >= HUGE_PAGE
        pad = HUGE_PAGE if big else 64
        self.storage = torch.empty(nbytes + pad, dtype=torch.uint8)
        start = (-self.storage.data_ptr()) % pad
        self.bytes = self.storage[start:start + nbytes]
        if big:  # whole huge pages only: madvise wants a page-aligned range
            length = nbytes - nbytes % HUGE_PAGE
            self.huge_pages = length > 0 and _madvise_hugepage(self.bytes.data_ptr(), length)
        self.bytes.zero_()  # touch every page now, not in the first timed run

    def view(self, offset: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D tensor of `dtype` over arena bytes [offset, offset + nbytes)."""
        return self.bytes[offset:offset + nbytes].view(dtype)
