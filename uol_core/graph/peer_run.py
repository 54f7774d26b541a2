"""UOL beside the runtimes a model would be deployed with: the compiled graph, torch eager,
torch.compile, ONNX Runtime and OpenVINO on the model's own example inputs, each verified
against eager, calls alternated round by round in one run (`interleaved_ms`).

    from uol_core.graph.peer_run import time_with_peers
    table = time_with_peers(graph, module, inputs)   # rows: contender, ms, verified, note

A peer that cannot be built here (its package missing, its exporter refusing the model) or
that gives a wrong answer keeps its row with the reason and no time, so a table never hides
a contender.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from uol_core.graph.format import Graph
from uol_core.graph.peers import PEERS, prepare_peers, verify_peers
from uol_core.graph.run import TOLERANCE, compile_graph, interleaved_ms, make_inputs, max_error
from uol_core.runtime.turns import PEER_LEAD_IN_S

BASELINE = "eager"  # what a user runs before deploying: every speedup is against it too
UOL = "uol"


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + ((str(exc).strip().splitlines() or [""])[0])[:200]


def _ours(graph: Graph, inputs: Sequence[torch.Tensor], backend: str, target: str,
          expected: torch.Tensor) -> tuple[Callable[[], object] | None, str, float | None]:
    """The compiled graph on the example inputs: (call, note, max rel. error) or (None, why)."""

    try:
        compiled = compile_graph(graph, backend, target)
        env = make_inputs(graph)
        # the model's own inputs (token ids are integers, not random floats), same shapes
        for name, value in zip(graph.inputs, inputs, strict=False):
            if tuple(value.shape) == tuple(graph.inputs[name].shape):
                env[name] = value
        with torch.no_grad():
            outputs = compiled(env)
        error = max_error({graph.outputs[0]: outputs[graph.outputs[0]]},
                          {graph.outputs[0]: expected})
    except Exception as exc:  # a wrong first call raises (VerificationError): keep the row
        return None, _first_line(exc), None
    return (lambda: compiled(env)), "", error


def time_with_peers(graph: Graph, module: nn.Module, inputs: Sequence[torch.Tensor],
                    peers: Sequence[str] | None = None, rounds: int = 5, backend: str = "c",
                    target: str = "host", threads: int | None = None) -> dict:
    """Median ms per contender (ours first), alternated round by round in one run; JSON-ready:
    {"rows": [{"contender", "ms", "verified", "note", "speedup"}], "baseline", "best_peer",
    "speedup_vs_baseline", "speedup_vs_best_peer", "rounds", "threads"}. `speedup` is the
    contender's time over ours (above 1: we are faster)."""

    threads = threads or torch.get_num_threads()  # the peers get the cores eager has
    inputs = tuple(inputs)
    with torch.no_grad():
        expected = module(*inputs)
    ours, our_note, error = _ours(graph, inputs, backend, target, expected)
    our_ok = ours is not None and error is not None and error <= TOLERANCE
    if ours is not None and not our_ok:
        our_note = f"wrong result: max rel. error {error:.2e}"
    prepared = prepare_peers(module, inputs, tuple(peers or PEERS), threads=threads)
    failures = verify_peers(prepared, expected)
    calls: dict[str, Callable[[], object]] = {UOL: ours} if our_ok else {}
    for name, peer in prepared.items():
        if peer.call is not None and not failures.get(name):
            calls[name] = peer.call
    with torch.no_grad():
        ms = interleaved_ms(calls, max(1, rounds), PEER_LEAD_IN_S) if calls else {}
    rows = [{"contender": UOL, "ms": ms.get(UOL), "verified": our_ok, "note": our_note,
             "max_rel_error": error}]
    for name, peer in prepared.items():
        note = failures.get(name) or peer.note or ""
        rows.append({"contender": name, "ms": ms.get(name), "verified": name in ms,
                     "note": note, "max_rel_error": None})
    for row in rows:
        row["speedup"] = row["ms"] / ms[UOL] if row["ms"] and ms.get(UOL) else None
    timed_peers = {r["contender"]: r["ms"] for r in rows[1:] if r["ms"]}
    best = min(timed_peers, key=timed_peers.get) if timed_peers else None
    return {"rows": rows, "baseline": BASELINE, "best_peer": best, "rounds": rounds,
            "threads": threads,
            "speedup_vs_baseline": timed_peers[BASELINE] / ms[UOL]
            if BASELINE in timed_peers and UOL in ms else None,
            "speedup_vs_best_peer": timed_peers[best] / ms[UOL] if best and UOL in ms else None}


__all__ = ["BASELINE", "UOL", "time_with_peers"]
