"""Cycle counters per ODL statement: a post-pass over any emitted C kernel (no template changes).

The pass reads the kernel's line map (C line -> ODL line) and the brace structure of the entry
function, and wraps the loop nest of each ODL statement in a pair of timer reads:

    const uint64_t uol_prof_t3 = uol_prof_now();
    ... the statement's loops, unchanged ...
    uol_prof_ticks[3] += uol_prof_now() - uol_prof_t3; ++uol_prof_hits[3];

It works on whole statements of the entry body: a statement (with its nested blocks) whose code
all implements one ODL line is timed as a unit, consecutive units of one ODL line form one
region, and a block that mixes several ODL lines (a shared outer loop, a parallel region) is
opened and its inner statements are timed instead. It does not open a `simd` loop or an
innermost loop (a timer per element would cost more than the work it measures): such a block is
timed whole and charged to the ODL line owning most of its code, its region listing every ODL
line it holds. Lines of the op's own line (argument unpacking, setup) and loop control outside
the regions stay untimed; the caller reports them as the rest of the measured total.

The timer is `__rdtsc()` between two `lfence`s on x86 (TSC ticks) and `clock_gettime(CLOCK_MONOTONIC)` (ns) elsewhere.
The counters are plain globals, so the instrumented kernel is built single-threaded
(`-fopenmp-simd`, no `-fopenmp`), as the callgrind build is. The normal emitted kernel is never
changed: this pass returns a new KernelSource.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from uol_core.backends.base import KernelSource

PRELUDE = """\
/* instrumented build: timer reads around each ODL statement (cycle counters, not for use) */
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define UOL_PROF_UNIT "cycles"
/* lfence on both sides: the read waits for the work before it and nothing after starts
   early, so a region's time does not leak into its neighbours through out-of-order execution */
static inline uint64_t uol_prof_now(void)
{
    _mm_lfence();
    const uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}
#else
#include <time.h>
#define UOL_PROF_UNIT "ns"
static inline uint64_t uol_prof_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
#endif
uint64_t uol_prof_ticks[{count}], uol_prof_hits[{count}];
const int uol_prof_regions = {count};
const char *uol_prof_unit = UOL_PROF_UNIT;
uint64_t uol_prof_clock(void) { return uol_prof_now(); }
/* The smallest cost of one timer pair: what each region's count adds to its own time. */
uint64_t uol_prof_overhead(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 2000; ++i) {
        const uint64_t t0 = uol_prof_now();
        const uint64_t dt = uol_prof_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}
"""
_LOOP = re.compile(r"\b(for|while|do)\b")
_ESCAPE = re.compile(r"\b(return|goto)\b")
_JUMP = re.compile(r"\b(break|continue)\b")
_SWITCH = re.compile(r"^\s*(case\b|default\s*:|switch\b)")


class InstrumentError(ValueError):
    """The kernel's entry function could not be found or read."""


@dataclass(frozen=True)
class TimedRegion:
    """Kernel lines [first_line, last_line] of the original kernel, timed as one counter."""

    index: int
    odl_line: int  # the ODL line the time is charged to
    odl_lines: tuple[int, ...]  # every ODL line whose code is inside (more than one: fused)
    first_line: int
    last_line: int
    text: str  # the region's first code line


@dataclass(frozen=True)
class InstrumentedKernel:
    """The kernel with counters, its regions, and the ODL line of its setup code."""

    source: KernelSource
    regions: tuple[TimedRegion, ...]
    setup_line: int | None


@dataclass
class _Line:
    code: str  # the line without comments and literals, stripped
    depth_in: int  # brace depth before the line
    depth_out: int  # after it
    depth_min: int  # lowest depth within it


@dataclass
class _Unit:
    first: int  # 0-based line indexes, inclusive
    last: int
    odl: Counter = field(default_factory=Counter)  # ODL line -> code lines


def instrument(src: KernelSource, reads: bool = True) -> InstrumentedKernel:
    """`src` with a timer pair around the code of each ODL statement of its entry function.

    `reads=False` gives the same program without the timer reads (the counters stay zero): the
    baseline that shows how much the reads slow the kernel down."""
    if src.lang != "c":
        raise InstrumentError(f"cycle counters need a C kernel; this one is {src.lang}")
    lines = src.text.splitlines()
    info = _scan(lines)
    head, open_at, close_at = _entry_body(src.entry, info)
    setup = src.line_map.get(head + 1)
    units = _plan(range(open_at + 1, close_at), info[open_at].depth_out, info, src.line_map,
                  setup)
    regions = tuple(_region(k, u, lines) for k, u in enumerate(units))
    text, line_map = _rewrite(lines, src.line_map, units if reads else [], regions, head)
    meta = dict(src.meta, instrumented=reads)
    out = KernelSource(text, "c", src.entry, src.op_name, dict(src.config), line_map, meta)
    return InstrumentedKernel(out, regions, setup)


def _scan(lines: list[str]) -> list[_Line]:
    """Code and brace depths of every line (comments, strings and char literals removed)."""
    out: list[_Line] = []
    depth, in_comment = 0, False
    for raw in lines:
        code, i = [], 0
        while i < len(raw):
            if in_comment:
                end = raw.find("*/", i)
                if end < 0:
                    break
                in_comment, i = False, end + 2
                continue
            two = raw[i:i + 2]
            if two == "/*":
                in_comment, i = True, i + 2
            elif two == "//":
                break
            elif raw[i] in "\"'":
                end = i + 1
                while end < len(raw) and raw[end] != raw[i]:
                    end += 2 if raw[end] == "\\" else 1
                code.append(" ")
                i = end + 1
            else:
                code.append(raw[i])
                i += 1
        text = "".join(code).strip()
        start = low = depth
        for ch in "" if text.startswith("#") else text:  # braces of a macro are not blocks
            depth += (ch == "{") - (ch == "}")
            low = min(low, depth)
        out.append(_Line(text, start, depth, low))
    return out


def _entry_body(entry: str, info: list[_Line]) -> tuple[int, int, int]:
    """(signature line, line of its opening brace, line of its closing brace), 0-based."""
    sig = re.compile(rf"\b{re.escape(entry)}\s*\(")
    for head, line in enumerate(info):
        if line.depth_in != 0 or not sig.search(line.code):
            continue
        opener = head
        while opener < len(info) and "{" not in info[opener].code:
            if info[opener].code.endswith(";"):
                break  # a declaration, not the definition
            opener += 1
        if opener >= len(info) or "{" not in info[opener].code:
            continue
        if not info[opener].code.endswith("{"):
            raise InstrumentError(f"the body of {entry} starts on its brace line; "
                                  "cannot place counters")
        for close in range(opener + 1, len(info)):
            if info[close].depth_out == 0:
                return head, opener, close
        break
    raise InstrumentError(f"no definition of the entry function {entry} in the kernel")


def _statements(span: range, depth: int, info: list[_Line]) -> list[tuple[int, int]]:
    """The statements of a block at `depth`: (first, last) line, with preprocessor lines joined
    to the statement they precede and `else` branches to their `if`."""
    out: list[tuple[int, int]] = []
    i, end = span.start, span.stop
    while i < end:
        if not info[i].code:
            i += 1
            continue
        first, parens = i, 0
        while i < end:
            line = info[i]
            parens += line.code.count("(") - line.code.count(")")
            done = (not line.code.startswith("#") and line.depth_out == depth and parens <= 0
                    and line.code.endswith((";", "}")))
            i += 1
            if done:
                break
        if out and re.match(r"else\b", info[first].code):
            out[-1] = (out[-1][0], i - 1)
        else:
            out.append((first, i - 1))
    return out


def _plan(span: range, depth: int, info: list[_Line], line_map: dict[int, int],
          setup: int | None) -> list[_Unit]:
    """Timed units of a block: whole statements of one ODL line, merged when adjacent; mixed
    blocks are opened (their statements planned one level down) where that is safe."""
    units: list[_Unit] = []
    last_timed = False
    for first, last in _statements(span, depth, info):
        counts = Counter(line_map.get(i + 1) for i in range(first, last + 1)
                         if info[i].code and not info[i].code.startswith("#"))
        counts.pop(setup, None)
        counts.pop(None, None)
        if not counts:
            last_timed = False
            continue
        inner = _inner_block(first, last, depth, info)
        wrappable = _wrappable(first, last, info)
        if inner is not None and (len(counts) > 1 or not wrappable):
            sub = _plan(inner, depth + 1, info, line_map, setup)
            if len(sub) > 1 or not wrappable:
                units.extend(sub)
                last_timed = False
                continue
        if not wrappable:
            last_timed = False
            continue
        if last_timed and set(units[-1].odl) == set(counts):
            units[-1].last = last
            units[-1].odl.update(counts)
        else:
            units.append(_Unit(first, last, counts))
        last_timed = True
    return units


def _inner_block(first: int, last: int, depth: int, info: list[_Line]) -> range | None:
    """The lines inside a statement's one brace block, when counters may go in there: not a
    simd loop, not an innermost loop, not an initializer or a switch."""
    head = next((i for i in range(first, last + 1) if info[i].depth_out > depth), None)
    if head is None or head == last or not info[head].code.endswith("{"):
        return None
    if not info[last].code.startswith("}") or info[last].depth_out != depth:
        return None
    before = " ".join(info[i].code for i in range(first, head + 1))
    if "simd" in before or re.search(r"=\s*\{$", before) or _SWITCH.search(before):
        return None
    inner = range(head + 1, last)
    if any(info[i].depth_min <= depth for i in inner):
        return None  # `} else {` inside: two blocks, not one
    if not any(_LOOP.search(info[i].code) for i in inner):
        return None  # an innermost loop: timed whole
    return inner


def _wrappable(first: int, last: int, info: list[_Line]) -> bool:
    """Whether control always leaves the statement at its end (so the closing read runs)."""
    code = [info[i].code for i in range(first, last + 1)]
    if any(_ESCAPE.search(c) or _SWITCH.search(c) for c in code):
        return False
    head = next((c for c in code if not c.startswith("#")), "")
    return not any(_JUMP.search(c) for c in code) or bool(_LOOP.match(head))


def _region(index: int, unit: _Unit, lines: list[str]) -> TimedRegion:
    owner = max(sorted(unit.odl), key=lambda line: unit.odl[line])
    text = next((lines[i].strip() for i in range(unit.first, unit.last + 1)
                 if lines[i].strip() and not lines[i].lstrip().startswith("#")), "")
    return TimedRegion(index, owner, tuple(sorted(unit.odl)), unit.first + 1, unit.last + 1, text)


def _rewrite(lines: list[str], line_map: dict[int, int], units: list[_Unit],
             regions: tuple[TimedRegion, ...], head: int) -> tuple[str, dict[int, int]]:
    """The kernel text with the prelude and the timer reads, and its line map."""
    starts = {u.first: r for u, r in zip(units, regions)}
    ends = {u.last: r for u, r in zip(units, regions)}
    prelude_at = max((i + 1 for i in range(head) if lines[i].lstrip().startswith("#include")),
                     default=0)
    out: list[str] = []
    new_map: dict[int, int] = {}

    def put(text: str, odl: int | None) -> None:
        out.append(text)
        if odl is not None:
            new_map[len(out)] = odl

    for i, line in enumerate(lines):
        if i == prelude_at:
            for extra in PRELUDE.replace("{count}", str(max(1, len(regions)))).splitlines():
                put(extra, None)
        if i in starts:
            r = starts[i]
            pad = _indent(lines, i, ends_at=next(u.last for u in units if u.first == i))
            put(f"{pad}const uint64_t uol_prof_t{r.index} = uol_prof_now();", r.odl_line)
        put(line, line_map.get(i + 1))
        if i in ends:
            r = ends[i]
            pad = _indent(lines, next(u.first for u in units if u.last == i), ends_at=i)
            put(f"{pad}uol_prof_ticks[{r.index}] += uol_prof_now() - uol_prof_t{r.index}; "
                f"++uol_prof_hits[{r.index}];", r.odl_line)
    return "\n".join(out) + "\n", new_map


def _indent(lines: list[str], first: int, ends_at: int) -> str:
    """The indentation of a region's first non-preprocessor line (cosmetic)."""
    for i in range(first, ends_at + 1):
        if lines[i].strip() and not lines[i].lstrip().startswith("#"):
            return lines[i][:len(lines[i]) - len(lines[i].lstrip())]
    return ""


__all__ = ["InstrumentError", "InstrumentedKernel", "TimedRegion", "instrument"]
