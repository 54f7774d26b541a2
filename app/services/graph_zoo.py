"""Zoo models on the Graph page: the closed set of names a user picks from (both zoos: the
hand-built blocks and the library models), and their import, node lookup and run, each in the
sandboxed graph worker: the server never builds or exports a model (a library model at its
bench size is hundreds of MiB of weights and seconds of torch.export).

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

from app.services.graphs import GRAPH_MEMORY_MB, RUN_TIMEOUT_S, check_source, worker_setup

OPEN_TIMEOUT_S = 180.0  # build, torch.export and plan of the largest bench-size model
# the peers hold their own copy of the model each (ONNX Runtime, OpenVINO, torch.compile's)
PEERS_MEMORY_MB = 3 * GRAPH_MEMORY_MB
SIZES = {"small": "small (tests: a few narrow layers)",
         "bench": "bench (published width and resolution)"}
BATCHES = (1, 8)


def zoo_options() -> list[dict]:
    """The dropdown's options: every zoo model by name, labelled by family; a model whose
    library is missing is offered disabled, with the reason in its label."""
    from uol_core.graph.named import zoo_models

    options = []
    for name, model in zoo_models().items():
        reason = model.unavailable()
        options.append({"label": model.label + (f": {reason}" if reason else ""),
                        "value": name, "disabled": bool(reason), "title": reason or model.label})
    return options


def zoo_source(name: object, size: object, batch: object) -> dict:
    """The graph source of a zoo model, checked against the closed sets (GraphError else)."""
    source = {"kind": "zoo", "name": name, "size": size, "batch": batch}
    check_source(source)
    return source


def _worker(request: dict, timeout: float, memory_mb: int = GRAPH_MEMORY_MB) -> dict:
    """One request to the graph worker in the sandbox: {"ok", "report"} or {"ok": False, "error"}.
    It queues in the calling browser's lane of the job queue (one job at a time per client, a
    pool slot each) and is dropped if that client leaves before it starts."""
    from app.services.graph_child import MARK
    from app.services.job_queue import JobRefused, client_id, job_slot, request_left
    from uol_core.runtime.sandbox import run_sandboxed

    check_source(request["source"])  # names from their closed sets before a sandbox starts
    limits, env = worker_setup(timeout, memory_mb)
    what = f"zoo model {request['source']['name']}"
    try:
        with job_slot(client_id(), what, abandoned=request_left()):
            return run_sandboxed("app.services.graph_child", request, MARK, limits=limits,
                                 preload=("torch", "uol_core.graph"), confine_files=False,
                                 env=env,
                                 schema={"ok": bool, "report": dict},
                                 timed_out="the zoo model did not finish within {timeout:.0f} s")
    except JobRefused as exc:  # the client's queue is full or it waited too long: one line
        return {"ok": False, "error": str(exc)}


def _one_line(error: object) -> str:
    """A worker's error as the page's status shows it: its first line, never a traceback."""
    return (str(error or "the graph worker failed").strip().splitlines() or ["failed"])[0][:400]


def open_zoo(source: dict) -> dict:
    """Import the model in the worker and return what the page draws (graphs.structure) with
    the opaque nodes; GraphError in one line when it cannot be built or exported."""
    from uol_core.graph import GraphError

    res = _worker({"source": source, "action": "open"}, OPEN_TIMEOUT_S)
    if not res.get("ok"):
        raise GraphError(_one_line(res.get("error")))
    return res["report"]


def zoo_node(source: dict, node_name: str) -> dict:
    """The operator of one node of the model's plan ({"odl", "sizes", "op", "graph"}), looked
    up in the worker; ValueError in one line for a node that runs in torch."""
    res = _worker({"source": source, "action": "node", "node": str(node_name)[:200]},
                  OPEN_TIMEOUT_S)
    if not res.get("ok"):
        raise ValueError(_one_line(res.get("error")))
    return res["report"]


def run_zoo(source: dict, target: str = "host", peers: bool = False,
            timeout: float = RUN_TIMEOUT_S) -> dict:
    """Run the model whole in the worker (per-group times, verification, eager); with `peers`,
    also time torch.compile, ONNX Runtime and OpenVINO beside it (report["peers"])."""
    request = {"source": source, "target": target, "peers": bool(peers)}
    res = _worker(request, timeout + (OPEN_TIMEOUT_S if peers else 0.0),
                  PEERS_MEMORY_MB if peers else GRAPH_MEMORY_MB)
    if not res.get("ok"):
        res["error"] = _one_line(res.get("error"))
    return res
