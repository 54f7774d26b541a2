"""Worker process of the Graph page: import, compile, run, verify and time a whole graph (never
in the server); for a zoo model also its import for drawing, a node's operator and the peers.

Runs as `python -m app.services.graph_child` with a JSON request (the graph source) on stdin.

Deferred imports: a child process loads only the engine its request needs, so it starts fast.
"""

from __future__ import annotations

from app.services.child_io import serve_one

MARK = "@@GRAPH@@"
PEER_ROUNDS = 5


def run_request(request: dict) -> dict:
    """The request's action on its graph: "open" (what the page draws), "node" (one node's
    operator) or, by default, a run against torch eager (the report; with "peers" for a zoo
    model, torch.compile, ONNX Runtime and OpenVINO timed beside it)."""
    from app.services.graphs import check_source, load_graph_source, node_operator, structure
    from uol_core.graph import run_graph

    source, action = request["source"], request.get("action", "run")
    module = inputs = None
    if check_source(source) == "zoo":
        from uol_core.graph.named import import_zoo_model

        graph, module, inputs = import_zoo_model(source["name"], source["size"], source["batch"])
    else:
        graph = load_graph_source(source)
    if action == "open":
        return structure(graph)
    if action == "node":
        return node_operator(graph, str(request["node"]))
    report = run_graph(graph, "c", request.get("target", "host"),
                       repeat=int(request.get("repeat", 3)))
    if request.get("peers") and module is not None:
        from uol_core.graph.peer_run import time_with_peers

        report["peers"] = time_with_peers(graph, module, inputs, rounds=PEER_ROUNDS,
                                          target=request.get("target", "host"))
    return report


def main() -> None:
    """Answer the request on stdin with the marked report (or the error)."""
    serve_one(run_request, MARK, "report")


if __name__ == "__main__":
    main()
