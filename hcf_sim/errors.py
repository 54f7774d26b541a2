"""The one HCF error type and the parameter checks that raise it."""

from __future__ import annotations

import math
import re

# Limits a user can hit; each message names the limit so the user knows what to change.
MAX_SIZE_BYTES = 1 << 40  # 1 TiB per collective buffer: far above any real gradient bucket
MAX_RANKS = 65_536
MAX_FLOW_RANKS = 16_384  # the flow-level simulator routes every flow; beyond this use analytical
MAX_NAME_CHARS = 128  # topology, node and protocol names: labels in figures and reports
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "tb": 1e12}


class HcfError(ValueError):
    """A bad HCF parameter or an impossible scenario, with a message a user can act on."""


def check_name(what: str, value: object, limit: int = MAX_NAME_CHARS) -> str:
    """`value` as a name (topology, node, link protocol; a file path with a larger `limit`),
    or HcfError: 1 to `limit` printable characters. Names become labels in figures, reports and
    exported files; a NUL or another control character would cut or corrupt them (and a path
    with NUL makes the OS call fail with a bare ValueError)."""
    text = value if isinstance(value, str) else str(value)
    if not text or len(text) > limit or not text.isprintable():
        raise HcfError(f"{what} {text[:40]!r} is not a valid name: use 1 to {limit} "
                       "printable characters (no control characters such as NUL or newline)")
    return text


def require_positive(name: str, value: float, unit: str = "") -> float:
    """Return value if it is a finite number > 0, else raise HcfError naming it."""
    if not isinstance(value, int | float) or math.isnan(value) or value <= 0 or math.isinf(value):
        raise HcfError(f"{name} must be a positive number{(' in ' + unit) if unit else ''}, got {value!r}")
    return value


def require_nonnegative(name: str, value: float) -> float:
    """Return value if it is a finite number >= 0, else raise HcfError."""
    if not isinstance(value, int | float) or math.isnan(value) or value < 0 or math.isinf(value):
        raise HcfError(f"{name} must be >= 0, got {value!r}")
    return value


def check_ranks(p: int, limit: int = MAX_RANKS) -> int:
    """Return p if it is a usable rank count (1..limit), else raise HcfError."""
    if not isinstance(p, int) or isinstance(p, bool) or p < 1:
        raise HcfError(f"the number of ranks/nodes must be an integer >= 1, got {p!r}")
    if p > limit:
        raise HcfError(f"{p} ranks exceeds the limit of {limit}; use fewer nodes"
                       + (" or --method analytical" if limit == MAX_FLOW_RANKS else ""))
    return p


def check_size(size: float) -> float:
    """Return size (bytes) if 0 < size <= MAX_SIZE_BYTES, else raise HcfError."""
    require_positive("message size", size, "bytes")
    if size > MAX_SIZE_BYTES:
        raise HcfError(f"message size {size:.3g} B exceeds the limit of 1 TiB ({MAX_SIZE_BYTES} B)")
    return size


def parse_size(text: str | int | float) -> int:
    """Parse '4MiB', '64k', '1e6' or 1024 into bytes; raise HcfError on nonsense."""
    if isinstance(text, int | float):
        return int(check_size(text))
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise HcfError(f"cannot read size {text!r}; write e.g. 1024, 64KiB, 4MiB, 1GiB or 1e6")
    return int(check_size(float(m.group(1)) * _UNITS[m.group(2).lower()]))


def parse_sizes(text: str) -> list[int]:
    """Parse '8:1GiB' (powers of two between) or '1KiB,1MiB' into a list of byte sizes."""
    if ":" in text:
        lo, hi = (parse_size(t) for t in text.split(":", 1))
        if lo > hi:
            raise HcfError(f"size range {text!r} goes downwards; write LOW:HIGH")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= 2
        return out
    return [parse_size(t) for t in text.split(",") if t.strip()]


def human_bytes(n: float) -> str:
    """Format bytes with binary units (nccl-tests style sizes read as 1 MiB, 4 GiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"
