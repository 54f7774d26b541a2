"""The child side of a worker process: read one JSON request, answer one marked JSON line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from uol_core.runtime import sandbox_channel


def serve_one(handle: Callable[[dict], dict], mark: str, key: str | None = None) -> None:
    """Answer the request on stdin with `handle`'s result (under `key`, with ok=True, when
    given); an exception becomes {"ok": False, "error"} for the page, a crash (signal) is seen
    by the parent. The mark lets the parent skip anything else the child printed; in the
    sandbox the result goes over its own channel instead, where nothing printed can reach."""
    request = json.loads(sys.stdin.read())
    try:
        value = handle(request)
        result = {"ok": True, key: value} if key else value
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if sandbox_channel.attached():  # in the sandbox: the result channel, never stdout
        sandbox_channel.send_result(result)
    else:
        sys.stdout.write("\n" + mark + json.dumps(result, default=str) + "\n")
