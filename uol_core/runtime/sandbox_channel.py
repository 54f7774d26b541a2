"""The sandbox's result channel, child side: one pipe, separate from stdout and stderr.

The parent (`run_sandboxed`) passes the pipe's write end to the launcher, which attaches it
here before any code it did not write runs. Whatever the run prints (the user's `print`, a
library's log line, a traceback) goes to stdout/stderr, which the parent reads only as capped
text: a result line printed there is never taken for a result. Messages are JSON lines:
{"kind": "isolation" | "refused" | "result", "value": ...}.

What this channel does not do: code running in the sandboxed process can write to the pipe
too (it is the same process, so it can find the descriptor). The parent therefore takes the
first message only as the launcher's isolation report (it is sent before user code runs),
accepts exactly one result (two are refused, so a forged result never replaces the real one),
and validates that result's types and sizes as data from an untrusted process.
"""

from __future__ import annotations

import json
import os

_channel_fd: int | None = None


def attach(fd: int) -> None:
    """Use `fd` (the pipe the parent passed) for this process's messages; not inherited by
    programs it starts."""
    global _channel_fd
    os.set_inheritable(fd, False)
    _channel_fd = fd


def attached() -> bool:
    """True inside a sandboxed run (the launcher attached the channel)."""
    return _channel_fd is not None


def send(kind: str, value: object) -> None:
    """Write one message (a JSON line); a closed pipe (the parent gone) is ignored."""
    if _channel_fd is None:
        raise RuntimeError("no sandbox channel is attached (not running in the sandbox)")
    data = memoryview((json.dumps({"kind": kind, "value": value}, default=str) + "\n").encode())
    try:
        while data:
            data = data[os.write(_channel_fd, data):]
    except BrokenPipeError:
        pass


def send_result(result: dict) -> None:
    """The run's one result: the parent accepts exactly one per run."""
    send("result", result)
