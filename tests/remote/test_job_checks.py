"""The checks a worker makes before a signed job runs, on the functions themselves: the issue
time and every number of a job must be real and finite, and a job's nonce must be new both to
the broker's claim and to the machine's own ledger (a real redis-server where installed)."""

from __future__ import annotations

import math
import time

import pytest

from uol_remote.signing import (
    MAX_AGE_S,
    MAX_FUTURE_S,
    SignatureError,
    check_issued,
    open_sealed,
    seal,
)

SECRET = b"a-shared-secret-of-the-tests-0123456789"


def _kernel_body(**job_fields) -> dict:
    job = {"source": {"text": "/* c */", "meta": {"flops": 10}}, "op_text": "op", "op_file":
           "op.odl", "sizes": {"N": 16}, "seed": 0, "warmup": 2, "repeats": 7,
           "min_seconds": 0.2, "check_only": False, **job_fields}
    return {"kind": "kernel", "target": "host", "isa": [], "job": job, "timeout": 30}


@pytest.mark.parametrize("issued", [float("nan"), float("inf"), float("-inf"), "nan", "x",
                                    True, None, [1.0], "1e9"])
def test_an_issue_time_that_is_not_a_finite_number_is_refused(issued):
    envelope = seal(_kernel_body(), SECRET, issued=issued)
    with pytest.raises(SignatureError, match="refused") as caught:
        open_sealed(envelope, SECRET)
    assert "\n" not in str(caught.value) and "issue time" in str(caught.value)


def test_an_issue_time_in_the_future_beyond_the_clock_skew_is_refused():
    ahead = seal(_kernel_body(), SECRET, issued=time.time() + MAX_FUTURE_S + 30)
    with pytest.raises(SignatureError, match="in the future, beyond the 60 s"):
        open_sealed(ahead, SECRET)
    slightly = seal(_kernel_body(), SECRET, issued=time.time() + MAX_FUTURE_S / 2)
    assert open_sealed(slightly, SECRET)["kind"] == "kernel"  # clocks a little apart: fine
    old = seal(_kernel_body(), SECRET, issued=time.time() - MAX_AGE_S - 5)
    with pytest.raises(SignatureError, match="older than 3600 s"):
        open_sealed(old, SECRET)


def test_check_issued_accepts_exactly_the_window():
    now = time.time()
    assert check_issued(now) == now and check_issued(int(now)) == int(now)
    for bad in (now - MAX_AGE_S - 1, now + MAX_FUTURE_S + 1, math.nan, math.inf):
        with pytest.raises(SignatureError):
            check_issued(bad)


@pytest.mark.parametrize("where, body", [
    ("timeout", dict(_kernel_body(), timeout=float("nan"))),
    ("job.min_seconds", _kernel_body(min_seconds=float("inf"))),
    ("job.source.meta.flops", _kernel_body(source={"text": "", "meta": {"flops": -math.inf}})),
    ("job.sizes.N", _kernel_body(sizes={"N": float("nan")})),
])
def test_a_non_finite_number_anywhere_in_a_signed_job_is_refused(where, body):
    with pytest.raises(SignatureError, match=f"signed field {where} is not a finite number"):
        open_sealed(seal(body, SECRET), SECRET)


@pytest.mark.parametrize("change, field", [
    ({"timeout": "30"}, "timeout"), ({"timeout": True}, "timeout"), ({"timeout": 0}, "timeout"),
    ({"timeout": 10**9}, "timeout"), ({"nonce": "../x"}, "nonce"), ({"kind": "shell"}, "kind"),
    ({"isa": "avx2"}, "isa"),
])
def test_the_jobs_own_numbers_and_names_are_checked(change, field):
    from uol_remote.fields import field_problem

    body = open_sealed(seal(dict(_kernel_body(), **change), SECRET), SECRET)
    problem = field_problem(body)
    assert problem and field in problem and "\n" not in problem, problem


@pytest.mark.parametrize("job_fields, field", [
    ({"repeats": True}, "job.repeats"), ({"repeats": 2.5}, "job.repeats"),
    ({"repeats": 0}, "job.repeats"), ({"warmup": "2"}, "job.warmup"),
    ({"seed": -1}, "job.seed"), ({"min_seconds": "0.2"}, "job.min_seconds"),
    ({"min_seconds": 1e6}, "job.min_seconds"), ({"sizes": {"N": "16"}}, "job.sizes.N"),
    ({"sizes": {"N": 0}}, "job.sizes.N"), ({"sizes": {"N": True}}, "job.sizes.N"),
    ({"sizes": [16]}, "job.sizes"), ({"check_only": "yes"}, "job.check_only"),
])
def test_every_number_a_kernel_job_runs_with_is_checked(job_fields, field):
    from uol_remote.fields import field_problem

    problem = field_problem(open_sealed(seal(_kernel_body(**job_fields), SECRET), SECRET))
    assert problem and problem.startswith(field) and "\n" not in problem, problem


def test_the_jobs_the_coordinator_sends_pass_the_checks():
    from uol_core.ops import load_op, op_text
    from uol_remote.fields import field_problem
    from uol_remote.jobs import kernel_job

    # a named target: no probe of this machine
    job, _ = kernel_job(op_text("relu"), "avx2-desktop", {d: 16 for d in load_op("relu").dims})
    for kind, payload in (("kernel", job),
                          ("request", {"odl": op_text("relu"), "backend": "triton",
                                       "target": "host", "sizes": {"N": 16}, "config": {}}),
                          ("profile", {"op": "relu", "sizes": {"N": 16}, "target": "host"}),
                          ("gloo", {"task": {"kind": "allreduce", "sizes": [4096], "iters": 3,
                                             "warmup": 2}, "ranks": 2})):
        body = open_sealed(seal({"kind": kind, "target": "host", "isa": ["avx2"], "job": payload,
                                 "timeout": 120.0, "caller": "me@here"}, SECRET), SECRET)
        assert field_problem(body) is None, (kind, field_problem(body))


# ------------------------------------------------------------------ claims: broker and ledger


@pytest.fixture(scope="module")
def redis_client(tmp_path_factory):
    """A client of a fresh redis-server on 127.0.0.1 (skipped where none is installed)."""
    import shutil

    from uol_remote.celery_app import redis_client as connect
    from uol_remote.local_cluster import LocalBroker

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server): the claim "
                    "tests need a real broker")
    broker = LocalBroker(tmp_path_factory.mktemp("claims")).start()
    try:
        yield connect(broker.url)
    finally:
        broker.stop()


def _worker(redis, ledger_path, node="host.1@a"):
    from uol_remote.ledger import JobLedger
    from uol_remote.tasks import WorkerContext

    return WorkerContext(secret=SECRET, node=node, target="host", redis=redis,
                         seen=JobLedger(ledger_path))


def test_a_job_whose_claim_key_was_deleted_is_still_refused_here(redis_client, tmp_path):
    from uol_remote.tasks import ACCEPT_WINDOW_S, already_taken, claim_key

    ctx = _worker(redis_client, tmp_path / "seen.sqlite")
    nonce = seal(_kernel_body(), SECRET)["body"]["nonce"]
    assert already_taken(nonce, ctx) is None  # first sight: it runs
    # the claim lives longer than the window in which the job is accepted at all
    assert redis_client.ttl(claim_key(nonce)) > ACCEPT_WINDOW_S
    assert "this machine took it before" in already_taken(nonce, ctx)  # a second copy
    redis_client.delete(claim_key(nonce))  # whoever reaches Redis removes the claim
    assert "this machine took it before" in already_taken(nonce, ctx)
    # a restarted worker (a new process, the same ledger file) refuses it too
    restarted = _worker(redis_client, tmp_path / "seen.sqlite", node="host.2@a")
    assert "this machine took it before" in already_taken(nonce, restarted)
    assert not redis_client.exists(claim_key(nonce))  # a refused replay claims nothing


def test_a_job_claimed_elsewhere_is_refused_by_a_machine_that_never_saw_it(redis_client,
                                                                         tmp_path):
    from uol_remote.tasks import already_taken, claim_key

    here, there = (_worker(redis_client, tmp_path / "a.sqlite"),
                   _worker(redis_client, tmp_path / "b.sqlite", node="host.9@b"))
    nonce = seal(_kernel_body(), SECRET)["body"]["nonce"]
    assert already_taken(nonce, here) is None
    assert "already claimed by host.1@a" in already_taken(nonce, there)
    # what does not hold, as docs/remote.md says: with the claim deleted as well, a machine
    # whose ledger never saw the job runs it once (it still refuses it a second time)
    redis_client.delete(claim_key(nonce))
    third = _worker(redis_client, tmp_path / "c.sqlite", node="host.5@c")
    assert already_taken(nonce, third) is None
    assert already_taken(nonce, third) is not None


def test_the_ledger_keeps_a_nonce_until_its_job_has_expired_and_prunes_it_after(tmp_path):
    from uol_remote import ledger as ledger_module
    from uol_remote.ledger import KEEP_S, JobLedger
    from uol_remote.tasks import ACCEPT_WINDOW_S

    assert KEEP_S > ACCEPT_WINDOW_S
    seen = JobLedger(tmp_path / "seen.sqlite")
    assert seen.first_sight("a" * 32, keep_s=0.2) and not seen.first_sight("a" * 32)
    assert (tmp_path / "seen.sqlite").stat().st_mode & 0o077 == 0  # the owner's alone
    time.sleep(0.3)
    seen._pruned_at -= ledger_module.PRUNE_EVERY_S + 1
    assert seen.first_sight("b" * 32)  # pruning ran: the expired row is gone
    rows = seen._conn.execute("SELECT nonce FROM seen").fetchall()
    assert rows == [("b" * 32,)]
