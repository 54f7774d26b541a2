"""One arena per planned graph and shape: allocated once, aligned to a huge page, transparent huge
pages requested with madvise where the OS offers them, and every page touched at once, so that a
steady-state run takes no page fault (first touches cost more than the work in large
memory-bound ops: a fresh tensor is written at a fraction of the speed of a warm one).
"""

from __future__ import annotations

import torch

from uol_core.runtime.pages import huge_page_bytes, madvise_huge

HUGE_PAGE = 2 * 2**20  # the alignment where the OS reports no huge page size (x86-64, arm64)


class Arena:
    """`nbytes` of memory starting on a huge-page boundary, pre-faulted."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.huge_pages = False
        if nbytes == 0:
            self.storage = torch.empty(0, dtype=torch.uint8)
            self.bytes = self.storage
            return
        page = huge_page_bytes() or HUGE_PAGE
        big = nbytes >= page
        pad = page if big else 64
        self.storage = torch.empty(nbytes + pad, dtype=torch.uint8)
        start = (-self.storage.data_ptr()) % pad
        self.bytes = self.storage[start:start + nbytes]
        if big:  # whole huge pages only: madvise wants a page-aligned range
            self.huge_pages = madvise_huge(self.bytes.data_ptr(), nbytes - nbytes % page)
        self.bytes.zero_()  # touch every page now, not in the first timed run

    def view(self, offset: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D tensor of `dtype` over arena bytes [offset, offset + nbytes)."""
        return self.bytes[offset:offset + nbytes].view(dtype)
