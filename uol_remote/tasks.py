"""The one task a worker runs: open a signed job, claim it, run it the way a local run does,
and seal the result with this worker's host facts.

Kinds: `kernel` (a built C kernel job from `uol_core.runtime.worker.make_job`, run in the
same long-lived sandbox worker process the IDE and the tuner use), `request` (a Triton or
reference kernel, in a child process), `profile` (the Profiler's report, in a child) and
`gloo` (the Communication page's collective on gloo processes of the worker's machine).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from celery import shared_task

from uol_remote.celery_app import KEY_PREFIX, TASK_NAME
from uol_remote.hostfacts import job_refusal
from uol_remote.signing import SignatureError, open_sealed, seal

CLAIM_TTL_S = 2 * 24 * 3600  # longer than a job may wait (signing.MAX_AGE_S): no replay fits
DEFAULT_TIMEOUT_S = 120.0
log = logging.getLogger("uol.remote")


@dataclass
class WorkerContext:
    """What the task needs from the worker process that `uol worker` started."""

    secret: bytes = b""
    node: str = ""
    target: str = ""
    facts: dict = field(default_factory=dict)
    redis: object = None
    sandbox: object = None  # uol_core.runtime.worker.Worker, started on first kernel job


CONTEXT = WorkerContext()


def claim_key(nonce: str) -> str:
    return f"{KEY_PREFIX}claim:{nonce}"


def reply_key(nonce: str) -> str:
    return f"{KEY_PREFIX}reply:{nonce}"


def reply(nonce, answer: dict) -> dict:
    """Push `answer` where the coordinator waits for it (kept a day, as long as jobs live)."""
    if isinstance(nonce, str) and nonce:
        pipe = CONTEXT.redis.pipeline()
        pipe.rpush(reply_key(nonce), json.dumps(answer, default=str))
        pipe.expire(reply_key(nonce), 24 * 3600)
        pipe.execute()
    return answer


def refused(why: str, envelope) -> dict:
    """The answer to a job that is not run (unsigned: it carries no result to record)."""
    log.warning("refused a job: %s", why)
    body = envelope.get("body") if isinstance(envelope, dict) else None
    nonce = body.get("nonce") if isinstance(body, dict) else None
    return reply(nonce, {"refused": why, "node": CONTEXT.node})


@shared_task(name=TASK_NAME, bind=True)
def execute(self, envelope) -> dict:
    """Run one signed job; every outcome is a result (the worker itself never fails)."""
    ctx = CONTEXT
    try:
        body = open_sealed(envelope, ctx.secret)
    except SignatureError as exc:
        return refused(str(exc), envelope)
    if body.get("target") != ctx.target:
        return refused(f"job for target {body.get('target')!r} sent to the queue of "
                       f"{ctx.target!r}", envelope)
    why = job_refusal(body.get("isa") or [], ctx.facts) if body.get("kind") != "profile" \
        else None
    if why:
        return refused(why, envelope)
    # one run per signed job: a redelivered copy (its worker was killed) or a replay stops here
    if not ctx.redis.set(claim_key(body["nonce"]), ctx.node, nx=True, ex=CLAIM_TTL_S):
        # no reply: the coordinator already has (or gave up on) this job's one answer
        log.warning("skipped job %s: already claimed by %s", body["nonce"],
                    ctx.redis.get(claim_key(body["nonce"])))
        return {"skipped": body["nonce"]}
    start = time.perf_counter()
    result = run_body(body, ctx)
    log.info("%s job %s: %s in %.2f s", body.get("kind"), body["nonce"][:8],
             result.get("status", "ok" if result.get("ok") else "failed"),
             time.perf_counter() - start)
    return reply(body["nonce"], seal({"result": result, "reply_to": body["nonce"],
                 "worker": {"node": ctx.node, "target": ctx.target, **ctx.facts},
                 "worker_wall_s": time.perf_counter() - start}, ctx.secret))


def run_body(body: dict, ctx: WorkerContext) -> dict:
    """The job's result, computed as a local run computes it."""
    timeout = float(body.get("timeout") or DEFAULT_TIMEOUT_S)
    kind = body.get("kind")
    if kind == "kernel":
        if ctx.sandbox is None:
            from uol_core.runtime.worker import Worker

            ctx.sandbox = Worker(timeout)
        return ctx.sandbox.run(body["job"], timeout)
    if kind in ("request", "profile", "gloo"):
        from uol_remote.child import run_in_child

        return run_in_child(kind, body["job"], timeout)
    return {"status": "error", "reason": f"unknown job kind {kind!r}"}
