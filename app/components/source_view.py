"""Source listings for the Debugger and Profiler: one Pygments blob, lines marked or heat-coloured.

Deferred imports: what a panel or figure reads loads when first drawn, so the server starts fast.
"""

from __future__ import annotations

import html as _html
import re
from collections.abc import Mapping

from dash import clientside_callback, dcc, html
from dash.dependencies import Input, Output

from app.components.codeview import _lexer, code_host


def annotated_html(source: str, lang: str, pane: str, heat: Mapping[int, float] | None = None,
                   marks: Mapping[int, str] | None = None,
                   notes: Mapping[int, str] | None = None) -> str:
    """Highlighted source; line N is <span id="{pane}-N">, heat in [0,1] tints it, marks outline it.

    `marks` maps a line to a note (e.g. an out-of-bounds finding), `notes` a line to a tooltip.
    """
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    heat = dict(heat or {})
    marks = dict(marks or {})
    notes = dict(notes or {})
    out = highlight(source, _lexer(lang), HtmlFormatter(linenos="inline", linespans=pane))

    def tag(match: re.Match) -> str:
        line = int(match.group(1))
        attrs = [f'id="{pane}-{line}"']
        classes = []
        if line in marks:
            classes.append("marked-line")
            attrs.append(f'title="{_html.escape(marks[line], quote=True)}"')
        elif line in notes:
            attrs.append(f'title="{_html.escape(notes[line], quote=True)}"')
        if heat.get(line):
            attrs.append(f'style="background:rgba(214,39,40,{0.06 + 0.7 * heat[line]:.2f})"')
            classes.append("heat-line")
        if classes:
            attrs.append(f'class="{" ".join(classes)}"')
        return f"<span {' '.join(attrs)}>"

    return re.sub(rf'<span id="{re.escape(pane)}-(\d+)">', tag, out)


def source_pane(element_id: str, pane: str) -> html.Div:
    """A code host plus the store that paints it (see `annotated_html`); returns both in a Div."""
    return html.Div([code_host(element_id, pane), dcc.Store(id=f"{element_id}-html"),
                     html.Div(id=f"{element_id}-paint", style={"display": "none"})])


def register_painter(element_id: str) -> None:
    """Paint `{element_id}-html` ({html} or {note}) into the host on the client (no re-render)."""
    clientside_callback(
        f"""function (data) {{ return window.dash_clientside.odl.blob(data, "{element_id}"); }}""",
        Output(f"{element_id}-paint", "children"), Input(f"{element_id}-html", "data"))
