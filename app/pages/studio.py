"""Kernel Studio: ODL beside the generated kernel, knobs from the constraint space, run, tune, explain.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import studio as _compile_callbacks  # noqa: F401  (registers callbacks)
from app.callbacks import studio_inspect as _inspect_callbacks  # noqa: F401
from app.callbacks import studio_pin as _pin_callbacks  # noqa: F401
from app.callbacks import studio_run as _run_callbacks  # noqa: F401
from app.callbacks import studio_stages as _stage_callbacks  # noqa: F401
from app.callbacks import studio_state as _state_callbacks  # noqa: F401
from app.callbacks import studio_tune_job as _tune_job_callbacks  # noqa: F401
from app.callbacks.studio import EDITED, op_identity
from app.components.codeview import code_host
from app.components.triton_stages_view import stages_panel
from app.figures.studio import empty_figure
from app.services.runner import MAX_TUNE_BUDGET
from uol_core.backends import get_backend, kernel_backend_names

dash.register_page(__name__, path="/", name="Studio", title="UOL Studio: Kernel Studio", order=0)

DEFAULT_OP = "matmul"


def _initial(run_id: str | None, query: dict | None = None) -> dict:
    """What the Studio opens with: a run from the history (permalink), a library op named in
    the URL (?op=&target=&backend=&sizes=&config=, as the Guide links), or the example op."""
    from app.services import history, kernels
    from uol_core.ops import list_ops, op_text

    if run_id:
        try:
            row = history.get(int(run_id))
        except (ValueError, OSError):
            row = None
        if row:
            return {"op": row["op"], "odl": row["odl"], "backend": row["backend"],
                    "target": row["target"], "sizes": row["sizes"], "config": row["config"],
                    "note": f"Reopened run #{row['id']}"}
    if query and (query.get("op") in list_ops() or query.get("odl")):
        # ?odl= is text of the user's own (the page keeps its state in the URL: a reload
        # reopens it); ?op= a library op
        pairs = lambda text: dict(p.split("=", 1) for p in (text or "").split(",") if "=" in p)  # noqa: E731
        sizes = {k: int(v) for k, v in pairs(query.get("sizes")).items() if v.isdigit()}
        config = {k: int(v) if v.lstrip("-").isdigit() else v
                  for k, v in pairs(query.get("config")).items()}
        odl = query.get("odl") or op_text(query["op"])
        name = (op_identity(odl) or {}).get("op") or query.get("op") or ""
        try:
            defaults = kernels.default_sizes(odl)
        except Exception:  # text with an error: the compile shows it, the page still opens
            defaults = {}
        return {"op": name, "odl": odl, "backend": query.get("backend") or "c",
                "target": query.get("target") or "host",
                "sizes": sizes or defaults, "config": config, "note": ""}
    odl = op_text(DEFAULT_OP)
    return {"op": DEFAULT_OP, "odl": odl, "backend": "c", "target": "host",
            "sizes": kernels.default_sizes(odl), "config": {}, "note": ""}


def _library_text(name: str) -> str | None:
    """The library's text of op `name` (None when the library has no such op)."""
    from uol_core.ops import op_text

    try:
        return op_text(name)
    except (KeyError, ValueError, FileNotFoundError):
        return None


def _options() -> tuple[list[str], list[dict]]:
    from app.services.remote import target_options
    from uol_core.hfl import list_targets
    from uol_core.ops import list_ops

    return list_ops(), target_options(list_targets())  # live remote workers marked


def _inspect_row(backend: str) -> html.Div:
    """Assembly of the compiled kernel (objdump, rows tied to C and ODL lines) beside a
    side-by-side diff of this kernel against the same op with other knobs or backend."""
    assembly = html.Div([
        html.H3(["Assembly ", html.Button("Disassemble", id="asm-button", className="secondary",
                                          title="Build the C kernel with gcc -g and show "
                                                "objdump -d -l; follows every compile after")]),
        html.Div("Hover a row to see its C line in the kernel and its ODL line in the editor.",
                 id="asm-status", className="muted inspect-status"),
        code_host("asm-source", "a"),
        dcc.Store(id="asm-html"), html.Div(id="asm-paint", style={"display": "none"}),
    ], className="panel")
    diff = html.Div([
        html.H3("Kernel diff"),
        html.Div([
            html.Div([html.Label("B: backend"), dcc.Dropdown(
                id="diff-backend", clearable=False, className="dropdown", value=backend,
                persistence=True, persistence_type="local",
                options=[{"label": get_backend(name).label, "value": name}
                         for name in kernel_backend_names()])]),
            html.Div([html.Label("B: knobs (blank: the defaults)"),
                      dcc.Input(id="diff-config", placeholder="e.g. ku=1,mr=4",
                                style={"width": "220px"}, persistence=True,
                                persistence_type="local")]),
            html.Button("Diff A (this kernel) with B", id="diff-button", className="secondary"),
        ], className="toolbar"),
        html.Div(id="diff-status", className="muted inspect-status"),
        code_host("diff-source", "d"),
        dcc.Store(id="diff-html"), html.Div(id="diff-paint", style={"display": "none"}),
    ], className="panel")
    return html.Div([assembly, diff], className="studio-grid studio-inspect")


def layout(run_id: str | None = None, **_query) -> html.Div:
    """The Studio; `run_id` (from /run/<id>) reopens a recorded run."""
    from app.services.kernels import format_sizes

    init = _initial(run_id, _query)
    ops, targets = _options()
    identity = op_identity(init["odl"]) or {"op": init["op"]}
    # a reopened run of a library op with the library's text is that op, not "(edited)"
    library_text = init["odl"] if init["op"] in ops and init["odl"] == _library_text(
        init["op"]) else None
    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    toolbar = html.Div([
        field("Operator (library)", dcc.Dropdown(
            id="op-select", clearable=False, className="dropdown",
            # "(edited)": the editor holds text of its own; it cannot be chosen, only shown
            options=[{"label": EDITED, "value": EDITED, "disabled": True}, *ops],
            value=init["op"] if library_text is not None else EDITED)),
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
        # text, not type=number: the browser would turn "abc" or an out-of-range number into
        # an empty value, and the tune must say what was wrong with what the user typed
        field(f"Tune budget (1 to {MAX_TUNE_BUDGET})",
              dcc.Input(id="tune-budget", type="text", inputMode="numeric", value="6",
                        style={"width": "70px"}, persistence=True, persistence_type="local")),
        html.Button("Tune", id="tune-button"),
        html.Button("Cancel", id="tune-cancel", className="secondary", disabled=True),
        html.Button("Apply best", id="tune-apply", className="secondary", disabled=True,
                    title="Load the best verified config of the last tune into the knobs"),
        html.Progress(id="tune-progress", value="0", max="1"),
    ], className="toolbar")
    editor = html.Div([
        html.H3(["ODL ", html.Span("Ctrl+F find · Tab indents · Enter keeps the indent",
                                   className="muted editor-keys")]),
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
    inspect = _inspect_row(init["backend"])
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
                            # a set height: a responsive chart fills its box, and a box sized
                            # by its chart would be circular (the panel ends mid-chart)
                            style={"height": "480px"}, className="panel-figure"),
                  html.H3("History of this op"),
                  html.Div(id="run-history", className="run-history")],
                 className="panel"),
        html.Div([html.H3("Explanation"), html.Pre(id="explanation", className="explanation")],
                 className="panel"),
    ], className="studio-grid studio-results", style={"marginTop": "10px"})
    return html.Div([
        dcc.Store(id="studio-state"),
        dcc.Store(id="studio-init", data={"config": init["config"], "sizes": init["sizes"],
                                          "odl": init["odl"], "backend": init["backend"],
                                          "target": init["target"]}),
        # the page's state as data (app/callbacks/studio_state.py): kept in the URL and the
        # browser's local storage; "/" without a query reopens the state last kept
        dcc.Store(id="studio-restore", data=not run_id and not _query),
        dcc.Store(id="studio-saved"), dcc.Store(id="panels-of"),
        # the roofline's blank chart, for the browser to put back when its run goes stale
        dcc.Store(id="roofline-empty", data=empty_figure(
            "Run the kernel to place it on the roofline").to_plotly_json()),
        # the tune job this page started or reattached to (app/services/tune_runs.py)
        dcc.Store(id="tune-job", storage_type="local"),
        dcc.Interval(id="tune-watch", interval=1000, disabled=True),
        # what the sizes and knobs belong to; the editor's header lines, seen last
        dcc.Store(id="op-loaded", data={**identity, "odl": library_text}),
        dcc.Store(id="odl-signature"), dcc.Store(id="tune-best"),
        html.Div(init["note"], id="studio-note", className="muted"),
        toolbar,
        html.Div([editor, kernel, knobs], className="studio-grid"),
        stages_panel(),  # Triton's compiler stages for a GPU target, under the kernel
        inspect,
        results,
    ])
