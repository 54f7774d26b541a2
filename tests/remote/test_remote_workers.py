"""Remote target workers end to end: runs on two targets' workers, records with the worker's
host facts, signature checks, a worker killed mid-job, a broker restart."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from uol_core.ops import load_op, op_text
from uol_remote.client import RemoteError, RemoteWorker
from uol_remote.jobs import kernel_job
from uol_remote.signing import seal
from uol_remote.tasks import claim_key, reply_key

OP = "softmax"  # a row pattern: its tuner, its space per target, vector code per ISA
SIZES = {"R": 256, "C": 256}
SMALL = {"R": 8, "C": 8}


def _session(target: str, coordinator, db_path, sizes=SIZES, min_seconds: float = 0.05):
    from uol_core.acg.session import open_session
    from uol_core.runtime.tuningdb import TuningDB

    return open_session(load_op(OP), sizes, target, db=TuningDB(db_path),
                        worker=RemoteWorker(coordinator, target), min_seconds=min_seconds)


def _rows(db_path) -> list[dict]:
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM measurements ORDER BY id")]


@pytest.mark.parametrize("target", ["host", "avx2-desktop"])
def test_a_run_on_each_target_comes_back_verified_with_its_worker(cluster, target):
    _, _, coordinator, _ = cluster
    job, _ = kernel_job(op_text(OP), target, SIZES, min_seconds=0.05)
    result = RemoteWorker(coordinator, target).run(job)
    assert result["status"] == "ok", result
    assert result["median_s"] > 0 and result["max_abs_err"] is not None
    assert result["worker"]["target"] == target
    assert result["remote"]["node"].startswith(f"{target}.") and result["remote"]["attempts"] == 1
    assert result["worker"]["flags"] and result["worker"]["cpu"]
    # emitted for the target's record (256-bit vectors for the AVX2 one), not this machine's
    if target == "avx2-desktop":
        assert "__m256" in job["source"]["text"] and "__m512" not in job["source"]["text"]


def test_tuner_records_each_remote_measurement_with_the_workers_host(cluster, tmp_path):
    _, _, coordinator, _ = cluster
    db = tmp_path / "tuning.sqlite"
    session = _session("avx2-desktop", coordinator, db)
    try:
        cfg = session.ranked()[0][0]
        trial = session.measure(cfg)
    finally:
        session.close()
    assert trial.gflops > 0
    (row,) = _rows(db)
    extra = json.loads(row["extra"])
    assert row["status"] == "ok" and row["config"] == cfg.key()
    assert extra["worker"]["node"].startswith("avx2-desktop.")
    assert extra["worker"]["host"] and extra["worker"]["fingerprint"]


def _answer(coordinator, nonce: str, wait_s: float = 20.0):
    give_up = time.monotonic() + wait_s
    while time.monotonic() < give_up:  # short waits: the client's socket timeout is longer
        item = coordinator.redis.blpop([reply_key(nonce)], timeout=0.5)
        if item:
            return json.loads(item[1])
    return None


def test_unsigned_forged_and_replayed_jobs_do_not_run(cluster):
    _, _, coordinator, _ = cluster
    job, _ = kernel_job(op_text(OP), "host", SMALL)
    body = {"kind": "kernel", "target": "host", "isa": [], "job": job, "timeout": 30}
    forged = seal(body, b"not-the-shared-secret-at-all")
    unsigned = {"body": dict(forged["body"], nonce="unsigned-" + forged["body"]["nonce"])}
    for envelope, why in ((forged, "bad signature"), (unsigned, "unsigned job")):
        coordinator.app.send_task("uol.remote.execute", args=[envelope], queue="host")
        answer = _answer(coordinator, envelope["body"]["nonce"])
        assert answer is not None and why in answer["refused"], answer
        assert not coordinator.redis.exists(claim_key(envelope["body"]["nonce"]))
    good = seal(body, coordinator.secret)
    for _ in range(2):  # the same signed job twice: it runs once, the copy is skipped
        coordinator.app.send_task("uol.remote.execute", args=[good], queue="host")
    first = _answer(coordinator, good["body"]["nonce"])
    assert first is not None and "refused" not in first
    assert _answer(coordinator, good["body"]["nonce"], wait_s=1.5) is None


def test_a_captured_job_does_not_run_again_when_its_claim_key_is_deleted(cluster):
    from uol_remote.signing import MAX_AGE_S

    _, _, coordinator, _ = cluster
    target = "avx2-desktop"  # one worker: jobs are taken in the order they were queued
    job, _ = kernel_job(op_text(OP), target, SMALL)
    body = {"kind": "kernel", "target": target, "isa": [], "job": job, "timeout": 30}
    captured = seal(body, coordinator.secret)
    nonce = captured["body"]["nonce"]
    coordinator.app.send_task("uol.remote.execute", args=[captured], queue=target)
    first = _answer(coordinator, nonce)
    assert first is not None and "refused" not in first, first
    # the claim outlives the window in which the job is accepted (an hour, plus clock skew)
    assert coordinator.redis.ttl(claim_key(nonce)) > MAX_AGE_S + 60
    coordinator.redis.delete(claim_key(nonce))  # whoever reaches Redis removes the claim
    coordinator.app.send_task("uol.remote.execute", args=[captured], queue=target)
    later = seal(body, coordinator.secret)  # queued behind the replay: answered after it
    coordinator.app.send_task("uol.remote.execute", args=[later], queue=target)
    assert _answer(coordinator, later["body"]["nonce"]) is not None
    assert _answer(coordinator, nonce, wait_s=0.5) is None  # the replay never ran
    assert not coordinator.redis.exists(claim_key(nonce))


@pytest.mark.parametrize("issued", [float("nan"), "x", 1e12])
def test_a_signed_job_with_a_bad_issue_time_is_refused_by_the_worker(cluster, issued):
    _, _, coordinator, _ = cluster
    job, _ = kernel_job(op_text(OP), "avx2-desktop", SMALL)
    envelope = seal({"kind": "kernel", "target": "avx2-desktop", "isa": [], "job": job,
                     "timeout": 30}, coordinator.secret, issued=issued)
    coordinator.app.send_task("uol.remote.execute", args=[envelope], queue="avx2-desktop")
    answer = _answer(coordinator, envelope["body"]["nonce"])
    assert answer is not None and "refused" in answer, answer
    assert "issue time" in answer["refused"] or "in the future" in answer["refused"], answer


# A kernel job whose C, when the worker loads it, looks at what it can reach and exits with
# 100 + what it found: 1 the worker's secret or broker in its environment, 2 a connection to
# the broker's port, 4 root, 8 the secret file open for reading.
PROBE_C = r"""
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((constructor)) static void uol_probe(void) {
    int found = 0;
    if (getenv("UOL_REMOTE_SECRET_FILE") || getenv("UOL_REMOTE_SECRET") || getenv("UOL_BROKER"))
        found |= 1;
    struct sockaddr_in broker;
    memset(&broker, 0, sizeof broker);
    broker.sin_family = AF_INET;
    broker.sin_port = htons(@PORT@);
    broker.sin_addr.s_addr = htonl(0x7f000001);
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    if (sock >= 0 && connect(sock, (struct sockaddr *)&broker, sizeof broker) == 0) found |= 2;
    if (geteuid() == 0) found |= 4;
    int fd = open("@SECRET_FILE@", O_RDONLY);
    if (fd >= 0) found |= 8;
    _exit(100 + found);
}
"""


@pytest.fixture(scope="module")
def probe(cluster) -> tuple[int, list[str]]:
    """(what the probe kernel found, the isolation the worker's job reported) on a worker."""
    import re

    broker, secret, coordinator, _ = cluster
    job, _ = kernel_job(op_text(OP), "avx2-desktop", SMALL)
    job["source"]["text"] += PROBE_C.replace("@PORT@", str(broker.port)).replace(
        "@SECRET_FILE@", str(secret))
    result = RemoteWorker(coordinator, "avx2-desktop").run(job, 60)
    found = re.search(r"exit status 1(\d\d)", result.get("reason", ""))
    assert result["status"] == "crash" and found, result
    return int(found.group(1)), (result.get("sandbox") or {}).get("isolation", [])


def test_a_remote_jobs_c_runs_without_the_workers_environment(probe):
    found, isolation = probe
    assert not found & 1, f"the job's C saw the worker's secret or broker: {isolation}"
    assert isolation, "the job's result says nothing of the sandbox it ran in"


def _network_namespace_here() -> str:
    """What the sandbox's network layer gets on this host, asked of a throwaway process."""
    import subprocess
    import sys

    code = ("from pathlib import Path; from uol_core.runtime.sandbox_os import "
            "isolate_namespaces; print(isolate_namespaces(Path('.'), read_only=False)[0])")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_a_remote_jobs_c_cannot_reach_the_broker(probe):
    found, isolation = probe
    here = _network_namespace_here()
    if not here.startswith("network: own empty network namespace"):
        pytest.skip(f"this OS gives the sandbox no network namespace: {here}")
    assert here in isolation, isolation
    assert not found & 2, "the job's C connected to the broker"


def test_a_remote_jobs_c_does_not_run_as_root(probe):
    found, isolation = probe
    user = next(line for line in isolation if line.startswith("user:"))
    if os.geteuid() != 0:
        assert not found & 4 and "not root" in user
        pytest.skip(f"the worker is not root, so its jobs are not either ({user})")
    assert "instead of root" in user, isolation
    assert not found & 4 and not found & 8, "the job's C ran as root or read the secret"


def test_worker_refuses_a_target_its_hardware_cannot_run(tmp_path):
    from uol_core.hfl import load_target
    from uol_remote.hostfacts import refusal

    avx2_only = {"cpu": "an AVX2 desktop", "machine": "x86_64", "gpus": [],
                 "flags": ["avx2", "fma", "avx", "sse4_2", "sse2"]}
    why = refusal(load_target("xeon-spr-8480"), avx2_only)
    assert why and "avx512f" in why and "uol hw list" in why
    assert refusal(load_target("avx2-desktop"), avx2_only) is None
    assert "GPU" in refusal(load_target("h100-sxm"), avx2_only)
    import typer
    from typer.testing import CliRunner

    from uol_cli.worker_cmd import worker

    command = typer.Typer()
    command.command()(worker)
    out = CliRunner().invoke(command, ["--target", "graviton3", "--broker",
                                       "redis://127.0.0.1:9/0"], env={"UOL_REMOTE_SECRET": "x" * 32})
    assert out.exit_code == 2 and "refusing to serve graviton3" in out.output


def test_a_worker_killed_mid_job_is_detected_and_the_job_runs_once_elsewhere(cluster, tmp_path):
    _, _, coordinator, by_node = cluster
    db = tmp_path / "tuning.sqlite"
    before = set(coordinator.redis.scan_iter(match=claim_key("*")))
    outcome: dict = {}

    def measure() -> None:  # the session in the thread that uses it (SQLite's rule)
        # a measurement long enough to kill its worker in the middle (timing lasts >= 3 s)
        session = _session("host", coordinator, db, sizes={"R": 64, "C": 64}, min_seconds=3.0)
        try:
            outcome["trial"] = session.measure(session.ranked()[0][0])
        except Exception as exc:
            outcome["error"] = exc
        finally:
            session.close()

    thread = threading.Thread(target=measure)
    thread.start()
    holder, give_up = None, time.monotonic() + 30
    while holder is None and time.monotonic() < give_up:
        for key in set(coordinator.redis.scan_iter(match=claim_key("*"))) - before:
            value = coordinator.redis.get(key)
            if value in by_node:
                holder = value
        time.sleep(0.05)
    assert holder, f"no worker took the job: {outcome}"
    time.sleep(0.5)
    os.killpg(by_node[holder].pid, signal.SIGKILL)  # the worker and its sandbox child
    thread.join(60)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["trial"].result
    assert result["status"] == "ok" and result["remote"]["attempts"] == 2
    assert result["remote"]["lost"] == [holder] and result["remote"]["node"] != holder
    assert len(_rows(db)) == 1  # recorded once, from the retry


def test_a_broker_restart_loses_no_committed_record(cluster, tmp_path):
    broker, _, coordinator, _ = cluster
    db = tmp_path / "tuning.sqlite"
    session = _session("avx2-desktop", coordinator, db)
    try:
        first, second = session.ranked()[0][0], session.ranked()[1][0]
        assert session.measure(first).gflops > 0
        kept = _rows(db)
        broker.restart()
        give_up = time.monotonic() + 30
        while not coordinator.workers_for("avx2-desktop"):  # workers reconnect on their own
            assert time.monotonic() < give_up, "the worker did not come back after the restart"
            time.sleep(0.2)
        assert session.measure(second).gflops > 0
    finally:
        session.close()
    rows = _rows(db)
    assert rows[:1] == kept and len(rows) == 2
    assert [r["config"] for r in rows] == [first.key(), second.key()]


def test_no_live_worker_is_an_error_that_says_how_to_start_one(cluster):
    _, _, coordinator, _ = cluster
    job, _ = kernel_job(op_text(OP), "xeon-spr-8480", SMALL)
    with pytest.raises(RemoteError, match="uol worker --target xeon-spr-8480"):
        RemoteWorker(coordinator, "xeon-spr-8480").run(job)


def test_tune_fans_out_across_targets_and_records_every_answer(cluster, tmp_path):
    from uol_remote.sweep import tune_targets

    broker, secret, _, _ = cluster
    db = tmp_path / "tuning.sqlite"
    results = tune_targets(broker.url, secret, load_op(OP), {"R": 64, "C": 64},
                           ["host", "avx2-desktop", "xeon-spr-8480"], 3, str(db))
    by_target = {r["target"]: r for r in results}
    assert "no live worker" in by_target["xeon-spr-8480"]["error"]
    for target in ("host", "avx2-desktop"):
        assert by_target[target]["verified"] == 3, by_target[target]
        assert all(t["worker"].startswith(f"{target}.") for t in by_target[target]["trials"])
    assert len(_rows(db)) == 6


def test_the_ide_runs_a_kernel_on_a_live_worker(cluster, monkeypatch):
    from app.services import remote, runner

    broker, secret, _, _ = cluster
    _use_broker(monkeypatch, broker, secret)
    assert "live worker" in remote.where("avx2-desktop")
    assert remote.target_options(["xeon-spr-8480", "avx2-desktop"])[0]["value"] == "avx2-desktop"
    res = runner.run_kernel(op_text(OP), "c", "avx2-desktop", SIZES, None)
    assert res["ok"], res
    assert res["worker"]["target"] == "avx2-desktop" and "measured on worker" in res["mode"]


def _use_broker(monkeypatch, broker, secret) -> None:
    """This process as `uol serve --broker URL --secret-file FILE` leaves it."""
    from app.services import remote

    monkeypatch.setenv("UOL_BROKER", broker.url)
    monkeypatch.setenv("UOL_REMOTE_SECRET_FILE", str(secret))
    monkeypatch.setattr(remote, "_COORDINATORS", {})
    monkeypatch.setitem(remote._CACHE, "at", 0.0)


def test_the_communication_pages_gloo_measurement_runs_on_a_live_worker(cluster, monkeypatch):
    from app.services import comm

    broker, secret, _, by_node = cluster
    _use_broker(monkeypatch, broker, secret)
    res = comm.measure_gloo([1 << 12, 1 << 16, 1 << 20], ranks=2, iters=3, target="avx2-desktop")
    assert res["ok"], res
    assert res["worker"]["node"] in by_node and res["worker"]["target"] == "avx2-desktop"
    assert res["ran_on"].startswith("worker avx2-desktop.")
    assert [r["size"] for r in res["rows"]] == [1 << 12, 1 << 16, 1 << 20]
    assert all(r["measured"] > 0 for r in res["rows"]) and res["beta"] > 0
    # a job the worker cannot run comes back as an error, never as measured rows
    bad = comm.measure_gloo([1 << 12, 1 << 16], ranks=1, target="avx2-desktop")
    assert not bad["ok"] and "2-16 processes" in bad["error"] and "rows" not in bad
