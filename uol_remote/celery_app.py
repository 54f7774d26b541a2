"""The Celery application of remote workers and coordinators: one Redis URL carries jobs
(Celery queues, one per target) and replies; JSON only (never pickle: a message must not be able to run code on arrival)."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import redis
from celery import Celery

BROKER_ENV = "UOL_BROKER"
TASK_NAME = "uol.remote.execute"
KEY_PREFIX = "uol:remote:"


def check_broker_url(url: str) -> str:
    """`url` when it names a Redis server (redis:// or rediss://), else ValueError saying why."""
    parsed = urlparse(url or "")
    if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
        raise ValueError(f"the broker must be a Redis URL like redis://HOST:6379/0 (rediss:// "
                         f"for TLS), got {url!r}")
    return url


def make_app(broker_url: str) -> Celery:
    """A Celery app on `broker_url`, with the settings remote jobs rely on."""
    check_broker_url(broker_url)
    # results come back on a per-job Redis list (client.py), not through a result backend
    app = Celery("uol_remote", broker=broker_url, include=["uol_remote.tasks"])
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        task_ignore_result=True,
        # a job is acknowledged when it ends: a worker killed mid-job leaves it unacknowledged
        # (and its claim key stops a redelivered copy from running twice)
        task_acks_late=True, task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,  # an idle worker of the same target takes the next job
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        worker_hijack_root_logger=False,
        task_default_queue="host",
    )
    return app


def redis_client(broker_url: str):
    """A plain Redis client on the broker (heartbeats, claims)."""
    return redis.Redis.from_url(check_broker_url(broker_url), socket_timeout=5,
                                socket_connect_timeout=5, health_check_interval=10,
                                decode_responses=True)


def broker_from_env() -> str | None:
    """The broker URL of this process (`uol serve --broker` sets it), or None (in-process)."""
    return os.environ.get(BROKER_ENV) or None
