"""The coordinator's side: sign a job, send it to a target's queue, wait for its one answer.

A job's holder is named by its claim key; while the answer has not come, the coordinator
checks that the holder's heartbeat is fresh. A holder that vanished (kill -9, power loss)
makes the job lost: it is abandoned (its claim stays taken, so a redelivered copy never runs)
and sent once more; a second loss is reported as status "lost". The answer is verified
(signature, and that it answers this job) before anyone records it.
"""

from __future__ import annotations

import getpass
import json
import socket
import time

from redis.exceptions import ConnectionError as BrokerDown
from redis.exceptions import TimeoutError as BrokerSlow

from uol_remote.celery_app import TASK_NAME, make_app, redis_client
from uol_remote.heartbeat import BEAT_EVERY_S, is_alive, live_workers
from uol_remote.signing import SignatureError, load_secret, open_sealed, seal
from uol_remote.tasks import CLAIM_TTL_S, DEFAULT_TIMEOUT_S, claim_key, reply_key

POLL_S = 0.5  # how often a waiting coordinator checks the holder's heartbeat
QUEUE_WAIT_S = 600.0  # a job no worker has taken by then is given up


class RemoteError(RuntimeError):
    """A job that could not run remotely: no live worker, refused, or lost twice."""


class JobLost(RemoteError):
    """Every worker that took the job died before answering."""


class Coordinator:
    """Sends signed jobs to target queues on one broker and gathers their answers."""

    def __init__(self, broker_url: str, secret: bytes | str | None = None, caller: str = ""):
        self.broker_url = broker_url
        self.secret = secret if isinstance(secret, bytes) else load_secret(secret)
        self.caller = caller or f"{getpass.getuser()}@{socket.gethostname()}"
        self.app = make_app(broker_url)
        self.redis = redis_client(broker_url)

    def live_workers(self) -> list[dict]:
        """Every worker with a fresh heartbeat (node, target, host facts)."""
        return live_workers(self.redis)

    def workers_for(self, target: str) -> list[dict]:
        return [w for w in self.live_workers() if w["target"] == target]

    def submit(self, kind: str, target: str, job: dict, *, isa: list[str] | None = None,
               timeout: float = DEFAULT_TIMEOUT_S, retries: int = 1) -> dict:
        """Run `job` of `kind` (kernel | request | profile | gloo) on a live worker of `target`.

        Returns the worker's result with `worker` (its host facts) and `remote` (node,
        attempts, round trip) added. Raises JobLost when its worker died on every attempt,
        RemoteError when no worker serves the target or the worker refused the job.
        """
        if not self.workers_for(target):
            raise RemoteError(f"no live worker serves target {target!r}: start one with "
                              f"`uol worker --target {target} --broker {self.broker_url}`")
        lost: list[str] = []
        for attempt in range(1, retries + 2):
            start = time.perf_counter()
            envelope = seal({"kind": kind, "target": target, "isa": isa or [], "job": job,
                             "timeout": timeout, "caller": self.caller}, self.secret)
            nonce = envelope["body"]["nonce"]
            self._send(envelope, target)
            answer, holder = self._wait(nonce, target, timeout)
            if answer is None:
                lost.append(holder or "no worker")
                continue
            result = self._open(answer, nonce)
            result["remote"] = {"node": result["worker"]["node"], "attempts": attempt,
                                "round_trip_s": time.perf_counter() - start, "lost": lost}
            return result
        raise JobLost(f"lost: the worker died mid-job on each of {len(lost)} attempts "
                      f"({', '.join(lost)}); nothing was recorded for it")

    def _wait(self, nonce: str, target: str, timeout: float) -> tuple[dict | None, str | None]:
        """(the answer, its holder), or (None, the holder) when the job was lost."""
        queued_until = time.monotonic() + QUEUE_WAIT_S
        started = suspect = None
        holder = None
        while True:
            try:
                item = self.redis.blpop([reply_key(nonce)], timeout=POLL_S)
                if item:
                    return json.loads(item[1]), holder
                holder = self.redis.get(claim_key(nonce))
                gone = not is_alive(self.redis, holder) if holder else \
                    not self.workers_for(target)
                # gone for two beats, not one missed refresh (or a broker coming back up)
                suspect = (suspect or time.monotonic()) if gone else None
                if suspect and time.monotonic() - suspect >= 2 * BEAT_EVERY_S \
                        and (holder or self._abandon(nonce)):
                    self._abandon(nonce)  # a holder's claim is already taken: a no-op then
                    return None, holder
            except (BrokerDown, BrokerSlow, OSError) as exc:  # the broker restarts: wait for it
                if time.monotonic() > queued_until:
                    raise RemoteError(f"the broker stayed unreachable: {exc}") from None
                time.sleep(POLL_S)
                continue
            now = time.monotonic()
            if holder and started is None:
                started = now
            if started is not None and now - started > timeout + 30:
                self._abandon(nonce)
                raise RemoteError(f"worker {holder} gave no answer {timeout + 30:.0f} s after "
                                  "starting the job (its own limit is the job's timeout)")
            if started is None and now > queued_until:
                self._abandon(nonce)
                raise RemoteError(f"no worker of {target!r} took the job within "
                                  f"{QUEUE_WAIT_S:.0f} s")

    def _send(self, envelope: dict, target: str) -> None:
        """Queue the job; while the broker restarts, try again for up to a minute."""
        give_up = time.monotonic() + 60
        while True:
            try:
                self.app.send_task(TASK_NAME, args=[envelope], queue=target,
                                   routing_key=target)
                return
            except Exception as exc:  # kombu's OperationalError and redis errors alike
                if time.monotonic() > give_up:
                    raise RemoteError(f"cannot queue the job on {self.broker_url}: {exc}") \
                        from None
                time.sleep(POLL_S)

    def _abandon(self, nonce: str) -> bool:
        """Take the job's claim for nobody, so a copy delivered later never runs; False when a
        worker claimed it first (it runs: keep waiting)."""
        return bool(self.redis.set(claim_key(nonce), "abandoned", nx=True, ex=CLAIM_TTL_S))

    def _open(self, answer: dict, nonce: str) -> dict:
        if "refused" in answer:
            raise RemoteError(f"worker {answer.get('node')} refused the job: {answer['refused']}")
        try:
            body = open_sealed(answer, self.secret)
        except SignatureError as exc:
            raise RemoteError(f"the answer to job {nonce} is not sealed with our secret "
                              f"({exc}): ignored") from None
        if body.get("reply_to") != nonce:
            raise RemoteError(f"the answer to job {nonce} answers another job: ignored")
        result = dict(body["result"])
        result["worker"] = body["worker"]
        result["worker_wall_s"] = body.get("worker_wall_s")
        return result


class RemoteWorker:
    """The interface of `uol_core.runtime.worker.Worker` (run a kernel job, get a result
    dict) on a remote worker of `target`: the tuner and the IDE use it unchanged."""

    def __init__(self, coordinator: Coordinator, target: str, isa: list[str] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.coordinator, self.target, self.timeout_s = coordinator, target, timeout_s
        self.isa = isa if isa is not None else target_isa(target)

    def run(self, job: dict, timeout_s: float | None = None) -> dict:
        """The job's result. A job that did not run (no worker, refused, lost) raises
        RemoteError rather than returning a failure: the tuner would record a failure as a
        property of the config and never measure it again."""
        return self.coordinator.submit("kernel", self.target, job, isa=self.isa,
                                       timeout=timeout_s or self.timeout_s)

    def close(self) -> None:
        """Remote workers outlive one tune."""


def target_isa(target: str) -> list[str]:
    """The ISA flags a CPU target's kernels are emitted for (none for GPU targets)."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.hfl import load_target

    tgt = load_target(target)
    return list(tgt.isa) if tgt.kind == "cpu" else []
