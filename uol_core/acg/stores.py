"""How a kernel writes a large output: ordinary or non-temporal stores (entry point `store_policy`).

An ordinary store reads the line it writes first (read for ownership), so a pass that reads
one tensor and writes another moves three lines for every two it needs. A non-temporal store
writes the whole line without reading it and leaves it out of the caches: right when a kernel
moves more than the last-level cache holds, so the next kernel could not find the output there
anyway; wrong for a smaller one, which the next kernel would read from the cache. The cache
size is an HFL fact.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StorePolicy:
    """The stores chosen for one output and why, in words a kernel header can carry."""

    stream: bool
    why: str


def last_level_cache(target) -> tuple[int, str]:
    """The target's last-level cache in bytes (L3, else L2; 0 when it records neither) and the
    field it came from."""
    for name in ("l3_bytes", "l2_bytes"):
        value = int(getattr(target, name, 0) or 0)
        if value:
            return value, name
    return 0, ""


def store_policy(output: str, out_bytes: int, in_bytes: int, target) -> StorePolicy:
    """Non-temporal stores for `output` when it and the kernel's inputs (`out_bytes` and
    `in_bytes`) exceed the target's last-level cache: the next kernel reads the output from its
    start, which the rest of the kernel's traffic has evicted by then. Ordinary stores
    otherwise, or when the target records no cache size."""
    llc, _ = last_level_cache(target) if target is not None else (0, "")
    if not llc:
        return StorePolicy(False, "ordinary stores: the target records no cache size")
    sizes = f"{output} ({_size(out_bytes)}) and the kernel's inputs ({_size(in_bytes)})"
    if out_bytes + in_bytes > llc:
        return StorePolicy(True, f"non-temporal stores: {sizes} exceed the last-level cache "
                                 f"({_size(llc)})")
    return StorePolicy(False, f"ordinary stores: {sizes} fit in the last-level cache "
                              f"({_size(llc)}), where the next kernel reads them")


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
