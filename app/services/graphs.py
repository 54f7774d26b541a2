"""Graph service: open a sample, an uploaded JSON, a traced example model or a zoo model; plan,
draw data, run.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import os

from app.services.runner import REPO_ROOT

SAMPLES = REPO_ROOT / "sample_graphs"
MAX_GRAPH_JSON = 256 * 1024
MAX_GRAPH_NODES = 200  # more nodes than this would make the drawing unreadable anyway
RUN_TIMEOUT_S = 240.0
GRAPH_MEMORY_MB = 4096  # address space a graph run may add to the interpreter's own
# tasks a graph worker may start beyond the sandbox's 64, per core: the thread pools of our
# kernels' OpenMP, torch's, ONNX Runtime's and OpenVINO's, one thread per core each
POOLS_PER_CORE = 4


def worker_setup(timeout: float, memory_mb: int = GRAPH_MEMORY_MB) -> tuple[object, dict[str, str]]:
    """(limits, environment) of the sandboxed graph worker. It times our kernels against torch
    eager and the deployment runtimes, so it gets the threads a command-line run has: every
    core this process may use, for OpenMP, MKL and OpenBLAS alike. With the sandbox's default
    of one thread per library (for workers that run client code) torch ran on one thread in
    the worker, and the peers were given torch's count (`peer_run.time_with_peers`), while our
    kernels took every core of the target: the page compared two cores with one."""
    from uol_core.runtime.sandbox import Limits
    from uol_core.runtime.usercache import user_cache_root

    cores = len(os.sched_getaffinity(0))
    limits = Limits(cpu_s=int(timeout), memory_mb=memory_mb, file_mb=256, wall_s=timeout,
                    processes=Limits.processes + POOLS_PER_CORE * cores)
    threads = str(cores)
    return limits, {"UOL_CACHE_DIR": str(user_cache_root()), "OMP_NUM_THREADS": threads,
                    "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}


def _models() -> dict[str, tuple[str, list[int]]]:
    """Traced torch models: only the library's examples (no user code runs in the server); the
    model zoos are the "zoo" kind (app/services/graph_zoo.py). name -> (spec, input shape)."""
    return {"MLP": ("uol_core.graph.examples:MLP", [8, 256]),
            "ResNetBasicBlock": ("uol_core.graph.examples:ResNetBasicBlock", [1, 16, 16, 16]),
            "TransformerBlock": ("uol_core.graph.examples:TransformerBlock", [1, 32, 512])}


MODELS = _models()


def sample_names() -> list[str]:
    """File names in sample_graphs/."""
    return sorted(p.name for p in SAMPLES.glob("*.json"))


def check_source(source: object) -> str:
    """The kind of a graph source a client sent, once its names are in their closed sets (a
    sample file of the list, a model of MODELS or of the zoos; never a path); GraphError in one
    line else. Cheap: the server calls it before it starts a sandbox for the source."""
    from uol_core.graph import GraphError
    from uol_core.graph.named import check_zoo_request

    kind = source.get("kind") if isinstance(source, dict) else None
    name = source.get("name") if isinstance(source, dict) else None
    if kind == "sample" and name not in sample_names():
        raise GraphError(f"no sample graph {str(name)[:80]!r}; choose one of {sample_names()}")
    if kind == "model" and name not in MODELS:
        raise GraphError(f"no model {str(name)[:80]!r}; choose one of {list(MODELS)}")
    if kind == "zoo":
        check_zoo_request(name, source.get("size"), source.get("batch"))
    if kind not in ("sample", "upload", "model", "zoo"):
        raise GraphError(f"unknown graph source {str(kind)[:40]!r}")
    return kind


def load_graph_source(source: dict):
    """A validated Graph from {'kind': 'sample'|'upload'|'model'|'zoo', ...}. A zoo model is
    built and exported here: call it in the graph worker (graph_zoo.open_zoo), not the server."""
    from uol_core.graph import GraphError, graph_from_dict, load_graph, validate

    kind = check_source(source)
    if kind == "sample":
        return load_graph(SAMPLES / source["name"])
    if kind == "upload":
        data = source.get("data")
        if not isinstance(data, dict) or len(data.get("nodes") or []) > MAX_GRAPH_NODES:
            raise GraphError(f"an uploaded graph must be a JSON object with up to "
                             f"{MAX_GRAPH_NODES} nodes")
        return validate(graph_from_dict(data))
    if kind == "model":
        import torch

        from uol_core.graph.export_import import import_model
        from uol_core.graph.fx_import import load_module

        spec, shape = MODELS[source["name"]]
        torch.manual_seed(0)
        return import_model(load_module(spec), torch.randn(*shape), name=source["name"])
    if kind == "zoo":
        from uol_core.graph.named import import_zoo_model

        return import_zoo_model(source["name"], source["size"], source["batch"])[0]
    raise GraphError(f"unknown graph source {kind!r}")  # check_source knows every kind


def _rewrites(plan) -> list[dict]:
    """The plan's sibling merges and view folds as drawn decisions (producer <- consumer)."""
    merged = [{"fused": d.get("merged", False), "producer": " + ".join(d.get("nodes", [])),
               "consumer": d.get("node", "one GEMM"), "reason": d.get("reason", "")}
              for d in plan.siblings]
    folded = [{"fused": d.get("folded", False), "producer": f"view {d.get('view', '')}",
               "consumer": d.get("consumer", ""), "reason": d.get("reason", "")}
              for d in plan.view_folds]
    return merged + folded


def structure(graph) -> dict:
    """What the drawing needs: edges, node labels, fusion groups and decisions (JSON-ready), of
    the graph as it runs: the plan the run builds (`plan_graph`: sibling GEMMs merged, views
    folded into their readers, then fusion), so the kernels drawn are the kernels timed."""
    from uol_core.graph import plan_graph, to_networkx
    from uol_core.graph.named import opaque_nodes

    opaque = opaque_nodes(graph)  # the import's, with their reasons, before any rewrite
    try:
        plan = plan_graph(graph, "c", "host")
        graph = plan.graph
        groups = {n: grp.name for grp in plan.groups for n in grp.nodes}
        kernels = sum(grp.kind == "odl" for grp in plan.groups)
        decisions = _rewrites(plan) + [d.to_dict() for d in plan.decisions]
    except Exception as exc:  # a plan failure still lets the user see the graph
        groups, kernels = {}, None
        decisions = [{"fused": False, "reason": f"no fusion plan: {exc}"}]
    g = to_networkx(graph)
    labels = {}
    for node in graph.nodes:
        labels[node.name] = (f"{node.op.name} ({node.source})" if node.kind == "odl"
                             else f"torch {node.source}" + (f": {node.label.removeprefix('opaque: ')}"
                                                            if node.label.startswith("opaque") else ""))
    return {"name": graph.name, "nodes": list(g.nodes), "edges": [list(e) for e in g.edges],
            "labels": labels, "groups": groups, "decisions": decisions, "kernels": kernels,
            "description": graph.description, "opaque": opaque}


def run(source: dict, target: str = "host", timeout: float = RUN_TIMEOUT_S) -> dict:
    """Run the whole graph in a sandboxed worker (its factory calls too): per-group time
    against torch eager, verification; the limits hit, if any, are in the error."""
    from app.services.graph_child import MARK
    from uol_core.runtime.sandbox import run_sandboxed

    limits, env = worker_setup(timeout)
    return run_sandboxed("app.services.graph_child", {"source": source, "target": target},
                         MARK, limits=limits, preload=("torch", "uol_core.graph"),
                         confine_files=False, env=env,
                         schema={"ok": bool, "report": dict},
                         timed_out="the graph run did not finish within {timeout:.0f} s")


def node_operator(graph, node_name: str) -> dict:
    """The fused group a node runs in, as one operator at its graph shapes: {"odl", "sizes",
    "op", "graph", "group", "nodes"} (the group's kernel is built from this op; a group of
    one library node opens the library's text). ValueError for a node that runs in torch."""
    from uol_core.graph import plan_graph
    from uol_core.odl.printer import format_op
    from uol_core.ops import list_ops, op_text

    plan = plan_graph(graph, "c", "host")  # the graph as drawn, with its groups
    node = plan.graph.node(node_name)  # KeyError for a name that is not in the plan
    group = next(g for g in plan.groups if node_name in g.nodes)
    if group.kind != "odl" or group.op is None:
        raise ValueError(f"node {node_name} runs in torch ({node.source}): no kernel to open")
    alone = len(group.nodes) == 1 and node.source in list_ops()
    odl = op_text(node.source) if alone else format_op(group.op)
    return {"odl": odl, "sizes": group.sizes(plan.graph), "op": group.op.name,
            "graph": plan.graph.name, "group": group.name, "nodes": list(group.nodes)}


def open_in_studio(source: dict, node_name: str) -> tuple[int, dict]:
    """Record the fused group a node runs in (its op at its graph shapes) as a history entry;
    /run/<id> opens it. A zoo model's node is looked up in the graph worker (the server
    exports no model). Returns the run id and the group's name and nodes."""
    from app.services import history

    if check_source(source) == "zoo":
        from app.services.graph_zoo import zoo_node

        found = zoo_node(source, node_name)
    else:
        found = node_operator(load_graph_source(source), node_name)
    nodes = ", ".join(found["nodes"])
    rid = history.record("graph-node", {"odl": found["odl"], "backend": "c", "target": "host",
                                        "sizes": found["sizes"], "config": {}, "op": found["op"]},
                         {"ok": True, "op": found["op"],
                          "note": f"fused group {found['group']} ({nodes}) of graph "
                                  f"{found['graph']}, opened from node {node_name}"})
    return rid, found
