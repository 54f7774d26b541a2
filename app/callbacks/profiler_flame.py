"""Profiler flame graph sources beyond the last profile: a speedscope file the user imports (checked
for size and format, every problem said with where it is), and the shown tree exported as
speedscope JSON. The view is time order (children as they first ran) or left heavy.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

import json

from dash import Input, Output, State, callback, dcc, no_update

MAX_IMPORTED_NODES = 50_000  # flame nodes kept per import (the chart draws the first 2,000)
SOURCES = [{"label": " compile + first run (pyinstrument, s)", "value": "python"},
           {"label": " kernel lines (callgrind or cycle counters)", "value": "kernel"},
           {"label": " imported speedscope file", "value": "imported"}]


def _node_count(tree: dict) -> int:
    count, todo = 0, [tree]
    while todo:
        node = todo.pop()
        count += 1
        todo.extend(node.get("children", []))
    return count


def import_speedscope(contents: str, filename: str) -> dict:
    """A dcc.Upload of a speedscope file -> {"name", "profiles": [{"name", "tree"}]}; raises
    UploadError / SpeedscopeError with a message the user can act on."""
    from app.security import decode_upload
    from profilers.speedscope import SpeedscopeError, from_speedscope, parse_text, profile_names

    data = parse_text(decode_upload(contents, filename, "speedscope"))
    profiles, nodes = [], 0
    for index, name in enumerate(profile_names(data)):
        tree = from_speedscope(data, index).to_dict()
        nodes += _node_count(tree)
        if nodes > MAX_IMPORTED_NODES:
            raise SpeedscopeError(f"the file's call trees have more than {MAX_IMPORTED_NODES:,} "
                                  "distinct frames in all; export fewer profiles or a shorter "
                                  "recording")
        profiles.append({"name": name, "tree": tree})
    return {"name": str(data.get("name") or filename), "profiles": profiles,
            "active": int(data.get("activeProfileIndex") or 0)}


@callback(Output("speedscope-import", "data"), Output("import-status", "children"),
          Output("flame-source", "value"), Output("import-profile", "options"),
          Output("import-profile", "value"),
          Input("speedscope-upload", "contents"), State("speedscope-upload", "filename"),
          prevent_initial_call=True)
def load_import(contents, filename):
    """Read the uploaded file; show its flame graph at once, or say what is wrong with it."""
    from app.security import UploadError
    from profilers.speedscope import SpeedscopeError

    try:
        imported = import_speedscope(contents, filename)
    except (UploadError, SpeedscopeError) as exc:
        return no_update, f"✗ {exc}", no_update, no_update, no_update
    options = [{"label": p["name"], "value": i} for i, p in enumerate(imported["profiles"])]
    count = len(options)
    status = (f"✓ imported {filename}: {count} profile{'s' if count != 1 else ''}"
              + (" (choose one on the right)" if count > 1 else ""))
    return imported, status, "imported", options, imported["active"]


def shown_tree(report: dict | None, source: str, imported: dict | None, index: int | None):
    """(tree, title) of the flame graph to draw, or (None, why there is none)."""
    from profilers.flame import FlameNode
    from profilers.hotspots import HotspotReport

    if source == "imported":
        if not imported:
            return None, "Import a speedscope JSON file to see its flame graph"
        profiles = imported["profiles"]
        pick = profiles[index if index is not None and 0 <= index < len(profiles) else 0]
        return FlameNode.from_dict(pick["tree"]), f"{imported['name']}: {pick['name']} (imported)"
    if not report:
        return None, "Profile an operator to see where the time goes"
    if source == "kernel":
        from app.callbacks.profiler import hotspot_source_text

        if not report.get("hotspots"):
            return None, hotspot_source_text(report)
        hot = HotspotReport.from_dict(report["hotspots"])
        unit = "instructions" if hot.source == "callgrind" else "cycles"
        return hot.tree(), (f"{report['op']['name']}: kernel {unit} by ODL line and C line "
                            f"({hotspot_source_text(report)})")
    return (FlameNode.from_dict(report["flame"]),
            f"{report['op']['name']}: compile + first run (pyinstrument)")


def sandwich_choices(tree, chosen: str | None) -> tuple[list[dict], str | None]:
    """The sandwich view's function dropdown (every function, heaviest self cost first) and
    the function to show: the chosen one while the tree still has it, else the heaviest."""
    import json

    from profilers.sandwich import function_table

    rows = function_table(tree)
    options = [{"label": r.label, "value": json.dumps(list(r.key))} for r in rows]
    values = {o["value"] for o in options}
    if chosen in values:
        return options, chosen
    return options, options[0]["value"] if options else None


@callback(Output("speedscope-download", "data"), Output("import-status", "children",
                                                        allow_duplicate=True),
          Input("speedscope-export", "n_clicks"), State("profile-current", "data"),
          State("flame-source", "value"), State("speedscope-import", "data"),
          State("import-profile", "value"), prevent_initial_call=True)
def export_speedscope(_clicks, current, source, imported, index):
    """The flame tree on screen as a speedscope file (open it at speedscope.app)."""
    from app.callbacks.profiler import _report
    from profilers.speedscope import to_speedscope

    tree, title = shown_tree(_report(current), source, imported, index)
    if tree is None:
        return no_update, f"✗ nothing to export: {title}"
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in tree.name)[:60] or "flame"
    return (dcc.send_string(json.dumps(to_speedscope(tree, title)), f"{name}.speedscope.json"),
            f"exported {name}.speedscope.json")
