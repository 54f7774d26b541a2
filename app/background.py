"""The IDE's background-callback manager: Dash's disk-cache manager on this machine by default,
Dash's Celery manager on the broker with `uol serve --broker` (sealed: uol_remote.ide_channel).

Through Celery a callback runs in the IDE's job worker, a process `uol serve` starts beside
itself. What the manager adds to Dash's: the callback's request context is stripped of the
browser's credentials before it goes through Redis (sealing signs, it does not hide), and
each message names the callback it was sealed for and a nonce, so a sealed message re-sent
under another task name, or a second time, does not run.

Both managers key every call afresh. Dash keys a call's progress and result by a hash of the
callback and its arguments, so two calls with the same arguments (the same Tune pressed in two
pages, or by two browsers) shared one slot: the second call's first poll read the result the
first left unread, took it as its own and killed its own still-running job. The IDE caches no
callback result, so a call's key is the hash plus a random nonce: its own, never another's.

Deferred imports: the Celery side and diskcache load only for the manager that is chosen.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from pathlib import Path

from celery import Task
from dash import CeleryManager, DiskcacheManager

BINDING = "uol_job"  # the context entry that names the task and nonce a message was sealed for
log = logging.getLogger("uol.ide_jobs")


def safe_context(context: dict) -> dict:
    """`context` without what would let a reader of Redis act as the browser: the request
    headers shrink to the Host (the per-port session cookie's name), and every cookie but
    the job-queue id is replaced by its hash (the queue still tells browsers apart)."""
    from app.services.job_queue import CLIENT_COOKIE

    ctx = dict(context)
    headers = ctx.get("headers") or {}
    host = headers.get("Host") or headers.get("host")
    ctx["headers"] = {"Host": host} if host else {}
    ctx["cookies"] = {name: value if name == CLIENT_COOKIE
                      else hashlib.sha256(str(value).encode()).hexdigest()
                      for name, value in (ctx.get("cookies") or {}).items()}
    return ctx


class BoundCallbackTask(Task):
    """A background callback that runs only for a message sealed for it, and once."""

    def __call__(self, *args, **kwargs):
        context = args[3] if len(args) == 4 and isinstance(args[3], dict) else {}
        binding = context.get(BINDING) or {}
        if binding.get("task") != self.name:
            log.error("refused a job sealed for %r as %s", binding.get("task"), self.name)
            return None
        if not self.backend.claim(str(binding.get("nonce"))):
            log.error("refused a replayed job %s of %s", binding.get("nonce"), self.name)
            return None
        return super().__call__(*args, **kwargs)


class FreshKeys:
    """A manager mixin: every call gets a key of its own (module docstring)."""

    def build_cache_key(self, fn, args, cache_args_to_ignore, triggered) -> str:
        same_arguments = super().build_cache_key(fn, args, cache_args_to_ignore, triggered)
        return hashlib.sha256(f"{same_arguments}:{uuid.uuid4().hex}".encode()).hexdigest()


class PrivateDiskcacheManager(FreshKeys, DiskcacheManager):
    """Dash's disk-cache manager, each call keyed afresh."""


class SealedCeleryManager(FreshKeys, CeleryManager):
    """Dash's Celery manager on the IDE's sealed app (uol_remote.ide_channel.make_ide_app),
    each call keyed afresh."""

    def call_job_fn(self, key, job_fn, args, context):
        ctx = safe_context(context)
        ctx[BINDING] = {"task": job_fn.name, "nonce": uuid.uuid4().hex}
        return job_fn.delay(key, self._make_progress_key(key), args, ctx).task_id


def make_manager(jobs: Path):
    """The manager of this process: sealed Celery when `uol serve --broker` set it up (its
    job worker runs the callbacks), else the disk cache in `jobs` (callbacks run here)."""
    from uol_remote.ide_channel import app_from_env

    celery_app = app_from_env(BoundCallbackTask)
    if celery_app is None:
        import diskcache

        return PrivateDiskcacheManager(diskcache.Cache(str(jobs)))
    return SealedCeleryManager(celery_app)


def through_broker() -> bool:
    """True when this IDE's background jobs go through the broker to its job worker."""
    import os

    from uol_remote.ide_channel import KEY_FILE_ENV, QUEUE_ENV

    return bool(os.environ.get(QUEUE_ENV) and os.environ.get(KEY_FILE_ENV))
