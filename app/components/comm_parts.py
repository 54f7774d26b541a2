"""Result cards of the Communication page (plain components, no callbacks)."""

from __future__ import annotations

from dash import html


def _us(t: float) -> str:
    return f"{t * 1e6:,.2f} µs" if t < 1e-2 else f"{t * 1e3:,.2f} ms"


def _size(b: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def result_card(res: dict, crossovers: list[dict]) -> html.Div:
    """Time, algbw, busbw, link utilisation, the selector's reason, crossovers and notes."""
    algo = f"{res['algorithm']}/{res['protocol']}" if res.get("model", "").startswith("NCCL") else res["algorithm"]
    rows = [("algorithm", f"{algo} ({res['method']})"), ("ranks", res["ranks"]),
            ("time", _us(res["time"])), ("algbw", f"{res['algbw'] / 1e9:.2f} GB/s"),
            ("busbw", f"{res['busbw'] / 1e9:.2f} GB/s"),
            ("busiest link", f"{res['max_link_utilisation']:.0%} utilised"),
            ("on the wire", f"{_size(res['size'])} ({res['codec']}, "
                            f"{res['wire_ratio']:.0%} of {_size(res['logical_size'])})")]
    body = [html.Div([html.Span(k, className="muted"), html.Span(str(v), id=f"comm-{k.split()[0]}")])
            for k, v in rows]
    extra = []
    if res.get("alternatives"):
        # the numbers the choice was made on: the same simulations as the headline
        best = min(res["alternatives"], key=res["alternatives"].get)
        pick = f"{res['algorithm']}/{res.get('protocol')}"
        shown = pick if pick in res["alternatives"] else res["algorithm"]
        extra.append(html.Ul([
            html.Li(f"{a}: {_us(t)}" + (" (fastest)" if a == best else "")
                    + (" ← shown" if a == shown else ""))
            for a, t in sorted(res["alternatives"].items(), key=lambda x: x[1])],
            id="comm-alternatives"))
    if res.get("model"):
        extra.append(html.P(f"Model: {res['model']}", className="muted", id="comm-model"))
    if res.get("selection"):
        extra.append(html.P(res["selection"], className="muted"))
    if crossovers:
        extra.append(html.P("Crossovers: " + "; ".join(
            f"{c['frm']} → {c['to']} above {_size(c['size'])}" for c in crossovers)))
    extra += [html.P(n, className="muted") for n in res.get("notes", [])]
    return html.Div([html.Div(body, className="metrics metrics-2"), *extra])


def fault_card(rep: dict) -> html.Div:
    """Before/after of a failed element: times, slowdown, re-plan and moved routes."""
    b, a = rep["before"], rep["after"]
    moved = (f"{rep['rerouted_pairs']} of {rep['pairs_checked']} rank pairs changed route"
             if rep["pairs_checked"] else "one rank fewer")
    if rep.get("outcome") == "failed":
        effect = (f"{b['algorithm']} {_us(b['time'])} → collective failed; {rep['replanned']} "
                  f"({_us(a['time'])}).")
    else:
        effect = (f"{b['algorithm']} {_us(b['time'])} → {a['algorithm']} {_us(a['time'])} "
                  f"({rep['slowdown']:.2f}x) {rep.get('outcome', 'slower')}, {rep['replanned']}; "
                  f"{moved}.")
    return html.Div([html.B(f"Failed {rep['fault']}: "), html.Span(effect, id="fault-effect")],
                    className="finding")
