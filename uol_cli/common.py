"""Shared pieces of the CLI: loading an op from a path or the library, and user-facing errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import typer

from uol_core.odl import OdlError, parse
from uol_core.odl.ir import Op
from uol_core.odl.shapes import ShapeError
from uol_core.ops import list_ops, op_path

F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def read_op(spec: str) -> tuple[Op, str, str]:
    """Load an op from a file path or a library name; returns (op, text, display name)."""
    path = Path(spec)
    if not path.is_file():
        if spec in list_ops():
            path = op_path(spec)
        else:
            raise UserError(f"no file '{spec}' and no library operator of that name "
                            "(see `uol ops list`)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {spec}: {err}") from None
    return parse(text, filename=str(spec)), text, str(spec)


def user_errors(*extra: type[BaseException]) -> Callable[[F], F]:
    """A decorator: ODL errors print compiler-style, user errors (and `extra` types) one line;
    both exit with status 2, never a traceback."""
    caught = (UserError, ShapeError, KeyError, *extra)

    def decorate(func: F) -> F:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except OdlError as err:
                print(err.render(), file=sys.stderr)
                raise typer.Exit(2) from None
            except caught as err:
                message = err.args[0] if err.args else str(err)
                print(f"error: {message}", file=sys.stderr)
                raise typer.Exit(2) from None

        return wrapper  # type: ignore[return-value]

    return decorate


friendly_errors = user_errors()


def print_json(data: Any) -> None:
    """Machine-readable output on stdout."""
    print(json.dumps(data, indent=2, default=str))
