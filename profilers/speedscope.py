"""Speedscope file format (https://www.speedscope.app): write a flame tree, read one back."""

from __future__ import annotations

import json
from pathlib import Path

from profilers.flame import FlameNode

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
# What one imported file may hold: far above a real profile, far below what hurts a server
MAX_FRAMES = 100_000
MAX_EVENTS = 2_000_000  # evented: open + close events; sampled: samples (summed over profiles)
MAX_PROFILES = 64
MAX_DEPTH = 1_000  # stack depth of one event or sample
# speedscope's unit names for ours; anything else (instruction counts) becomes "none"
UNITS = {"seconds": "seconds", "milliseconds": "milliseconds", "microseconds": "microseconds",
         "nanoseconds": "nanoseconds", "bytes": "bytes"}


def to_speedscope(tree: FlameNode, name: str = "") -> dict:
    """An evented speedscope profile: each frame opens, its children run in order, then it closes."""
    frames: list[dict] = []
    index: dict[tuple[str, str, int], int] = {}
    events: list[dict] = []

    def frame_id(node: FlameNode) -> int:
        key = (node.name, node.file, node.line)
        if key not in index:
            index[key] = len(frames)
            entry: dict = {"name": node.name}
            if node.file:
                entry["file"] = node.file
            if node.line:
                entry["line"] = node.line
            frames.append(entry)
        return index[key]

    def emit(node: FlameNode, start: float) -> float:
        fid = frame_id(node)
        events.append({"type": "O", "at": start, "frame": fid})
        at = start
        for child in node.children:
            at = emit(child, at)
        end = start + max(node.total, at - start)  # self time is the gap after the children
        events.append({"type": "C", "at": end, "frame": fid})
        return end

    end = emit(tree, 0.0)
    return {"$schema": SCHEMA, "shared": {"frames": frames},
            "profiles": [{"type": "evented", "name": name or tree.name,
                          "unit": UNITS.get(tree.unit, "none"), "startValue": 0.0,
                          "endValue": end, "events": events}],
            "name": name or tree.name, "activeProfileIndex": 0, "exporter": "uol-studio"}


def write_speedscope(tree: FlameNode, path: str | Path) -> Path:
    """Write `to_speedscope(tree)` as JSON."""
    path = Path(path)
    path.write_text(json.dumps(to_speedscope(tree)), encoding="utf-8")
    return path


class SpeedscopeError(ValueError):
    """A file that is not a speedscope profile this reader can draw; the message says where."""


def parse_text(text: str) -> dict:
    """JSON text -> a checked speedscope document (SpeedscopeError naming line and column)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpeedscopeError(f"not JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
                              ) from None
    check(data)
    return data


def check(data) -> None:
    """Raise SpeedscopeError at the first field that breaks the speedscope file format (the
    parts this reader uses), naming its path and what was expected, and at any limit."""
    def fail(where: str, what: str) -> None:
        raise SpeedscopeError(f"{where}: {what}. Export the profile again from speedscope "
                              "(Export) or your profiler's speedscope writer")

    if not isinstance(data, dict):
        fail("the file", f"expected a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("shared"), dict) or not isinstance(
            data["shared"].get("frames"), list):
        fail("shared.frames", "missing: a speedscope file lists its frames there (is this a "
                              "Chrome trace or another format?)")
    frames = data["shared"]["frames"]
    if len(frames) > MAX_FRAMES:
        fail("shared.frames", f"{len(frames):,} frames, more than the limit of {MAX_FRAMES:,}")
    for i, frame in enumerate(frames):
        if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
            fail(f"shared.frames[{i}]", "expected an object with a string 'name'")
        if "line" in frame and not isinstance(frame["line"], int | float | type(None)):
            fail(f"shared.frames[{i}].line", "expected a number")
    profiles = data.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        fail("profiles", "expected a non-empty list of profiles")
    if len(profiles) > MAX_PROFILES:
        fail("profiles", f"{len(profiles)} profiles, more than the limit of {MAX_PROFILES}")
    index = data.get("activeProfileIndex", 0)
    if index is not None and (not isinstance(index, int) or not 0 <= index < len(profiles)):
        fail("activeProfileIndex", f"{index!r} is not a profile index (0 to {len(profiles) - 1})")
    events = 0
    for p, prof in enumerate(profiles):
        events += _check_profile(prof, f"profiles[{p}]", len(frames), fail)
        if events > MAX_EVENTS:
            fail(f"profiles[{p}]", f"more than the limit of {MAX_EVENTS:,} events and samples")


def _check_profile(prof, where: str, n_frames: int, fail) -> int:
    """Check one profile; returns its number of events (or samples)."""
    def frame_ok(i, at: str) -> None:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n_frames:
            fail(at, f"{i!r} is not a frame index (the file has {n_frames} frames)")

    if not isinstance(prof, dict):
        fail(where, "expected an object")
    kind = prof.get("type")
    if kind == "evented":
        return _check_evented(prof, where, frame_ok, fail)
    if kind == "sampled":
        return _check_sampled(prof, where, frame_ok, fail)
    fail(f"{where}.type", f"{kind!r}: this reader draws 'evented' and 'sampled' profiles")
    return 0


def _check_evented(prof: dict, where: str, frame_ok, fail) -> int:
    events = prof.get("events")
    if not isinstance(events, list):
        fail(f"{where}.events", "expected a list of events")
    depth, last = 0, float("-inf")
    for e, event in enumerate(events[:MAX_EVENTS + 1]):
        at = f"{where}.events[{e}]"
        if not isinstance(event, dict) or event.get("type") not in ("O", "C"):
            fail(at, "expected an object with type 'O' (open) or 'C' (close)")
        if not isinstance(event.get("at"), int | float) or isinstance(event["at"], bool):
            fail(f"{at}.at", "expected a number (the event's time)")
        frame_ok(event.get("frame"), f"{at}.frame")
        if event["at"] < last:
            fail(f"{at}.at", f"{event['at']} is before the previous event ({last}): events "
                             "must be in time order")
        last = event["at"]
        depth += 1 if event["type"] == "O" else -1
        if depth < 0:
            fail(at, "a close event with no open frame")
        if depth > MAX_DEPTH:
            fail(at, f"stack deeper than the limit of {MAX_DEPTH}")
    return len(events)


def _check_sampled(prof: dict, where: str, frame_ok, fail) -> int:
    samples, weights = prof.get("samples"), prof.get("weights")
    if not isinstance(samples, list):
        fail(f"{where}.samples", "expected a list of stacks (lists of frame indices)")
    if weights is not None and (not isinstance(weights, list) or len(weights) != len(samples)):
        fail(f"{where}.weights", f"expected one weight per sample ({len(samples)})")
    for k, stack in enumerate(samples[:MAX_EVENTS + 1]):
        if not isinstance(stack, list) or len(stack) > MAX_DEPTH:
            fail(f"{where}.samples[{k}]", f"expected a list of at most {MAX_DEPTH} frame indices")
        for j, i in enumerate(stack):
            frame_ok(i, f"{where}.samples[{k}][{j}]")
        if weights is not None and (not isinstance(weights[k], int | float) or weights[k] < 0):
            fail(f"{where}.weights[{k}]", "expected a number at least 0")
    return len(samples)


def profile_names(data: dict) -> list[str]:
    """The names of a checked file's profiles, in order ('profile N' where unnamed)."""
    return [str(p.get("name") or f"profile {i + 1}") for i, p in enumerate(data["profiles"])]


def from_speedscope(data: dict | str | Path, profile: int | None = None) -> FlameNode:
    """Read a speedscope file (evented or sampled profile) into a flame tree; a malformed
    file raises SpeedscopeError naming the field at fault."""
    if not isinstance(data, dict):
        data = parse_text(Path(data).read_text(encoding="utf-8"))
    else:
        check(data)
    frames = data["shared"].get("frames", [])
    index = (data.get("activeProfileIndex") or 0) if profile is None else profile
    if not 0 <= index < len(data["profiles"]):
        raise SpeedscopeError(f"profile {index} does not exist: the file has "
                              f"{len(data['profiles'])}")
    prof = data["profiles"][index]
    unit = {"seconds": "seconds", "milliseconds": "milliseconds", "bytes": "bytes",
            "microseconds": "microseconds", "nanoseconds": "nanoseconds"}.get(
        prof.get("unit", "none"), "count")
    root = FlameNode(prof.get("name") or data.get("name") or "speedscope", unit=unit)

    def ident(i: int) -> tuple[str, str, int]:
        f = frames[i]
        return f.get("name", "?"), f.get("file", ""), int(f.get("line", 0) or 0)

    if prof["type"] == "evented":
        _read_evented(prof, root, ident)
    elif prof["type"] == "sampled":
        for stack, weight in zip(prof["samples"], prof.get("weights") or [1] * len(prof["samples"])):
            node = root
            for i in stack:
                node = node.child(*ident(i))
            node.self_cost += weight
    else:
        raise ValueError(f"unknown speedscope profile type '{prof['type']}'")
    root.fix_totals()
    # a file written by to_speedscope has one outer frame: unwrap it so round trips are exact
    if len(root.children) == 1 and root.self_cost == 0 and root.children[0].name == root.name:
        only = root.children[0]
        only.unit = unit
        return only
    return root


def _read_evented(prof: dict, root: FlameNode, ident) -> None:
    stack: list[tuple[FlameNode, float, float]] = []  # node, open time, time in children
    node = root
    for event in prof["events"]:
        at = float(event["at"])
        if event["type"] == "O":
            child = node.child(*ident(event["frame"]))
            stack.append((node, at, 0.0))
            node = child
            node.meta.setdefault("_open", []).append(at)
        elif event["type"] == "C":
            if not stack or not node.meta.get("_open"):
                raise SpeedscopeError(f"unbalanced close event at {at}")
            opened = node.meta["_open"].pop()
            parent, _, _ = stack.pop()
            duration = at - opened
            node.total += duration
            node = parent
    for _, n in root.walk():
        n.meta.pop("_open", None)
    # self = total - children's totals (fix_totals would otherwise drop the gaps)
    for _, n in root.walk():
        if n is not root:
            n.self_cost = max(0.0, n.total - sum(c.total for c in n.children))
