"""Can the sandbox's user read the interpreter, its libraries and the project?

A root server drops the sandbox to another user (a per-run uid or nobody), to whom only the
'other' permission bits apply. A Python installed under a 0700 home (pyenv in /root) is then
unreadable, and the first import that was not done before the switch fails with a confusing
`No module named 'importlib.readers'`. So before the switch the launcher checks the paths it
needs (`first_unreadable`, a function of the paths' modes alone, testable without root), and
where a folder above them blocks the way it exposes just those paths inside the sandbox's own
mount namespace (`expose`: a small tmpfs over the blocking folder, with the needed trees bound
back into it, read-only like everything else), which also hides the rest of that folder. If a
path stays unreadable the run is refused with one line saying why and how to fix it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from uol_core.runtime import sandbox_os

CODE_ROOT = Path(__file__).resolve().parents[2]


def needed_paths(private: Path) -> list[Path]:
    """The interpreter's trees, every import path, the project and the private folder: the
    outermost existing folders (one that lies inside another is covered by it)."""
    found = {Path(os.path.realpath(p)) for p in
             (sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix, CODE_ROOT,
              private, *sys.path) if p}
    found = {p for p in found if p.is_dir()}
    return sorted(p for p in found if not any(q != p and q in p.parents for q in found))


def sentinel_files() -> list[Path]:
    """Files inside the needed trees that the first lazy imports read."""

    return [Path(os.__file__), Path(importlib.__file__).parent / "readers.py"]


def _allows(info: os.stat_result, uid: int, gids: Iterable[int], bits: int) -> bool:
    """Does `info`'s mode give `uid`/`gids` every permission in `bits` (r=4, w=2, x=1)?
    Classic permission bits: the owner's if uid owns it, else the group's, else other's."""
    if info.st_uid == uid:
        granted = (info.st_mode >> 6) & 7
    elif info.st_gid in set(gids):
        granted = (info.st_mode >> 3) & 7
    else:
        granted = info.st_mode & 7
    return granted & bits == bits


def first_unreadable(paths: Iterable[Path], uid: int, gids: Iterable[int],
                     stat_fn: Callable[[Path], os.stat_result] = os.stat
                     ) -> tuple[Path, Path, int] | None:
    """The first path that `uid` cannot reach and read: (the path, the folder or file that
    blocks it, that one's mode); None when all can be read. Every folder on the way needs x,
    the path itself r (and x for a folder). Judged from the modes alone (not os.access, which
    asks for this process's real uid), so it answers for any user, as any user."""
    gids = list(gids)
    for path in paths:
        path = Path(os.path.abspath(path))
        chain = [*reversed(path.parents), path]
        for i, part in enumerate(chain):
            try:
                info = stat_fn(part)
            except OSError:
                return path, part, 0
            last = i == len(chain) - 1
            bits = (4 | (1 if stat.S_ISDIR(info.st_mode) else 0)) if last else 1
            if not _allows(info, uid, gids, bits):
                return path, part, stat.S_IMODE(info.st_mode)
    return None


def _blocking_folder(path: Path, uid: int, gids: list[int]) -> Path | None:
    """The highest folder above `path` that `uid` may not enter (None: all can be entered)."""
    for folder in reversed(path.parents):
        try:
            if not _allows(os.stat(folder), uid, gids, 1):
                return folder
        except OSError:
            return None
    return None


def blocked_on_the_way(path: Path, uid: int, gids: list[int]) -> tuple[Path, Path, int] | None:
    """Like `first_unreadable` for a folder `uid` will own: only the folders above it count."""
    folder = _blocking_folder(path, uid, gids)
    return (path, folder, stat.S_IMODE(os.stat(folder).st_mode)) if folder else None


def unreadable_message(who: str, path: Path, blocker: Path, mode: int) -> str:
    """One line: who cannot read what, because of which folder, and how to fix it."""
    fix = (f"chmod o+x {blocker}" if blocker != path and blocker in path.parents
           else f"chmod -R o+rX {blocker}")
    return (f"the sandbox user {who} cannot read {path} ({blocker} is mode {mode:04o}): "
            f"install Python and the project where other users can read them, or run '{fix}'")


def expose(paths: list[Path], uid: int, gids: list[int]) -> str:
    """In this (new, private) mount namespace, make each needed path reachable for `uid` when
    a folder above it blocks the way: a tmpfs (mode 0755) over the highest blocking folder,
    the folders down to the path made in it, and the path bound back from its original.
    Returns a line for the isolation report ('' when nothing was blocked)."""
    plan: dict[Path, list[Path]] = {}
    for path in paths:
        blocker = _blocking_folder(path, uid, gids)
        if blocker is not None:
            plan.setdefault(blocker, []).append(path)
    covered: list[Path] = []
    umask = os.umask(0o022)  # the folders made in the tmpfs must be 0755
    try:
        for blocker in sorted(plan, key=lambda b: len(b.parts)):
            if blocker == Path("/") or any(c in blocker.parents for c in covered):
                continue
            if problem := _cover(blocker, plan[blocker]):
                return problem
            covered.append(blocker)
    finally:
        os.umask(umask)
    if not covered:
        return ""
    shown = ", ".join(str(p) for b in covered for p in plan[b])
    return (f"reach: {', '.join(map(str, covered))} hidden from the sandbox, except "
            f"{shown} (read-only), which its user could not reach otherwise")


def _cover(blocker: Path, inside: list[Path]) -> str:
    """tmpfs over `blocker`, then each path of `inside` bound back (opened before the cover)."""
    handles = [os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in inside]
    try:
        if sandbox_os.mount_tmpfs(blocker, 1, 4096, mode="755"):
            return f"reach: {blocker} blocks the sandbox user and could not be covered"
        for path, handle in zip(inside, handles, strict=True):
            path.mkdir(parents=True, exist_ok=True)
            if sandbox_os.bind(f"/proc/self/fd/{handle}", path):
                return f"reach: {path} could not be bound back for the sandbox user"
        return ""
    finally:
        for handle in handles:
            with contextlib.suppress(OSError):
                os.close(handle)
