"""Live workers: each worker refreshes a Redis key with a short lifetime; a key that expires
is a worker that died (or lost the broker). Reading the keys is one SCAN, cheap enough for
the IDE's status bar."""

from __future__ import annotations

import contextlib
import json
import threading
import time

from uol_remote.celery_app import KEY_PREFIX

HEARTBEAT_TTL_S = 3.0  # a worker silent this long is gone (kill -9 is seen within it)
BEAT_EVERY_S = 1.0


def worker_key(node: str) -> str:
    return f"{KEY_PREFIX}worker:{node}"


class Heartbeat:
    """A daemon thread that keeps this worker's key alive, independent of the job it runs."""

    def __init__(self, redis, node: str, target: str, facts: dict):
        self.redis, self.node = redis, node
        self.record = {"node": node, "target": target, "facts": facts, "since": time.time()}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="uol-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.beat()
        self.thread.start()
        return self

    def beat(self) -> None:
        self.redis.set(worker_key(self.node), json.dumps(self.record),
                       px=int(HEARTBEAT_TTL_S * 1000))

    def _loop(self) -> None:
        while not self._stop.wait(BEAT_EVERY_S):
            try:
                self.beat()
            except Exception:  # the broker restarts: keep trying, the key comes back with it
                continue

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):  # the broker is gone: the key expires on its own
            self.redis.delete(worker_key(self.node))


def live_workers(redis) -> list[dict]:
    """Every worker whose heartbeat is fresh: node, target, host facts, since."""
    out = []
    for key in redis.scan_iter(match=worker_key("*"), count=200):
        raw = redis.get(key)
        if raw:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
    return sorted(out, key=lambda w: (w["target"], w["node"]))


def is_alive(redis, node: str) -> bool:
    return bool(redis.exists(worker_key(node)))
