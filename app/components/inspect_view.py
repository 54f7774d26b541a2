"""The Studio's inspection panes as HTML blobs: the assembly listing (rows tied to C and ODL lines)
and a side-by-side diff of two generated kernels.

Both are painted by assets/odl_editor.js (`odl.blob`), as the kernel pane is: one blob renders
at once where thousands of components would not. Every piece of text is escaped here.
"""

from __future__ import annotations

import difflib
import html

from app.components.codeview import colour_of

MAX_DIFF_ROWS = 1500  # side-by-side rows shown; the rest is counted
CONTEXT = 3  # equal lines kept around each change


def asm_html(rows: list, pane: str = "a") -> str:
    """One <span> per listing row: `data-cline` (the C line) links it to the kernel pane,
    `data-odl` (the ODL line) to the editor and the kernel lines of the same statement."""
    out = []
    for i, row in enumerate(rows, 1):
        text = html.escape(row.text)
        if row.function:
            out.append(f'<span id="{pane}-{i}" class="asm-fn">{text}</span>')
            continue
        attrs = [f'id="{pane}-{i}"']
        classes = ["asm-row"]
        where = f"kernel.c:{row.c_line}" if row.c_line else "no C line"
        if row.c_line:
            attrs.append(f'data-cline="{row.c_line}"')
        if row.odl_line:
            attrs.append(f'data-odl="{row.odl_line}"')
            classes += ["mapped", colour_of(row.odl_line)]
            where += f" · ODL line {row.odl_line}"
        if row.inlined_from:
            where += f" · inlined from {row.inlined_from}"
        attrs.append(f'title="{html.escape(where, quote=True)}"')
        attrs.append(f'class="{" ".join(classes)}"')
        address = html.escape(row.address.rjust(5))
        line = f"{row.c_line:>4}" if row.c_line else "    "
        out.append(f'<span {" ".join(attrs)}><span class="linenos">{address} {line}</span>'
                   f"{text}</span>")
    return '<div class="highlight"><pre>' + "\n".join(out) + "\n</pre></div>"


def diff_rows(before: str, after: str, context: int = CONTEXT) -> tuple[list[tuple], dict]:
    """Side-by-side rows (kind, left line no, left text, right line no, right text) of two
    texts, long equal runs folded to `context` lines either side; and counts of the change."""
    a, b = before.splitlines(), after.splitlines()
    rows: list[tuple] = []
    stats = {"added": 0, "removed": 0, "changed": 0, "same": 0}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            stats["same"] += i2 - i1
            head = context if rows else 0  # no change before: nothing to give context to
            tail = context if i2 < len(a) else 0  # no change after
            shift = j1 - i1  # an equal run's line k on the left is line k + shift on the right
            same = lambda k, d=shift: ("same", k + 1, a[k], k + d + 1, b[k + d])  # noqa: E731
            if i2 - i1 > head + tail + 1:
                rows += [same(k) for k in range(i1, i1 + head)]
                rows.append(("fold", 0, f"{i2 - i1 - head - tail} equal lines", 0, ""))
                rows += [same(k) for k in range(i2 - tail, i2)]
            else:
                rows += [same(k) for k in range(i1, i2)]
            continue
        left, right = list(range(i1, i2)), list(range(j1, j2))
        stats["removed" if tag == "delete" else "added" if tag == "insert" else "changed"] += \
            max(len(left), len(right))
        for k in range(max(len(left), len(right))):
            li = left[k] if k < len(left) else None
            ri = right[k] if k < len(right) else None
            rows.append((tag, li + 1 if li is not None else 0, a[li] if li is not None else "",
                         ri + 1 if ri is not None else 0, b[ri] if ri is not None else ""))
    return rows, stats


def diff_html(before: str, after: str, labels: tuple[str, str],
              limit: int = MAX_DIFF_ROWS) -> tuple[str, dict]:
    """A two-column table of the kernels' lines: removed (left) red, added (right) green,
    changed on both sides; folded equal runs say how many lines they hide."""
    rows, stats = diff_rows(before, after)
    stats["rows"] = len(rows)
    head = "".join(f'<th colspan="2">{html.escape(label)}</th>' for label in labels)
    body = []
    for kind, ln, left, rn, right in rows[:limit]:
        if kind == "fold":
            body.append(f'<tr class="fold"><td colspan="4">⋯ {html.escape(left)} ⋯</td></tr>')
            continue
        lcls = {"replace": "chg", "delete": "del"}.get(kind, "")
        rcls = {"replace": "chg", "insert": "add"}.get(kind, "")
        body.append(f'<tr><td class="ln">{ln or ""}</td><td class="{lcls}">{html.escape(left)}'
                    f'</td><td class="ln">{rn or ""}</td><td class="{rcls}">'
                    f"{html.escape(right)}</td></tr>")
    if len(rows) > limit:
        body.append(f'<tr class="fold"><td colspan="4">⋯ {len(rows) - limit} more rows not '
                    f"shown (the diff is capped at {limit} rows) ⋯</td></tr>")
    cols = '<colgroup><col class="ln"><col><col class="ln"><col></colgroup>'
    table = (f'<table class="side-diff">{cols}<thead><tr>{head}</tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table>')
    return table, stats
