"""Run a program under valgrind callgrind and read its output file: costs per (file, line)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar


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
    reader = _CallgrindReader()
    for raw in text.splitlines():
        reader.feed(raw)
    return reader.profile()


class _CallgrindReader:
    """The state a callgrind.out file carries from line to line: current file, function, call."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.totals: list[int] = []
        self.self_cost: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.call_cost: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.callees: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
        self.functions: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.inlined: dict[tuple[int, str, int, str], list[int]] = defaultdict(list)
        self.names: dict[str, dict[str, str]] = {"fl": {}, "fn": {}}
        self.fn_file = self.cur_file = self.fn = ""
        self.callee_file = self.callee_fn = ""
        self.last_line = self.last_addr = 0
        self.with_instr = False
        self.pending_call = False

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line or line.startswith("#"):
            return
        head = line[0]
        if head.isdigit() or head in "+-*":
            self._cost_line(line.split())
            return
        key, sep, value = line.partition("=")
        if sep:
            setter = self._SPECIFICATIONS.get(key)
            if setter is not None:
                setter(self, value)
        else:
            self._header_line(line)

    def _name_of(self, kind: str, value: str) -> str:
        # name compression: "(12) name" defines id 12, "(12)" refers to it
        table = self.names[kind]
        value = value.strip()
        if value.startswith("("):
            close = value.index(")")
            key, rest = value[1:close], value[close + 1:].strip()
            if rest:
                table[key] = rest
            return table.get(key, rest)
        return value

    def _cost_line(self, parts: list[str]) -> None:
        addr = 0
        if self.with_instr:
            addr = self.last_addr = _position(parts.pop(0), self.last_addr, 16)
        number = self.last_line = _position(parts[0], self.last_line, 10)
        costs = [int(x) for x in parts[1:]]
        if self.pending_call:
            self._call_cost(number, costs)
        else:
            self._self_cost(addr, number, costs)

    def _call_cost(self, number: int, costs: list[int]) -> None:
        _add(self.call_cost[(self.cur_file, number)], costs)
        # without cfi=, the callee lives in the caller's file
        self.callees[(self.cur_file, number)].add((self.callee_file or self.fn_file,
                                                   self.callee_fn))
        self.pending_call = False
        self.callee_file = ""

    def _self_cost(self, addr: int, number: int, costs: list[int]) -> None:
        _add(self.self_cost[(self.cur_file, number)], costs)
        _add(self.functions[(self.fn_file, self.fn)], costs)
        if addr and self.cur_file != self.fn_file:
            # code inlined from another file (an intrinsics header): keep the address
            # so the caller can find the inlining line with addr2line
            _add(self.inlined[(addr, self.cur_file, number, self.fn_file)], costs)

    def _header_line(self, line: str) -> None:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "positions":
            self.with_instr = "instr" in value.split()
        elif key == "events":
            self.events = value.split()
        elif key in ("totals", "summary"):
            self.totals = [int(x) for x in value.split()]

    def _enter_file(self, value: str) -> None:
        self.fn_file = self.cur_file = self._name_of("fl", value)

    def _enter_inlined_file(self, value: str) -> None:
        self.cur_file = self._name_of("fl", value)

    def _enter_function(self, value: str) -> None:
        self.fn = self._name_of("fn", value)
        self.cur_file = self.fn_file

    def _set_callee_file(self, value: str) -> None:
        self.callee_file = self._name_of("fl", value)

    def _set_callee_function(self, value: str) -> None:
        self.callee_fn = self._name_of("fn", value)

    def _expect_call_cost(self, value: str) -> None:
        self.pending_call = True  # the next cost line is the inclusive cost of this call

    # position specifications ("key=value" lines) and what each one changes
    _SPECIFICATIONS: ClassVar[dict[str, Callable[[_CallgrindReader, str], None]]] = {
        "fl": _enter_file, "fi": _enter_inlined_file, "fe": _enter_inlined_file,
        "fn": _enter_function, "cfi": _set_callee_file, "cfl": _set_callee_file,
        "cfn": _set_callee_function, "calls": _expect_call_cost}

    def profile(self) -> CallgrindProfile:
        if not self.events:
            raise ValueError("not a callgrind output file: no 'events:' line")
        width = len(self.events)
        fix = lambda d: {k: (v + [0] * width)[:width] for k, v in d.items()}  # noqa: E731
        totals = self.totals
        if not totals:
            totals = [0] * width
            for costs in self.self_cost.values():
                _add(totals, costs)
        return CallgrindProfile(self.events, fix(self.self_cost), fix(self.call_cost),
                                dict(self.callees), (totals + [0] * width)[:width],
                                fix(self.functions), fix(self.inlined))


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
