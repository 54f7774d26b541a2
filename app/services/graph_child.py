"""Worker process of the Graph page: compile, run, verify and time a whole graph (never in the server).

Runs as `python -m app.services.graph_child` with a JSON request (the graph source) on stdin.
"""

from __future__ import annotations

import json
import sys

MARK = "@@GRAPH@@"


def main() -> None:
    """Load the graph from the request, run it against torch eager, print the marked report."""
    request = json.loads(sys.stdin.read())
    try:
        from app.services.graphs import load_graph_source
        from uol_core.graph import run_graph

        graph = load_graph_source(request["source"])
        report = run_graph(graph, "c", request.get("target", "host"),
                           repeat=int(request.get("repeat", 3)))
        result = {"ok": True, "report": report}
    except Exception as exc:  # reported in the page; the server never sees the exception
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(MARK + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
