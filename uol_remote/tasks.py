"""The one task a worker runs: open a signed job, check its fields, claim it, run it, and seal
the result with this worker's host facts.

Kinds: `kernel` (a C kernel job from `uol_core.runtime.worker.make_job`: its C is built,
verified and timed in a sandboxed process of its own, `kernel_sandbox`), `request` (a Triton
or reference kernel compiled here from the job's ODL, in a child process), `profile` (the
Profiler's report of a library op, in a child) and `gloo` (the Communication page's
collective on gloo processes of the worker's machine).

A job runs once: its nonce must be new both to the broker (a claim key, `SET NX`, that any
worker of any machine sees) and to this machine's own ledger (`ledger.py`), so deleting the
claim key in Redis does not let a captured job run again here, nor does a worker restart.

Deferred imports: a worker process loads only the engine its job kind needs (compiler,
profilers, gloo), so a worker starts fast and a job's process holds no more than it runs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from celery import shared_task

from uol_remote.celery_app import KEY_PREFIX, TASK_NAME
from uol_remote.fields import field_problem
from uol_remote.hostfacts import job_refusal
from uol_remote.ledger import KEEP_S, WORKER_LEDGER, JobLedger, ledger
from uol_remote.signing import MAX_AGE_S, MAX_FUTURE_S, SignatureError, open_sealed, seal

# A claim outlives by far the window in which its job is accepted (issued at most MAX_AGE_S
# ago and MAX_FUTURE_S ahead, by this worker's clock): no replay is accepted after it expires.
CLAIM_TTL_S = int(KEEP_S)
ACCEPT_WINDOW_S = MAX_AGE_S + MAX_FUTURE_S
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
    seen: JobLedger | None = None  # this machine's ledger of job nonces (opened on first use)

    def ledger(self) -> JobLedger:
        if self.seen is None:
            self.seen = ledger(WORKER_LEDGER)
        return self.seen


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
    why = field_problem(body)
    if why:
        return refused(why, envelope)
    if body.get("target") != ctx.target:
        return refused(f"job for target {body.get('target')!r} sent to the queue of "
                       f"{ctx.target!r}", envelope)
    why = job_refusal(body.get("isa") or [], ctx.facts) if body.get("kind") != "profile" \
        else None
    if why:
        return refused(why, envelope)
    # one run per signed job: a redelivered copy (its worker was killed) or a replay stops
    # here, without a reply: the coordinator already has (or gave up on) its one answer
    why = already_taken(body["nonce"], ctx)
    if why:
        log.warning("skipped job %s: %s", body["nonce"], why)
        return {"skipped": body["nonce"]}
    start = time.perf_counter()
    result = run_body(body, ctx)
    log.info("%s job %s: %s in %.2f s", body.get("kind"), body["nonce"][:8],
             result.get("status", "ok" if result.get("ok") else "failed"),
             time.perf_counter() - start)
    return reply(body["nonce"], seal({"result": result, "reply_to": body["nonce"],
                 "worker": {"node": ctx.node, "target": ctx.target, **ctx.facts},
                 "worker_wall_s": time.perf_counter() - start}, ctx.secret))


def already_taken(nonce: str, ctx: WorkerContext) -> str | None:
    """None when job `nonce` is new to this machine's ledger and to the broker, which both now
    record it; else why it must not run. Both must agree: deleting the claim key in Redis
    leaves the ledger, and a fresh ledger (another machine) still meets the claim key."""
    if not ctx.ledger().first_sight(nonce):
        return ("this machine took it before (its ledger); a replay, or a copy redelivered "
                "after its claim key in Redis was removed")
    if not ctx.redis.set(claim_key(nonce), ctx.node, nx=True, ex=CLAIM_TTL_S):
        return f"already claimed by {ctx.redis.get(claim_key(nonce))}"
    return None


def run_body(body: dict, ctx: WorkerContext) -> dict:
    """The job's result: a C kernel job in its own sandboxed process, the others in a child
    process, as a local run computes them."""
    timeout = float(body.get("timeout") or DEFAULT_TIMEOUT_S)
    kind = body.get("kind")
    if kind == "kernel":
        from uol_remote.kernel_sandbox import run_kernel

        return run_kernel(body["job"], timeout)
    if kind in ("request", "profile", "gloo"):
        from uol_remote.child import run_in_child

        return run_in_child(kind, body["job"], timeout)
    return {"status": "error", "reason": f"unknown job kind {kind!r}"}
