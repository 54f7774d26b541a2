"""Per-client job queue in front of a worker pool sized to the cores.

Every run, trace and tune measurement takes, in order: a waiting ticket of its client (at most
MAX_WAITING per client, so one client cannot pile up work), the client's own lock (one job at
a time per client: a hang blocks only its owner), then one of `pool_size()` worker slots.
The locks are `flock` files in a private directory, so the server's threads and the
background-callback processes (tunes) share one queue; a process that dies releases its locks.
Compiles queue the same way in a lane of their own (COMPILE: their own client locks and
slots), so a compile never waits behind a run of its client, and a run never behind compiles.
A job that has not started yet is dropped when its client left (`request_left`).

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCAL_CLIENT = "local"  # the CLI and tests: one client
MAX_WAITING = 4  # jobs one client may have waiting behind its running one
QUEUE_WAIT_S = 600.0  # a job that cannot start within this long is refused
POLL_S = 0.05
CLIENT_COOKIE = "uol_client"
COMPILE = "compile"  # the lane of compiles (job_slot's `lane`); "" is runs, traces and tunes


class JobRefused(RuntimeError):
    """The job was not started (queue full, waited too long, a tune already running)."""


def pool_size() -> int:
    """Worker slots: the cores this process may use ($UOL_WORKERS overrides), at least two so a
    hanging job leaves a slot for everyone else."""
    if os.environ.get("UOL_WORKERS"):
        return max(1, int(os.environ["UOL_WORKERS"]))
    return max(2, len(os.sched_getaffinity(0)))


def _lock_dir() -> Path:
    """A folder only this user may write: $UOL_JOB_DIR (made 0700), else the per-user cache's."""
    from uol_core.runtime.usercache import check_private, private_dir

    if not os.environ.get("UOL_JOB_DIR"):
        return private_dir("job-slots")
    path = Path(os.environ["UOL_JOB_DIR"])
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_private(path)
    return path


def _client_key(client: str) -> str:
    return hashlib.sha256(client.encode()).hexdigest()[:16]


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the description drops the flock


def _first_free(paths: list[Path]) -> tuple[int, int] | None:
    for index, path in enumerate(paths):
        fd = _try_lock(path)
        if fd is not None:
            return index, fd
    return None


def _wait_for(paths: list[Path], deadline: float, what: str, wait_s: float = QUEUE_WAIT_S,
              abandoned: Callable[[], bool] | None = None) -> tuple[int, int]:
    while True:
        got = _first_free(paths)
        if got is not None:
            return got
        if abandoned is not None and abandoned():
            raise JobRefused(f"{what} dropped before it started: the client left")
        if time.monotonic() > deadline:
            raise JobRefused(f"{what} could not start within {wait_s:.0f} s: every worker "
                             "stayed busy; try again later")
        time.sleep(POLL_S)


def _slot_name(lane: str, index: int) -> str:
    return f"{lane}-slot-{index}" if lane else f"slot-{index}"


@contextmanager
def job_slot(client: str, what: str = "job", wait_s: float = QUEUE_WAIT_S, lane: str = "",
             abandoned: Callable[[], bool] | None = None) -> Iterator[int]:
    """Hold a worker slot for `client` (waiting behind the client's own running job first);
    yields the slot index, which names the worker process this job may use. `lane` (COMPILE)
    queues in a lane of its own; `abandoned()` true while waiting drops the job (JobRefused)."""
    folder, key = _lock_dir(), _client_key(client)
    own_name = f"client-{key}.{lane}" if lane else f"client-{key}"
    ticket = _first_free([folder / f"{own_name}.wait{i}" for i in range(MAX_WAITING)])
    if ticket is None:
        raise JobRefused(f"{what} refused: you already have {MAX_WAITING} jobs waiting behind "
                         "a running one; wait for them (or cancel) first")
    deadline = time.monotonic() + wait_s
    own = slot = None
    try:
        _, own = _wait_for([folder / f"{own_name}.run"], deadline, what, wait_s, abandoned)
        index, slot = _wait_for([folder / _slot_name(lane, i) for i in range(pool_size())],
                                deadline, what, wait_s, abandoned)
        _release(ticket[1])
        ticket = None
        yield index
    finally:
        _release(slot)
        _release(own)
        if ticket is not None:
            _release(ticket[1])


@contextmanager
def only_one(client: str, kind: str) -> Iterator[None]:
    """At most one `kind` (e.g. tune) per client at a time; a second is refused at once."""
    fd = _try_lock(_lock_dir() / f"client-{_client_key(client)}.{kind}")
    if fd is None:
        raise JobRefused(f"a {kind} of yours is already running: cancel it or wait for it")
    try:
        yield
    finally:
        _release(fd)


@contextmanager
def slot_held(index: int, wait_s: float = QUEUE_WAIT_S) -> Iterator[None]:
    """Hold worker slot `index` itself (waiting while a job uses it): for stopping or
    restarting that slot's worker process while no job can be using it."""
    _, fd = _wait_for([_lock_dir() / f"slot-{index}"], time.monotonic() + wait_s,
                      f"worker slot {index}")
    try:
        yield
    finally:
        _release(fd)


def busy_slots(lane: str = "") -> int:
    """How many worker slots of `lane` are held now (for status displays and tests)."""
    folder, held = _lock_dir(), 0
    for i in range(pool_size()):
        fd = _try_lock(folder / _slot_name(lane, i))
        if fd is None:
            held += 1
        _release(fd)
    return held


def client_id() -> str:
    """The calling browser's id inside a Dash callback (also a background one): its
    `uol_client` cookie, else its session cookie (named per port), else the local client."""
    try:
        from dash import callback_context

        cookies = callback_context.cookies or {}
        headers = callback_context.headers or {}
    except Exception:  # outside a callback (CLI, tests)
        return LOCAL_CLIENT
    from app.security import cookie_name

    host = headers.get("Host") or headers.get("host") or ""
    return cookies.get(CLIENT_COOKIE) or cookies.get(cookie_name(host)) or LOCAL_CLIENT


# The peer closed (or reset) the connection: POLLRDHUP is Linux's "read side hung up", set on
# TLS connections too, and not by a browser sending its next request on a kept-alive one.
_LEFT_EVENTS = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR | select.POLLNVAL


def request_left() -> Callable[[], bool] | None:
    """A test that the HTTP client of the current request has closed its connection (it left
    the page, or its browser dropped the request), for the request's own thread to call while
    it works; None outside a request or where the server does not expose the connection
    (Werkzeug's, which `uol serve` runs, does)."""
    try:
        from flask import has_request_context, request
    except ImportError:  # the CLI without the IDE's extras
        return None
    if not has_request_context():
        return None
    conn = request.environ.get("werkzeug.socket")
    fileno = getattr(conn, "fileno", None)
    if fileno is None or fileno() < 0:
        return None
    poller = select.poll()
    poller.register(fileno(), select.POLLIN | _LEFT_EVENTS)

    def left() -> bool:
        return any(events & _LEFT_EVENTS for _, events in poller.poll(0))

    return left


def install(app) -> None:
    """Give each browser a random `uol_client` cookie, so its jobs queue separately; a refused
    request (401/403: no token) gets none, so nothing is handed out before the token."""
    import secrets

    from flask import request

    @app.server.after_request
    def _tag_client(response):
        if CLIENT_COOKIE not in request.cookies and response.status_code not in (401, 403):
            response.set_cookie(CLIENT_COOKIE, secrets.token_urlsafe(16), httponly=True,
                                samesite="Strict", secure=request.is_secure)
        return response
