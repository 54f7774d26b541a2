"""The child side of a worker process: read one JSON request, answer one marked JSON line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def serve_one(handle: Callable[[dict], dict], mark: str, key: str | None = None) -> None:
    """Answer the request on stdin with `handle`'s result (under `key`, with ok=True, when
    given); an exception becomes {"ok": False, "error"} for the page, a crash (signal) is seen
    by the parent. The mark lets the parent skip anything else the child printed."""
    request = json.loads(sys.stdin.read())
    try:
        value = handle(request)
        result = {"ok": True, key: value} if key else value
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + mark + json.dumps(result, default=str) + "\n")
