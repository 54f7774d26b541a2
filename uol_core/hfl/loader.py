"""Find, read and validate HFL target files; `host` comes from the cached host probe."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser under its PyPI name
    import tomli as tomllib  # type: ignore[no-redef]

from uol_core.hfl.schema import HflError, Target, validate

TARGETS_DIR = Path(__file__).parent / "targets"
HOST = "host"


def list_targets() -> list[str]:
    """Names of every shipped target, plus 'host' (probed and cached on first use)."""
    return [*sorted(p.stem for p in TARGETS_DIR.glob("*.toml")), HOST]


def load_file(path: str | Path) -> Target:
    """Read and validate one target TOML file; errors name the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HflError(path.name, "", f"cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise HflError(path.name, "", f"TOML syntax error: {exc}") from None
    target = validate(data, path.name)
    if target.name != path.stem:
        raise HflError(path.name, "name", f"expected '{path.stem}' (the file name), "
                                          f"got '{target.name}'")
    return target


def load_target(name: str) -> Target:
    """The target called `name`; 'host' runs the quick probe once per machine, then is cached."""
    if target_name(name) == HOST:
        from uol_core.hfl.probe import probe_host  # lazy: the probe needs gcc

        return probe_host(quick=True)
    return load_file(TARGETS_DIR / f"{name}.toml")


def target_name(name: object) -> str:
    """`name` when the library lists it, else HflError naming the known targets.

    A name, never a path: only names the library lists are joined to its folder, so
    '../../pyproject' or '/etc/x' reads nothing (a file of your own: `load_file`). Services
    call it before they start any work for a target a client named."""
    known = list_targets()
    if not isinstance(name, str) or name not in known:
        shown = repr(name)[:80]  # a client's text, echoed short
        raise HflError("targets", "", f"no target named {shown}; known targets: "
                                      f"{', '.join(known)}")
    return name
