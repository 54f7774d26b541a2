"""The operator library: `.odl` files shipped with the package, found by name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from uol_core.odl.ir import Op
from uol_core.odl.parser import parse


class UnknownOp(KeyError):
    """A name that is not a library operator (a KeyError, so callers that caught one still do)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown operator"


def library_dir() -> Path:
    """Folder holding the library's `.odl` files."""
    return Path(str(resources.files(__package__)))


def list_ops() -> list[str]:
    """Names of every library operator, sorted."""
    return sorted(p.stem for p in library_dir().glob("*.odl"))


def library_name(name: object) -> str:
    """`name` itself when it names a library operator; else UnknownOp with the known names.

    The name is looked up in the closed set `list_ops()` before any path is made, so a name a
    client sent (`../../etc/shadow`, an absolute path, a name with a NUL) never reaches the
    file system: not to read it, and not to learn whether it exists."""
    known = list_ops()
    if not isinstance(name, str) or name not in known:
        shown = repr(name)[:80]  # a client's text, echoed short
        raise UnknownOp(f"no library operator {shown}; known: {', '.join(known)}")
    return name


def op_path(name: str) -> Path:
    """Path of a library operator's file; raises UnknownOp (a KeyError) with the known names."""
    return library_dir() / f"{library_name(name)}.odl"


def op_text(name: str) -> str:
    """The ODL text of a library operator."""
    return op_path(name).read_text()


def load_op(name: str) -> Op:
    """Parse a library operator by name."""
    path = op_path(name)
    return parse(path.read_text(), filename=path.name)
