"""Run a program under valgrind callgrind and read its output file: costs per (file, line)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


class CallgrindUnavailable(RuntimeError):
    """valgrind is not installed or cannot run this program; the message says what to do."""


@dataclass
class CallgrindProfile:
    """Event names and, per source (file, line), self cost and the cost of calls made there."""

    events: list[str]
    self_cost: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    call_cost: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    callees: dict[tuple[str, int], set[tuple[str, str]]] = field(default_factory=dict)
    totals: list[int] = field(default_factory=list)
    functions: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # (address, file, line, enclosing function's file) of inlined code -> self cost
    inlined: dict[tuple[int, str, int, str], list[int]] = field(default_factory=dict)

    def event(self, name: str) -> int:
        """Column index of an event (Ir, Dr, D1mr, ...)."""
        try:
            return self.events.index(name)
        except ValueError:
            raise KeyError(f"event '{name}' not recorded; have {', '.join(self.events)}") from None


def valgrind_path() -> str:
    """The valgrind binary, or a CallgrindUnavailable naming how to get it."""
    path = os.environ.get("UOL_VALGRIND") or shutil.which("valgrind")
    if not path:
        raise CallgrindUnavailable(
            "valgrind is not installed: per-line hotspots need callgrind "
            "(Debian/Ubuntu: apt-get install valgrind; macOS: not supported). "
            "Timing and roofline work without it.")
    return path


def run_callgrind(argv: list[str], cache_sim: bool = True, timeout: float = 300.0,
                  workdir: str | Path | None = None, instr: bool = True,
                  extra: tuple[str, ...] = ()) -> CallgrindProfile:
    """Run `argv` under callgrind (no root, no perf needed) and parse the result."""
    valgrind = valgrind_path()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
               f"--dump-instr={'yes' if instr else 'no'}", "--compress-strings=no",
               "--compress-pos=no", f"--cache-sim={'yes' if cache_sim else 'no'}", *extra, *argv]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CallgrindUnavailable(f"callgrind run exceeded {timeout:.0f} s; "
                                       "use smaller sizes (callgrind is ~50x slower)") from None
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            hint = ""
            if "unhandled instruction" in proc.stderr or "SIGILL" in proc.stderr:
                hint = " (valgrind cannot decode this ISA, e.g. AVX-512; profile an avx2 config)"
            raise CallgrindUnavailable(f"callgrind failed with status {proc.returncode}{hint}:\n"
                                       f"{tail}")
        return parse_callgrind(out.read_text(encoding="utf-8", errors="replace"))


def parse_callgrind(text: str) -> CallgrindProfile:
    """Parse a callgrind.out file (format version 1, line positions, compressed or not)."""
    events: list[str] = []
    self_cost: dict[tuple[str, int], list[int]] = defaultdict(list)
    call_cost: dict[tuple[str, int], list[int]] = defaultdict(list)
    callees: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    functions: dict[tuple[str, str], list[int]] = defaultdict(list)
    names: dict[str, dict[str, str]] = {"fl": {}, "fn": {}}
    fn_file = cur_file = fn = ""
    callee_file = callee_fn = ""
    last_line = last_addr = 0
    with_instr = False
    inlined: dict[tuple[int, str, int, str], list[int]] = defaultdict(list)
    pending_call = False
    totals: list[int] = []

    def name_of(kind: str, value: str) -> str:
        # name compression: "(12) name" defines id 12, "(12)" refers to it
        table = names["fn" if kind in ("fn", "cfn") else "fl"]
        value = value.strip()
        if value.startswith("("):
            close = value.index(")")
            key, rest = value[1:close], value[close + 1:].strip()
            if rest:
                table[key] = rest
            return table.get(key, rest)
        return value

    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            parts = line.split()
            addr = 0
            if with_instr:
                addr = last_addr = _position(parts.pop(0), last_addr, 16)
            number = last_line = _position(parts[0], last_line, 10)
            costs = [int(x) for x in parts[1:]]
            if pending_call:
                _add(call_cost[(cur_file, number)], costs)
                # without cfi=, the callee lives in the caller's file
                callees[(cur_file, number)].add((callee_file or fn_file, callee_fn))
                pending_call = False
                callee_file = ""
            else:
                _add(self_cost[(cur_file, number)], costs)
                _add(functions[(fn_file, fn)], costs)
                if addr and cur_file != fn_file:
                    # code inlined from another file (an intrinsics header): keep the address
                    # so the caller can find the inlining line with addr2line
                    _add(inlined[(addr, cur_file, number, fn_file)], costs)
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "positions":
                with_instr = "instr" in value.split()
            elif key == "events":
                events = value.split()
            elif key in ("totals", "summary"):
                totals = [int(x) for x in value.split()]
            continue
        if key == "fl":
            fn_file = cur_file = name_of("fl", value)
        elif key in ("fi", "fe"):
            cur_file = name_of("fl", value)
        elif key == "fn":
            fn = name_of("fn", value)
            cur_file = fn_file
        elif key in ("cfi", "cfl"):
            callee_file = name_of("fl", value)
        elif key == "cfn":
            callee_fn = name_of("fn", value)
        elif key == "calls":
            pending_call = True  # the next cost line is the inclusive cost of this call
    if not events:
        raise ValueError("not a callgrind output file: no 'events:' line")
    width = len(events)
    fix = lambda d: {k: (v + [0] * width)[:width] for k, v in d.items()}  # noqa: E731
    if not totals:
        totals = [0] * width
        for costs in self_cost.values():
            _add(totals, costs)
    return CallgrindProfile(events, fix(self_cost), fix(call_cost), dict(callees),
                            (totals + [0] * width)[:width], fix(functions), fix(inlined))


def _position(token: str, last: int, base: int) -> int:
    """An absolute position from a token: absolute, '+n'/'-n' relative, or '*' (same)."""
    if token == "*":
        return last
    if token[0] in "+-":
        return last + int(token, base)
    return int(token, 16 if token.startswith("0x") else base)


def _add(into: list[int], costs: list[int]) -> None:
    if len(into) < len(costs):
        into.extend([0] * (len(costs) - len(into)))
    for i, c in enumerate(costs):
        into[i] += c
