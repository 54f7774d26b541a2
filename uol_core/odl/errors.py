"""Errors of ODL: OdlError (bad text: where it is, what was expected, a hint), ShapeError
(concrete sizes that do not fit an op), and IndexOverflowError, both at once: integer
arithmetic of the text that leaves the integer range at the sizes bound."""

from __future__ import annotations


class OdlError(Exception):
    """A problem in ODL text, located at a line and column (1-based)."""

    def __init__(self, message: str, line: int = 0, column: int = 0, hint: str = "",
                 source: str = "", filename: str = "<odl>") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.hint = hint
        self.source = source
        self.filename = filename

    def __str__(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}{self.message}{hint}"

    def render(self) -> str:
        """Compiler-style text: file:line:col, the offending line and a caret under the column."""
        head = f"{self.filename}:{self.line}:{self.column}: error: {self.message}"
        lines = self.source.splitlines()
        out = [head]
        if 0 < self.line <= len(lines):
            text = lines[self.line - 1]
            out.append(f"    {text}")
            out.append("    " + " " * max(self.column - 1, 0) + "^")
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"message": self.message, "line": self.line, "column": self.column,
                "hint": self.hint, "filename": self.filename}


class ShapeError(ValueError):
    """Concrete sizes that do not fit an operator: names the tensor, the axis and the limit."""


class IndexOverflowError(OdlError, ShapeError):
    """Index or size arithmetic that can leave the kernels' integer range at the bound sizes:
    an OdlError at the expression's line and column, and a ShapeError (other sizes may fit)."""
