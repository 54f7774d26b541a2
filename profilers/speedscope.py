"""Speedscope file format (https://www.speedscope.app): write a flame tree, read one back."""

from __future__ import annotations

import json
from pathlib import Path

from profilers.flame import FlameNode

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
# speedscope's unit names for ours; anything else (instruction counts) becomes "none"
UNITS = {"seconds": "seconds", "milliseconds": "milliseconds", "bytes": "bytes"}


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


def from_speedscope(data: dict | str | Path, profile: int | None = None) -> FlameNode:
    """Read a speedscope file (evented or sampled profile) into a flame tree."""
    if not isinstance(data, dict):
        data = json.loads(Path(data).read_text(encoding="utf-8"))
    if "profiles" not in data or "shared" not in data:
        raise ValueError("not a speedscope file: expected 'shared' and 'profiles' keys")
    frames = data["shared"].get("frames", [])
    index = data.get("activeProfileIndex", 0) if profile is None else profile
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
            if not stack:
                raise ValueError(f"unbalanced close event at {at}")
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
