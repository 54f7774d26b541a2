"""The Studio's Triton stages pane: a stage selector (TTIR, TTGIR, LLVM IR, PTX), the kernel of
the module, the optional cubin, and the listing with each row tied to its Triton source line
(`data-kline`, linked to the kernel pane by assets/stagemap.js) and its ODL line (`data-odl`,
linked to the editor by assets/codemap.js). The listing is one HTML blob, escaped here."""

from __future__ import annotations

import html as escape

from dash import dcc, html

from app.components.codeview import code_host, colour_of

MAX_ROWS = 8000  # a large GEMM's PTX runs to 20,000 lines; the rest is counted, not drawn
STAGE_OPTIONS = [{"label": "TTIR", "value": "ttir"}, {"label": "TTGIR", "value": "ttgir"},
                 {"label": "LLVM IR", "value": "llir"}, {"label": "PTX", "value": "ptx"}]


def stages_panel() -> html.Div:
    """The pane as the layout holds it; painted by the callbacks of studio_stages."""
    controls = html.Div([
        html.Div([html.Label("Stage"), dcc.Dropdown(
            id="stage-select", options=STAGE_OPTIONS, value="ptx", clearable=False,
            className="dropdown stage-dropdown")]),
        html.Div([html.Label("Kernel"), dcc.Dropdown(
            id="stage-kernel", options=[], value=None, clearable=False,
            className="dropdown stage-dropdown", placeholder="the module's first")]),
        dcc.Checklist(id="stage-binary", options=[{"label": " assemble (ptxas: cubin)",
                                                   "value": "cubin"}],
                      value=[], className="stage-binary"),
        html.Button("Show stages", id="stage-button", className="secondary",
                    title="Compile the Triton kernel for this GPU target with triton.compile "
                          "(no GPU needed) and show its stages; follows every compile after"),
    ], className="toolbar")
    return html.Div([
        html.H3("Triton stages"),
        controls,
        html.Div("For a GPU target with the Triton backend: Triton's own compiler stages of this "
                 "kernel. Click a row to land on its Triton line; hover to see its ODL line.",
                 id="stage-status", className="muted inspect-status"),
        dcc.Loading(code_host("stage-source", "s"), delay_show=300),
        dcc.Store(id="stage-html"), html.Div(id="stage-paint", style={"display": "none"}),
    ], className="panel triton-stages")


def stage_html(rows: list[tuple[str, int | None, int | None]], pane: str = "s",
               limit: int = MAX_ROWS) -> str:
    """One <span> per stage line: the stage line number, the Triton line it came from, the
    text; `data-kline` and `data-odl` where the debug info gives them."""
    out = []
    for number, (text, kline, odl) in enumerate(rows[:limit], 1):
        attrs = [f'id="{pane}-{number}"']
        classes = ["stage-row"]
        where = f"Triton line {kline}" if kline else "no Triton line"
        if kline:
            attrs.append(f'data-kline="{kline}"')
        if odl:
            attrs.append(f'data-odl="{odl}"')
            classes += ["mapped", colour_of(odl)]
            where += f" · ODL line {odl}"
        attrs.append(f'title="{escape.escape(where, quote=True)}"')
        attrs.append(f'class="{" ".join(classes)}"')
        source = f"{kline:>4}" if kline else "    "
        out.append(f'<span {" ".join(attrs)}><span class="linenos">{number:>5} {source}</span>'
                   f"{escape.escape(text)}</span>")
    if len(rows) > limit:
        out.append(f'<span class="muted">… {len(rows) - limit:,} more lines not drawn (the '
                   f"listing shows the first {limit:,})</span>")
    return '<div class="highlight"><pre>' + "\n".join(out) + "\n</pre></div>"
