"""Kernel Studio: ODL beside the generated kernel, knobs from the constraint space, run, tune, explain."""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import studio as _compile_callbacks  # noqa: F401  (registers callbacks)
from app.callbacks import studio_run as _run_callbacks  # noqa: F401
from app.components.codeview import code_host
from app.figures.studio import empty_figure
from app.services.runner import MAX_TUNE_BUDGET
from uol_core.backends import get_backend, kernel_backend_names

dash.register_page(__name__, path="/", name="Studio", title="UOL Studio: Kernel Studio", order=0)

DEFAULT_OP = "matmul"


def _initial(run_id: str | None) -> dict:
    """What the Studio opens with: a run from the history (permalink) or the example op."""
    from app.services import history, kernels
    from uol_core.ops import op_text

    if run_id:
        try:
            row = history.get(int(run_id))
        except (ValueError, OSError):
            row = None
        if row:
            return {"op": row["op"], "odl": row["odl"], "backend": row["backend"],
                    "target": row["target"], "sizes": row["sizes"], "config": row["config"],
                    "note": f"Reopened run #{row['id']}"}
    odl = op_text(DEFAULT_OP)
    return {"op": DEFAULT_OP, "odl": odl, "backend": "c", "target": "host",
            "sizes": kernels.default_sizes(odl), "config": {}, "note": ""}


def _options() -> tuple[list[str], list[str]]:
    from uol_core.hfl import list_targets
    from uol_core.ops import list_ops

    return list_ops(), list_targets()


def layout(run_id: str | None = None, **_query) -> html.Div:
    """The Studio; `run_id` (from /run/<id>) reopens a recorded run."""
    from app.services.kernels import format_sizes

    init = _initial(run_id)
    ops, targets = _options()
    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    toolbar = html.Div([
        field("Operator (library)", dcc.Dropdown(id="op-select", options=ops, value=init["op"],
                                                 clearable=False, className="dropdown")),
        field("Target (HFL)", dcc.Dropdown(id="target-select", options=targets,
                                           value=init["target"], clearable=False,
                                           className="dropdown")),
        field("Backend", dcc.Dropdown(id="backend-select", clearable=False, className="dropdown",
                                      options=[{"label": get_backend(name).label,
                                                "value": name}
                                               for name in kernel_backend_names()],
                                      value=init["backend"])),
        field("Sizes", dcc.Input(id="sizes-input", value=format_sizes(init["sizes"]),
                                 debounce=True, style={"width": "190px"})),
        html.Button("Compile", id="compile-button"),
        html.Button("Run (verify + measure)", id="run-button"),
        field(f"Tune budget (max {MAX_TUNE_BUDGET})",
              dcc.Input(id="tune-budget", type="number", value=6, min=1, max=MAX_TUNE_BUDGET,
                        style={"width": "70px"})),
        html.Button("Tune", id="tune-button"),
        html.Button("Cancel", id="tune-cancel", className="secondary", disabled=True),
        html.Progress(id="tune-progress", value="0", max="1"),
    ], className="toolbar")
    editor = html.Div([
        html.H3("ODL"),
        html.Div([html.Div(id="odl-highlight", className="odl-layer"),
                  dcc.Textarea(id="odl-editor", value=init["odl"], spellCheck=False)],
                 className="odl-editor", style={"height": "300px"}),
        html.Div(id="odl-error", className="odl-error"),
        html.Div(id="odl-paint", style={"display": "none"}),
    ], className="panel")
    kernel = html.Div([
        html.H3(["Generated kernel ", html.Span(id="compile-status", className="muted")]),
        code_host("kernel-source", "k"),
        dcc.Store(id="kernel-html"), html.Div(id="kernel-paint", style={"display": "none"}),
    ], className="panel")
    knobs = html.Div([html.H3("Knobs (legal values only)"), html.Div(id="knob-panel")],
                     className="panel")
    results = html.Div([
        html.Div([html.H3("Result"),
                  dcc.Loading(html.Div(id="run-result", children=html.Div(
                      "Press Run to verify and time the kernel.", className="muted")),
                      delay_show=300),
                  html.H3("Tuning"), html.Div(id="tune-status", className="muted"),
                  dcc.Graph(id="tune-plot", figure=empty_figure("Tune to see best-so-far"),
                            config={"displayModeBar": False})], className="panel"),
        html.Div([dcc.Graph(id="roofline-graph",
                            figure=empty_figure("Run the kernel to place it on the roofline"),
                            config={"displayModeBar": False, "responsive": True},
                            style={"width": "100%"}),
                  html.H3("History of this op"), html.Div(id="run-history")],
                 className="panel"),
        html.Div([html.H3("Explanation"), html.Pre(id="explanation", className="explanation")],
                 className="panel"),
    ], className="studio-grid", style={"marginTop": "10px"})
    return html.Div([
        dcc.Store(id="studio-state"),
        dcc.Store(id="studio-init", data={"config": init["config"], "sizes": init["sizes"]}),
        dcc.Store(id="op-loaded"),
        html.Div(init["note"], id="studio-note", className="muted"),
        toolbar,
        html.Div([editor, kernel, knobs], className="studio-grid"),
        results,
    ])
