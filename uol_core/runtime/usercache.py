"""The per-user cache: $UOL_CACHE_DIR, else $XDG_CACHE_HOME/uol, else ~/.cache/uol.

Generated code is imported from here, so nobody else may write into it (as pip and Triton keep
their caches): every folder we make is 0700 and ours, a folder someone else owns or can write is
refused, and an artefact is used only when it is ours, not writable by others, and its bytes are
the ones its name promises (`read_verified`). A shared temporary directory is never used: there a
predictable name lets another local user plant a file before we write it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

CACHE_ENV = "UOL_CACHE_DIR"
PRIVATE_MODE = 0o700
_JOB_PREFIX = "job-"


class UnsafeCacheError(PermissionError):
    """A cache folder or file that another user owns or may write: the message says how to fix it."""


def user_cache_root() -> Path:
    """$UOL_CACHE_DIR, else $XDG_CACHE_HOME/uol, else ~/.cache/uol (not created here)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # the XDG spec: a relative value is invalid and must be ignored
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "uol"


def _owner_problem(path: Path, st: os.stat_result) -> str | None:
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"{path} belongs to user id {st.st_uid}, not to you (id {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_private(path: Path) -> None:
    """Raise UnsafeCacheError unless `path` (a folder or file) is ours and nobody else may write it."""
    problem = _owner_problem(path, os.stat(path))
    if problem:
        raise UnsafeCacheError(f"unsafe cache: {problem}. Fix it (chown/chmod go-w) or point "
                               f"{CACHE_ENV} at a folder of your own.")


def _ensure_folder(path: Path, tighten: bool) -> Path:
    try:
        path.mkdir(mode=PRIVATE_MODE, parents=True)
    except FileExistsError:
        if not path.is_dir():
            raise UnsafeCacheError(f"unsafe cache: {path} exists and is not a folder") from None
    check_private(path)
    if tighten and stat.S_IMODE(os.stat(path).st_mode) != PRIVATE_MODE:
        os.chmod(path, PRIVATE_MODE)  # ours and not writable by others: make it unreadable too
    return path


def private_dir(*parts: str) -> Path:
    """The cache root / parts, each level created 0700 and checked (ours, not writable by others).

    The root itself is only checked when it exists (it may be a folder the user chose); the
    sub-folders belong to UOL alone and are tightened to 0700.
    """
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part:
            raise ValueError(f"bad cache folder name {part!r}")
    path = _ensure_folder(user_cache_root(), tighten=False)
    for part in parts:
        path = _ensure_folder(path / part, tighten=True)
    return path


def read_verified(path: Path, expected: bytes) -> bool:
    """True when `path` is a regular file of ours, not writable by others, holding `expected`.

    A symlink, a foreign or group/world-writable file, or other bytes give False (the caller
    then writes its own copy): what a cache name promises is checked, never trusted.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or _owner_problem(path, st):
        return False
    with open(path, "rb") as fh:
        return fh.read(len(expected) + 1) == expected


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step (readers never see half a file), mode 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # mkstemp: 0600, O_EXCL
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_jobs(root: Path) -> list[Path]:
    """Remove job folders of processes that are gone (a server stopped by kill -9); returns them."""
    removed = []
    for folder in root.glob(f"{_JOB_PREFIX}*"):
        pid_text = folder.name[len(_JOB_PREFIX):].split("-", 1)[0]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)) and folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def job_dir(kind: str = "jobs") -> Path:
    """A fresh private folder for this process's temporary job files, removed when it exits.

    Folders left by processes that died without cleaning up are removed first.
    """
    root = private_dir(kind)
    sweep_stale_jobs(root)
    folder = Path(tempfile.mkdtemp(prefix=f"{_JOB_PREFIX}{os.getpid()}-", dir=root))
    atexit.register(shutil.rmtree, folder, True)
    return folder
