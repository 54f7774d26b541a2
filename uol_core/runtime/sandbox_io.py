"""The parent's side of a sandboxed run's output: everything the child sends is untrusted data.

- stdout and stderr are read with a cap (`STREAM_CAP` each): the first part and a short tail
  are kept, the rest is read and dropped (and counted), so a flood never grows the server;
- results come only from the channel (`sandbox_channel`), capped in total, one per run,
  validated against a schema (types and sizes) before anyone looks at them;
- files are copied back only when they are regular files of one link, opened with
  O_NOFOLLOW | O_NONBLOCK (a FIFO cannot block the copy, a link is never followed), within a
  size checked before reading and again while reading.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STREAM_CAP = 1 << 20  # bytes kept of stdout and of stderr, each
STREAM_TAIL = 16 << 10  # of which the last bytes (a traceback ends the output)
CHANNEL_CAP = 8 << 20  # all messages of one run together
MAX_REFUSALS = 20
POLL_S = 0.2  # how often the watchers look while the run goes on
EXIT_GRACE_S = 0.5  # after the launcher exits, how long its pipes may stay open (a child of it)


class CappedBuffer:
    """Keeps the first `cap - tail` bytes and the last `tail` bytes; counts the rest."""

    def __init__(self, cap: int = STREAM_CAP, tail: int = STREAM_TAIL) -> None:
        self.head_cap, self.tail_cap = cap - tail, tail
        self.head, self.tail = bytearray(), bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                cut = len(self.tail) - self.tail_cap
                self.dropped += cut
                del self.tail[:cut]

    def text(self) -> str:
        note = (f"\n[... {self.dropped} bytes dropped: the sandbox's output is capped at "
                f"{(self.head_cap + self.tail_cap) >> 20} MiB ...]\n" if self.dropped else "")
        return self.head.decode(errors="replace") + note + self.tail.decode(errors="replace")


class ChannelReader:
    """The channel's JSON lines, up to `CHANNEL_CAP` bytes in all; past it, `overflow`."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.partial = bytearray()
        self.received = 0
        self.overflow = False
        self.malformed = 0

    def feed(self, data: bytes) -> None:
        self.received += len(data)
        if self.overflow or self.received > CHANNEL_CAP:
            self.overflow, self.partial = True, bytearray()
            return
        self.partial += data
        *lines, rest = self.partial.split(b"\n")
        self.partial = bytearray(rest)
        for line in lines:
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                self.malformed += 1
                continue
            if isinstance(message, dict) and isinstance(message.get("kind"), str):
                self.messages.append(message)
            else:
                self.malformed += 1

    def isolation(self) -> list[str] | None:
        """The launcher's report: only ever the first message (sent before user code runs)."""
        if not self.messages or self.messages[0]["kind"] != "isolation":
            return None
        lines = self.messages[0].get("value")
        if not (isinstance(lines, list) and all(isinstance(x, str) for x in lines)):
            return None
        return [line[:300] for line in lines[:40]]

    def refused(self) -> list[str]:
        return [str(m.get("value"))[:300] for m in self.messages
                if m["kind"] == "refused"][:MAX_REFUSALS]

    def results(self) -> list:
        return [m.get("value") for m in self.messages if m["kind"] == "result"]


@dataclass
class Outcome:
    """What a run sent and how it ended (before the parent cleans up)."""

    stdout: CappedBuffer = field(default_factory=CappedBuffer)
    stderr: CappedBuffer = field(default_factory=CappedBuffer)
    channel: ChannelReader = field(default_factory=ChannelReader)
    wall_hit: bool = False
    stopped: str | None = None  # a watcher's reason for stopping the run


def pump(proc: subprocess.Popen, request: bytes, channel_fd: int, deadline: float,
         on_ready: Callable[[], None], watch: Callable[[], str | None]) -> Outcome:
    """Read stdout, stderr and the channel until the launcher is gone and its pipes are closed
    (or EXIT_GRACE_S after it exited: something it started still holds them), the wall-clock
    deadline passes, or `watch` names a reason to stop. The request goes to stdin only after
    the launcher's isolation message, once `on_ready` (the parent's own limits) has run."""
    out = Outcome()
    sinks = {proc.stdout.fileno(): out.stdout.feed, proc.stderr.fileno(): out.stderr.feed,
             channel_fd: out.channel.feed}
    selector = selectors.DefaultSelector()
    for fd in sinks:
        selector.register(fd, selectors.EVENT_READ)
    stdin_fd, pending, ready = proc.stdin.fileno(), memoryview(request), False
    exited_at, next_watch = None, 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                out.wall_hit = True
                break
            if proc.poll() is not None:
                exited_at = exited_at or now
                if not sinks or now - exited_at > EXIT_GRACE_S:
                    break
            for key, _ in selector.select(min(POLL_S, max(deadline - now, 0.0))):
                if key.fd == stdin_fd:
                    pending = _write_some(stdin_fd, pending)
                    if not pending:
                        selector.unregister(stdin_fd)
                        proc.stdin.close()
                    continue
                data = _read_some(key.fd)
                if data:
                    sinks[key.fd](data)
                else:
                    selector.unregister(key.fd)
                    del sinks[key.fd]
            if not ready and out.channel.isolation() is not None:
                ready = True
                on_ready()
                os.set_blocking(stdin_fd, False)
                selector.register(stdin_fd, selectors.EVENT_WRITE)
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + POLL_S
                out.stopped = watch()
                if out.stopped:
                    break
    finally:
        selector.close()
    return out


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _write_some(fd: int, pending: memoryview) -> memoryview:
    try:
        return pending[os.write(fd, pending[:1 << 16]):]
    except BlockingIOError:
        return pending
    except OSError:  # the child closed stdin or is gone: the rest of the request is moot
        return pending[len(pending):]


def drain(proc: subprocess.Popen, channel_fd: int, out: Outcome, seconds: float = 1.0) -> None:
    """After the run was stopped: read what is left in the pipes (capped as before), briefly."""
    sinks = {proc.stdout.fileno(): out.stdout.feed, proc.stderr.fileno(): out.stderr.feed,
             channel_fd: out.channel.feed}
    with selectors.DefaultSelector() as selector:
        for fd in sinks:
            selector.register(fd, selectors.EVENT_READ)
        end = time.monotonic() + seconds
        while sinks and time.monotonic() < end:
            for key, _ in selector.select(max(end - time.monotonic(), 0.0)):
                data = _read_some(key.fd)
                if data:
                    sinks[key.fd](data)
                else:
                    selector.unregister(key.fd)
                    del sinks[key.fd]


# ------------------------------------------------------------------ results

ANY = object()  # a schema leaf that accepts any JSON value
MAX_DEPTH = 32


def check(value: object, spec: object, where: str = "result", depth: int = 0) -> str | None:
    """None when `value` fits `spec`, else where it does not. A spec is a type (float accepts
    int; int refuses bool), a tuple of specs (any of them), [item spec], {key: spec} (keys
    ending in '?' optional, '*' for every other key; other keys refused), or ANY."""
    if depth > MAX_DEPTH:
        return f"{where} is nested too deeply"
    if spec is ANY:
        return None
    if isinstance(spec, tuple):
        return None if any(check(value, s, where, depth) is None for s in spec) else \
            f"{where} has the wrong type ({type(value).__name__})"
    if isinstance(spec, type):
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) if spec is float
              else isinstance(value, int) and not isinstance(value, bool) if spec is int
              else isinstance(value, spec))
        return None if ok else f"{where} is {type(value).__name__}, not {spec.__name__}"
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} is {type(value).__name__}, not a list"
        return next((err for i, item in enumerate(value)
                     if (err := check(item, spec[0], f"{where}[{i}]", depth + 1))), None)
    if isinstance(spec, dict):
        return _check_dict(value, spec, where, depth)
    raise TypeError(f"bad schema node {spec!r}")


def _check_dict(value: object, spec: dict, where: str, depth: int) -> str | None:
    if not isinstance(value, dict):
        return f"{where} is {type(value).__name__}, not an object"
    fields = {k.rstrip("?"): (s, k.endswith("?")) for k, s in spec.items() if k != "*"}
    for key, (sub, optional) in fields.items():
        if key not in value:
            if not optional:
                return f"{where} has no '{key}'"
            continue
        if err := check(value[key], sub, f"{where}.{key}", depth + 1):
            return err
    for key, item in value.items():
        if key in fields:
            continue
        if "*" not in spec:
            return f"{where} has an unexpected key {str(key)[:40]!r}"
        if err := check(item, spec["*"], f"{where}.{str(key)[:40]}", depth + 1):
            return err
    return None


RESULT_SPEC = {"ok": bool, "error?": str, "*": ANY}


def accept_result(channel: ChannelReader, schema: object | None) -> tuple[dict | None, str]:
    """(the result, '') when one was accepted, (None, why) when it was refused, (None, '')
    when the run sent none."""
    if channel.overflow:
        return None, (f"the sandboxed worker sent more than {CHANNEL_CAP >> 20} MiB of results; "
                      f"none was accepted")
    results = channel.results()
    if not results:
        return None, ""
    if len(results) > 1:
        return None, (f"the sandboxed worker sent {len(results)} results where one is expected; "
                      f"none was accepted")
    value = results[0]
    err = check(value, RESULT_SPEC)
    if err is None and value.get("ok") and schema is not None:
        err = check(value, schema)
    if err:
        return None, f"the sandboxed worker's result was malformed: {err}"
    return value, ""


# ------------------------------------------------------------------ files


def copy_back(private: Path, keep: dict[str, Path], max_bytes: int) -> list[str]:
    """Copy the named files out of `private`; returns a note per file left behind and why.
    The run's processes are all gone by now, so nothing changes a file while it is copied."""
    notes = []
    for name, dest in keep.items():
        if not name or "/" in name or name in (".", ".."):
            notes.append(f"{name!r}: not a plain file name")
            continue
        try:
            fd = os.open(private / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:  # ELOOP: a symbolic link, never followed
            notes.append(f"{name}: not copied back ({exc.strerror})")
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                notes.append(f"{name}: not copied back (not a regular file of one link)")
            elif info.st_size > max_bytes:
                notes.append(f"{name}: not copied back ({info.st_size} bytes, over the "
                             f"{max_bytes >> 20} MiB a kept file may have)")
            elif not _copy_fd(fd, Path(dest), max_bytes):
                notes.append(f"{name}: not copied back (it grew past {max_bytes >> 20} MiB)")
        finally:
            os.close(fd)
    return notes


def _copy_fd(src: int, dest: Path, max_bytes: int) -> bool:
    """Copy at most `max_bytes` into a fresh file next to `dest`, then rename it into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.part")
    out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o600)
    copied, ok = 0, True
    try:
        while chunk := os.read(src, 1 << 20):
            copied += len(chunk)
            if copied > max_bytes:
                ok = False
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    finally:
        os.close(out)
    if ok:
        os.replace(part, dest)
    else:
        with contextlib.suppress(OSError):
            os.unlink(part)
    return ok
