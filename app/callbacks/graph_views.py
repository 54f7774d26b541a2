"""Graph page views that are not callbacks: the opaque-node table and the deployment-runtime
comparison (chart, table and the one-line verdict), from the service's JSON.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import dcc, html

NONE_OPAQUE = "0 opaque nodes: the whole model runs in UOL kernels"


def opaque_panel(opaque: list[dict] | None) -> html.Div | str:
    """Every node the import left in torch with its aten op and the reason, or the line that
    says there are none."""
    if not opaque:
        return html.Span(NONE_OPAQUE, className="result-ok", id="graph-opaque-none")
    head = html.Tr([html.Th("node"), html.Th("aten op"), html.Th("reason")])
    rows = [html.Tr([html.Td(o.get("node", "")), html.Td(html.Code(o.get("source", ""))),
                     html.Td(o.get("reason", ""))], className="graph-opaque")
            for o in opaque]
    return html.Div([
        html.P(f"{len(opaque)} opaque node{'s' if len(opaque) != 1 else ''}: they run in torch "
               "between UOL's kernels", className="result-bad"),
        html.Div(html.Table([html.Thead(head), html.Tbody(rows)], className="graph-opaque-table"),
                 className="graph-scroll")])


def faster_than(ratio: float, baseline: str) -> str:
    """'UOL is 1.21x faster than torch eager' or '... 1.30x slower than ...': the way is said."""
    if ratio >= 1:
        return f"UOL is {ratio:.2f}x faster than {baseline}"
    return f"UOL is {1 / ratio:.2f}x slower than {baseline}"


def whole_graph_line(rep: dict) -> str:
    """The headline with its baseline named: the whole graph against torch eager (the module
    it was imported from), or that a graph file has no such baseline."""
    if rep.get("torch_eager_ms") is None or not rep.get("speedup_vs_eager"):
        return (f"Whole graph: UOL {rep['total_ms']:.2f} ms; no torch eager baseline (a graph "
                "file has no torch module to time)")
    return (f"Whole graph, baseline torch eager (the module it was imported from, calls "
            f"alternated): UOL {rep['total_ms']:.2f} ms, torch eager "
            f"{rep['torch_eager_ms']:.2f} ms: {faster_than(rep['speedup_vs_eager'], 'torch eager')}")


def per_group_line(rep: dict) -> str:
    """The per-group chart's baseline, named: the reference evaluator, which is not torch
    eager, so its ratios are not the headline's."""
    rows = rep.get("rows") or []
    ours = sum(r.get("ms") or 0.0 for r in rows)
    ref = sum(r.get("reference_ms") or 0.0 for r in rows)
    line = ("Per fused group (the bars), baseline the reference evaluator: each group's nodes "
            "one by one, ODL interpreted with torch ops; not torch eager, so its ratios are "
            "not the headline's.")
    if ours and ref:
        line += (f" The groups sum to {ours:.2f} ms against {ref:.2f} ms: "
                 f"{faster_than(ref / ours, 'the reference evaluator')}.")
    line += chain_cost(rows)
    return line


def chain_cost(rows: list[dict]) -> str:
    """What running in the model costs the kernels: their times as the replay runs them
    against each repeated on its own with its data in cache (empty where none was timed both
    ways)."""
    both = [r for r in rows if r.get("in_replay") and r.get("warm_ms")]
    chain = sum(r["ms"] for r in both)
    warm = sum(r["warm_ms"] for r in both)
    if not both or not warm:
        return ""
    return (f" In the model's order the kernels take {chain:.2f} ms; each repeated on its own, "
            f"caches warm, {warm:.2f} ms ({chain / warm:.2f}x: what the chain costs them in "
            "data no longer cached).")


def _ms(value: float | None) -> str:
    return f"{value:.2f}" if value else "–"


def peers_view(peers: dict | None) -> html.Div | str:
    """The run beside the deployment runtimes: bars of ms per contender (ours first), a table
    with each one's verification or the reason it has no time, and the verdict against the
    baseline and the best peer."""
    from profilers.figures.graphs import PEER_LABELS, peer_bars

    if not peers:
        return ("not compared: tick 'compare with deployment runtimes' and run a zoo model")
    rows = peers.get("rows", [])
    baseline = peers.get("baseline", "eager")
    fig = peer_bars(rows, baseline)
    fig.update_layout(width=None)
    table = html.Table([
        html.Thead(html.Tr([html.Th("contender"), html.Th("ms"), html.Th("theirs / ours"),
                            html.Th("verified, or why not timed")])),
        html.Tbody([html.Tr([
            html.Td(PEER_LABELS.get(r["contender"], r["contender"])
                    + (" (baseline)" if r["contender"] == baseline else "")),
            html.Td(_ms(r.get("ms"))),
            html.Td(f"{r['speedup']:.2f}x" if r.get("speedup") else "–"),
            html.Td(("✓ " if r.get("verified") else "✗ ") + (r.get("note") or ""),
                    className="" if r.get("verified") else "result-bad")],
            className="graph-peer-row") for r in rows])], className="graph-peers-table")
    best = peers.get("best_peer")
    parts = []
    if peers.get("speedup_vs_baseline"):
        parts.append(faster_than(peers["speedup_vs_baseline"],
                                 f"{PEER_LABELS.get(baseline, baseline)} (the baseline)"))
    if best and peers.get("speedup_vs_best_peer"):
        parts.append(faster_than(peers["speedup_vs_best_peer"],
                                 f"the best peer ({PEER_LABELS.get(best, best)})")
                     .removeprefix("UOL is "))
    verdict = ("; ".join(parts) if parts else "no speedup: UOL or every peer has no time")
    return html.Div([
        html.P(verdict + f" · median of {peers.get('rounds')} alternated rounds, "
               f"{peers.get('threads')} thread(s) each", id="graph-peers-verdict"),
        dcc.Graph(id="graph-peers-chart", figure=fig, config={"displayModeBar": False},
                  style={"width": "100%"}),
        html.Div(table, className="graph-scroll")])
