"""Worker process of the Graph page: compile, run, verify and time a whole graph (never in the server).

Runs as `python -m app.services.graph_child` with a JSON request (the graph source) on stdin.
"""

from __future__ import annotations

from app.services.child_io import serve_one

MARK = "@@GRAPH@@"


def run_request(request: dict) -> dict:
    """Load the graph from the request and run it against torch eager (the report)."""
    from app.services.graphs import load_graph_source
    from uol_core.graph import run_graph

    graph = load_graph_source(request["source"])
    return run_graph(graph, "c", request.get("target", "host"), repeat=int(request.get("repeat", 3)))


def main() -> None:
    """Answer the request on stdin with the marked report (or the error)."""
    serve_one(run_request, MARK, "report")


if __name__ == "__main__":
    main()
