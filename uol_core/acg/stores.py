"""How a kernel writes a large output: ordinary or non-temporal stores (entry point `store_policy`).

An ordinary store reads the line it writes first (read for ownership), so a pass that reads
one tensor and writes another into memory it wrote before moves three lines for every two it
needs. A non-temporal store writes the whole line without reading it and leaves it out of the
caches: right when the kernel moves more than the last-level cache holds (an HFL fact), so the
next kernel could not find the output there anyway.

A fresh output is another matter, and it is the common one (every eager call allocates its
outputs): the OS zeroes each new page at its first touch, through the cache, so ordinary stores
find those lines there and each line reaches memory once, while non-temporal stores write it
to memory after the zeroes do. Measured on Zen 5 (`benchmarks/cpu_ops.py`, both allocating):
streaming ran 0.70x (softmax 4096 x 4096), 0.93x (layer norm 8192 x 1024) and 0.84x (an
elementwise chain) of ordinary stores. So streaming is for outputs written in place (an
arena, `out=`), asked for with the kernel config `stream=1`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StorePolicy:
    """The stores chosen for one output and why, in words a kernel header can carry."""

    stream: bool
    why: str
    beyond_cache: bool = False  # the output and the inputs exceed the last-level cache


def last_level_cache(target) -> int:
    """The target's last-level cache in bytes: its L3, else its L2; 0 when it records neither."""
    for name in ("l3_bytes", "l2_bytes"):
        value = int(getattr(target, name, 0) or 0)
        if value:
            return value
    return 0


def store_policy(output: str, out_bytes: int, in_bytes: int, target,
                 fresh: bool = True) -> StorePolicy:
    """Non-temporal stores for `output` when it is written in place (not `fresh`) and it and
    the kernel's inputs (`out_bytes`, `in_bytes`) exceed the target's last-level cache: the
    next kernel reads the output from its start, which the rest of the kernel's traffic has
    evicted by then. Ordinary stores otherwise."""
    llc = last_level_cache(target) if target is not None else 0
    if not llc:
        return StorePolicy(False, "ordinary stores: the target records no cache size")
    sizes = f"{output} ({_size(out_bytes)}) and the kernel's inputs ({_size(in_bytes)})"
    if out_bytes + in_bytes <= llc:
        return StorePolicy(False, f"ordinary stores: {sizes} fit in the last-level cache "
                                  f"({_size(llc)}), where the next kernel reads them")
    if fresh:
        return StorePolicy(False, f"ordinary stores: {sizes} exceed the last-level cache "
                                  f"({_size(llc)}), but a fresh {output}'s pages are zeroed "
                                  "through the cache at first touch, where ordinary stores find "
                                  "them (config stream=1 streams an output written in place)",
                           beyond_cache=True)
    return StorePolicy(True, f"non-temporal stores: {sizes} exceed the last-level cache "
                             f"({_size(llc)})", beyond_cache=True)


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
