"""Graph page views that are not callbacks: the opaque-node table and the deployment-runtime
comparison (chart, table and the one-line verdict), from the service's JSON."""

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
        parts.append(f"UOL {peers['speedup_vs_baseline']:.2f}x "
                     f"{PEER_LABELS.get(baseline, baseline)} (the baseline)")
    if best and peers.get("speedup_vs_best_peer"):
        parts.append(f"{peers['speedup_vs_best_peer']:.2f}x the best peer "
                     f"({PEER_LABELS.get(best, best)})")
    verdict = ("; ".join(parts) if parts else "no speedup: UOL or every peer has no time")
    return html.Div([
        html.P(verdict + f" · median of {peers.get('rounds')} alternated rounds, "
               f"{peers.get('threads')} thread(s) each", id="graph-peers-verdict"),
        dcc.Graph(id="graph-peers-chart", figure=fig, config={"displayModeBar": False},
                  style={"width": "100%"}),
        html.Div(table, className="graph-scroll")])
