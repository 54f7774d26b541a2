"""Where the reason for an import inside a function is read: shared by tools/import_cycles.py
(a deferred import breaks no layer) and tools/deferred_imports.py (every such import says why)."""

from __future__ import annotations


def comment_above(lines: list[str], first: int) -> str | None:
    """The comment line right above the run of import lines (blank lines and parenthesised
    continuations between them too) that the import starting at line `first` (1-based) belongs
    to, stripped; None when the run has no comment above it."""
    above = first - 2
    while above >= 0:
        text = lines[above].strip()
        if not text or text.startswith(("from ", "import ")) or text.endswith(",") \
                or text in (")", "("):
            above -= 1
            continue
        return text if text.startswith("#") else None
    return None
