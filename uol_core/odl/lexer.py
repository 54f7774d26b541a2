"""Tokenizer for ODL: names, numbers, punctuation, and line structure (newline, indentation)."""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.odl.errors import OdlError

MAX_SOURCE_BYTES = 100_000
DIGITS = "0123456789"  # str.isdigit also takes '²' and other scripts' digits, which float() refuses

# Longest first, so that `**` wins over `*` and `<=` over `<`.
PUNCTUATION = ("->", "**", "<=", ">=", "==", "!=", "(", ")", "[", "]", ",", ":", "+", "-",
               "*", "/", "<", ">", "=")


@dataclass(frozen=True)
class Token:
    """One token; `kind` is NAME, NUMBER, PUNCT, NEWLINE or EOF; `indented` marks a line start."""

    kind: str
    text: str
    line: int
    column: int
    indented: bool = False


def tokenize(text: str) -> list[Token]:
    """Split ODL text into tokens; newlines inside brackets do not end a statement."""
    if len(text.encode("utf-8", errors="replace")) > MAX_SOURCE_BYTES:
        raise OdlError(f"ODL text is larger than {MAX_SOURCE_BYTES} bytes", 1, 1,
                       "split the file into several operators")
    tokens: list[Token] = []
    depth = 0
    at_line_start = True
    for line_no, raw in enumerate(text.splitlines(), start=1):
        code = raw.split("#", 1)[0]
        col = 0
        line_first = True
        while col < len(code):
            ch = code[col]
            if ch in " \t\r\f":
                col += 1
                continue
            indented = line_first and at_line_start and col > 0
            start = col
            if _name_start(ch):
                while col < len(code) and _name_part(code[col]):
                    col += 1
                tokens.append(Token("NAME", code[start:col], line_no, start + 1, indented))
            elif ch in DIGITS or (ch == "." and col + 1 < len(code) and code[col + 1] in DIGITS):
                col = _scan_number(code, col, line_no)
                tokens.append(Token("NUMBER", code[start:col], line_no, start + 1, indented))
            else:
                punct = next((p for p in PUNCTUATION if code.startswith(p, col)), None)
                if punct is None:
                    raise OdlError(f"unexpected character {ch!r} (U+{ord(ch):04X})", line_no,
                                   col + 1, _hint_for(ch), source=text)
                col += len(punct)
                if punct in ("(", "["):
                    depth += 1
                elif punct in (")", "]"):
                    depth = max(depth - 1, 0)
                tokens.append(Token("PUNCT", punct, line_no, start + 1, indented))
            line_first = False
        if not line_first and depth == 0:
            tokens.append(Token("NEWLINE", "\n", line_no, len(code) + 1))
            at_line_start = True
        elif not line_first:
            at_line_start = False
    last_line = text.count("\n") + 1
    if tokens and tokens[-1].kind != "NEWLINE":
        tokens.append(Token("NEWLINE", "\n", last_line, 1))
    tokens.append(Token("EOF", "", last_line, 1))
    return tokens


def _name_start(ch: str) -> bool:
    """A name starts with an ASCII letter or '_' (names become C and Python identifiers)."""
    return ch.isascii() and (ch.isalpha() or ch == "_")


def _name_part(ch: str) -> bool:
    """Later characters of a name: ASCII letters, digits, '_'; `(name).isidentifier()` holds."""
    return ch.isascii() and (ch.isalnum() or ch == "_")


def _hint_for(ch: str) -> str:
    if not ch.isascii() and (ch.isidentifier() or ch.isdigit() or ch.isnumeric()):
        return ("names and numbers are ASCII: letters a-z A-Z, digits 0-9 and _ "
                "(write x**2, not x²)")
    return "ODL uses names, numbers and + - * / ** < <= > >= == != ( ) [ ] , : = ->"


def _scan_number(code: str, col: int, line_no: int) -> int:
    """Index just past a number literal starting at col (ASCII digits, fraction, exponent)."""
    n = len(code)
    while col < n and code[col] in DIGITS:
        col += 1
    if col < n and code[col] == ".":
        col += 1
        while col < n and code[col] in DIGITS:
            col += 1
    if col < n and code[col] in "eE":
        probe = col + 1
        if probe < n and code[probe] in "+-":
            probe += 1
        if probe < n and code[probe] in DIGITS:
            col = probe
            while col < n and code[col] in DIGITS:
                col += 1
    return col
