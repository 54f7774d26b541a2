"""Code panes as one Pygments HTML blob with a span per line, coloured by the kernel->ODL map.

One blob instead of a component per token: a 300-line listing as components took 74 s to
render; as one blob it is instant. Hover mapping is done by assets/codemap.js on the spans.
"""

from __future__ import annotations

import re

from dash import html
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer, bygroups
from pygments.lexers import get_lexer_by_name
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, Text

PALETTE_SIZE = 8  # colour classes map-c0 .. map-c7 in assets/theme.css


class OdlLexer(RegexLexer):
    """ODL tokens: `op`, types, reductions and functions, numbers, comments."""

    name = "ODL"
    aliases = ["odl"]
    tokens = {"root": [
        (r"#.*$", Comment.Single),
        (r"\b(op)(\s+)([A-Za-z_]\w*)", bygroups(Keyword, Text, Name.Function)),
        (r"\b(f16|bf16|f32|f64|i32|i8|bool)\b", Keyword.Type),
        (r"\b(sum|max|min|mean|prod|cumsum|cumprod|cummax)(?=\[)", Name.Builtin),
        (r"\b(exp|log|sqrt|rsqrt|tanh|sigmoid|relu|gelu|gelu_tanh|silu|abs|erf|sin|cos|floor|ceil|pow|"
         r"where|pad|max|min)(?=\()", Name.Builtin),
        (r"(?<=\])(\s+)(aliases)\b", bygroups(Text, Keyword)),  # `Y: f32[N] aliases X`
        (r"\b(and|or|not)\b", Operator.Word),
        (r"\d+\.?\d*([eE][-+]?\d+)?", Number),
        (r"->|\*\*|<=|>=|==|!=|[-+*/<>=]", Operator),
        (r"[\[\](),:]", Punctuation),
        (r"[A-Za-z_]\w*", Name),
        (r"\s+", Text),
    ]}


def _lexer(lang: str):
    if lang == "odl":
        return OdlLexer()
    return get_lexer_by_name({"triton": "python", "c": "c"}.get(lang, lang))


def colour_of(odl_line: int) -> str:
    """The colour class shared by an ODL line and the kernel lines it produced."""
    return f"map-c{odl_line % PALETTE_SIZE}"


def code_html(source: str, lang: str, pane: str, line_to_odl: dict[int, int],
              plain: frozenset[int] = frozenset()) -> str:
    """Highlighted HTML; each line is <span id="{pane}-N" data-odl=".." class="map-cK">.

    Lines mapped to an ODL line in `plain` (the `op` signature: set-up code) stay uncoloured,
    so the colours point at the statements.
    """
    fmt = HtmlFormatter(linenos="inline", linespans=pane, nowrap=False)
    out = highlight(source, _lexer(lang), fmt)

    def tag(match: re.Match) -> str:
        line = int(match.group(1))
        odl = line_to_odl.get(line)
        if not odl:
            return match.group(0)
        colour = "sig" if odl in plain else colour_of(odl)
        return f'<span id="{pane}-{line}" data-odl="{odl}" class="mapped {colour}">'

    return re.sub(rf'<span id="{re.escape(pane)}-(\d+)">', tag, out)


def code_host(element_id: str, pane: str) -> html.Div:
    """The element a code blob is painted into by assets/odl_editor.js (Dash never re-renders it).

    dcc.Markdown drops raw HTML blocks that contain blank lines (CommonMark ends an HTML
    block there), and kernels have blank lines; so the blob goes in as innerHTML instead.
    Pygments escapes the source text, so the blob holds no user-controlled markup.
    """
    return html.Div(id=element_id, className="code-blob", **{"data-pane": pane})


def odl_map(kernel_map: dict[int, int]) -> dict[int, int]:
    """ODL line -> itself for every ODL line some kernel line implements (for the ODL pane)."""
    return {odl: odl for odl in set(kernel_map.values())}
