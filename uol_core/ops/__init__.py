"""The operator library: `.odl` files shipped with the package, found by name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from uol_core.odl.ir import Op
from uol_core.odl.parser import parse


def library_dir() -> Path:
    """Folder holding the library's `.odl` files."""
    return Path(str(resources.files(__package__)))


def list_ops() -> list[str]:
    """Names of every library operator, sorted."""
    return sorted(p.stem for p in library_dir().glob("*.odl"))


def op_path(name: str) -> Path:
    """Path of a library operator's file; raises KeyError with the known names."""
    path = library_dir() / f"{name}.odl"
    if not path.is_file():
        raise KeyError(f"no library operator '{name}'; known: {', '.join(list_ops())}")
    return path


def op_text(name: str) -> str:
    """The ODL text of a library operator."""
    return op_path(name).read_text()


def load_op(name: str) -> Op:
    """Parse a library operator by name."""
    path = op_path(name)
    return parse(path.read_text(), filename=path.name)
