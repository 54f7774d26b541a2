"""The IDE's background callbacks through Dash's Celery manager (`uol serve --broker`): the
real job worker (`python -m uol_cli.ide_worker_cmd`, a separate process that imports the IDE)
on redis-server, driven the way Dash drives it: call_job_fn, progress, result, cancel.
Messages and results are sealed with the IDE's key; unsigned, wrongly signed, re-targeted and
replayed messages are put on the queue by hand and must never run the callback."""

from __future__ import annotations

import os
import shutil
import time
import uuid

import pytest

from uol_remote.local_cluster import LocalBroker, write_secret

HOST_TARGET = "host"
SIZES = {"R": 64, "C": 64}


def _tune_key() -> str:
    from dash.background_callback.managers import BaseBackgroundCallbackManager

    import app.callbacks.studio_run  # noqa: F401  (registers the Tune callback)

    return next(key for key, fn, _ in BaseBackgroundCallbackManager.functions
                if fn.__name__ == "tune_kernel")


@pytest.fixture(scope="module")
def ide_jobs(tmp_path_factory):
    """{manager, queue, key, log, redis, task}: the IDE's side of the channel and its worker."""
    from app.background import BoundCallbackTask, SealedCeleryManager
    from uol_cli.ide_worker_cmd import start_ide_worker, stop_ide_worker
    from uol_core.runtime.usercache import user_cache_root
    from uol_remote.ide_channel import make_ide_app, new_queue_name, write_key

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server): the IDE's "
                    "job worker needs a real broker")
    folder = tmp_path_factory.mktemp("ide-jobs")
    broker = LocalBroker(folder / "redis").start()
    cache = folder / "cache"
    cache.mkdir(mode=0o700)
    for probe in user_cache_root().glob("host-*.json"):  # no second probe of this machine
        shutil.copy(probe, cache / probe.name)
    saved = dict(os.environ)
    os.environ.update(UOL_BROKER=broker.url, UOL_CACHE_DIR=str(cache),
                      UOL_REMOTE_SECRET_FILE=str(write_secret(folder / "remote.secret")),
                      UOL_IDE_RUNS_DB=str(folder / "ide_runs.sqlite"),
                      UOL_IDE_WORKER_LOGLEVEL="INFO")
    queue = new_queue_name()
    key_file = write_key(folder, queue)
    log = folder / "ide-worker.log"
    proc = start_ide_worker(key_file, queue, log)
    try:
        key = key_file.read_text().strip().encode()
        manager = SealedCeleryManager(make_ide_app(broker.url, key, queue, BoundCallbackTask))
        task = manager.func_registry[_tune_key()]
        yield {"manager": manager, "queue": queue, "key": key, "log": log, "task": task,
               "redis": manager.handle.backend.client}
    finally:
        stop_ide_worker(proc)
        broker.stop()
        os.environ.clear()
        os.environ.update(saved)
        print(f"--- IDE job worker log tail ---\n{log.read_text()[-3000:]}")


def _studio_state() -> dict:
    """What the Studio's compile callback stores for softmax on `host` (its defaults)."""
    from app.services.kernels import compile_odl
    from uol_core.ops import op_text

    odl = op_text("softmax")
    res = compile_odl(odl, "c", HOST_TARGET, SIZES, {})
    assert res.ok, res.error
    return {"odl": odl, "backend": "c", "target": HOST_TARGET, "ok": True, "op": "softmax",
            "sizes": res.sizes, "config": res.config, "kernel": res.source}


def _context() -> dict:
    return {"cookies": {"uol_client": f"test-{uuid.uuid4().hex[:8]}",
                        "uol_session_8050": "a-session-cookie"},
            "headers": {"Host": "127.0.0.1:8050", "Cookie": "uol_session_8050=a-session-cookie"},
            "triggered_inputs": [{"prop_id": "tune-button.n_clicks", "value": 1}],
            "inputs_list": [], "states_list": [], "outputs_list": []}


def _wait_result(manager, cache_key: str, job: str, wait_s: float = 120.0):
    """(result, progress values seen), polled as the Dash renderer polls."""
    seen, give_up = [], time.monotonic() + wait_s
    while time.monotonic() < give_up:
        progress = manager.get_progress(cache_key)
        if progress:
            seen.append(progress)
        if manager.result_ready(cache_key):
            return manager.get_result(cache_key, job), seen
        time.sleep(0.05)
    raise AssertionError(f"no result for job {job} within {wait_s} s")


def test_a_tune_runs_in_the_job_worker_with_progress(ide_jobs):
    manager, task = ide_jobs["manager"], ide_jobs["task"]
    cache_key = uuid.uuid4().hex
    job = manager.call_job_fn(cache_key, task, [1, _studio_state(), "2"], _context())
    (status, _figure, tuned, apply_disabled), progress = _wait_result(manager, cache_key, job)
    assert status.startswith("✓ 2 measured of a budget of 2, 2 verified; best verified"), status
    assert tuned["target"] == HOST_TARGET and tuned["config"] and tuned["gflops"] > 0
    assert apply_disabled is False
    assert progress and progress[-1][:2] == ["2", "2"], progress  # set_progress came through
    assert manager.get_result(cache_key, job) is manager.UNDEFINED  # read once, then cleared


def test_the_browser_credentials_never_go_to_redis():
    from app.background import safe_context

    sent = _context()
    ctx = safe_context(sent)
    assert ctx["headers"] == {"Host": "127.0.0.1:8050"}
    assert ctx["cookies"]["uol_client"] == sent["cookies"]["uol_client"]  # the queue's id
    assert "a-session-cookie" not in str(ctx)
    assert len(ctx["cookies"]["uol_session_8050"]) == 64  # its hash: still tells browsers apart


def test_cancel_terminates_the_running_tune(ide_jobs):
    manager, task = ide_jobs["manager"], ide_jobs["task"]
    cache_key = uuid.uuid4().hex
    job = manager.call_job_fn(cache_key, task, [1, _studio_state(), "60"], _context())
    give_up = time.monotonic() + 60
    while not manager.get_progress(cache_key):
        assert time.monotonic() < give_up and not manager.result_ready(cache_key)
        time.sleep(0.05)
    manager.terminate_job(job)  # what Dash does for the Cancel button
    give_up = time.monotonic() + 20
    while manager.job_running(job):
        assert time.monotonic() < give_up, manager.get_task(job).status
        time.sleep(0.1)
    assert manager.get_task(job).status == "REVOKED"
    time.sleep(1.0)
    assert not manager.result_ready(cache_key)


def _publish(ide_jobs, name: str, args: list, body_text: str | None = None,
             content_type: str | None = None) -> None:
    """Put one task message on the IDE's queue by hand, as anyone who reaches Redis can."""
    from uol_remote.ide_channel import CONTENT_TYPE, seal_message

    app = ide_jobs["manager"].handle
    message = app.amqp.as_task_v2(uuid.uuid4().hex, name, args=args, kwargs={})
    text = body_text if body_text is not None else seal_message(message.body, ide_jobs["key"])
    with app.producer_or_acquire() as producer:
        producer.publish(text, exchange=ide_jobs["queue"], routing_key=ide_jobs["queue"],
                         headers=message.headers, content_type=content_type or CONTENT_TYPE,
                         content_encoding="utf-8", **message.properties)


def test_unsigned_forged_retargeted_and_replayed_jobs_never_run(ide_jobs):
    import json

    from uol_remote.ide_channel import seal_message

    manager, task, queue = ide_jobs["manager"], ide_jobs["task"], ide_jobs["queue"]
    bad_budget = [1, None, "x"]  # answered at once when it runs: "✗ the tune budget ..."
    keys = {case: f"forged-{case}-{uuid.uuid4().hex}" for case in
            ("unsigned", "wrong-key", "other-task", "replay")}

    def args(case: str, task_name: str = task.name) -> list:
        ctx = {**_context(), "uol_job": {"task": task_name, "nonce": uuid.uuid4().hex}}
        return [keys[case], keys[case] + "-progress", bad_budget, ctx]

    # plain JSON, the way Dash's own Celery manager would send it (with a valid-looking binding)
    message = manager.handle.amqp.as_task_v2(uuid.uuid4().hex, task.name, args=args("unsigned"))
    _publish(ide_jobs, task.name, [], json.dumps(message.body), "application/json")
    # sealed with a key that is not the IDE's (the target workers' secret, say)
    wrong = seal_message([args("wrong-key"), {}, {}], b"not-the-ide-key-0123456789abcdef")
    _publish(ide_jobs, task.name, [], wrong)
    # sealed by the IDE for another callback, re-sent under the Tune's name
    _publish(ide_jobs, task.name, args("other-task", "background_callback_other"))
    # a sealed job sent twice: it runs once
    replay = manager.handle.amqp.as_task_v2(uuid.uuid4().hex, task.name, args=args("replay"))
    sealed = seal_message(replay.body, ide_jobs["key"])
    _publish(ide_jobs, task.name, [], sealed)
    # a job the IDE sends after them all: once it is answered, the queue has passed them
    cache_key = uuid.uuid4().hex
    job = manager.call_job_fn(cache_key, task, bad_budget, _context())
    (status, *_), _ = _wait_result(manager, cache_key, job, 60)
    assert status.startswith("✗ the tune budget is a whole number"), status
    redis = ide_jobs["redis"]
    give_up = time.monotonic() + 30
    while redis.get(f"{queue}:{keys['replay']}") is None:  # the first copy runs
        assert time.monotonic() < give_up, "the sealed job did not run the first time"
        time.sleep(0.05)
    redis.delete(f"{queue}:{keys['replay']}")
    _publish(ide_jobs, task.name, [], sealed)  # the same message again
    job = manager.call_job_fn(cache_key, task, bad_budget, _context())
    _wait_result(manager, cache_key, job, 60)
    time.sleep(0.5)
    for case in ("unsigned", "wrong-key", "other-task", "replay"):
        assert redis.keys(f"*{keys[case]}*") == [], case  # never ran: no result, no progress
    log = ide_jobs["log"].read_text()
    assert "Content-type 'application/json' is not allowed" in log or \
        "Refusing to deserialize untrusted content" in log, log[-2000:]
    assert "IDE job with a missing or wrong seal: refused" in log, log[-2000:]
    assert "refused a job sealed for 'background_callback_other'" in log, log[-2000:]
    assert "refused a replayed job" in log, log[-2000:]


def test_a_replay_is_refused_even_after_its_claim_key_is_deleted(ide_jobs):
    from uol_remote.ide_channel import seal_message

    manager, task, queue, redis = (ide_jobs["manager"], ide_jobs["task"], ide_jobs["queue"],
                                   ide_jobs["redis"])
    bad_budget = [1, None, "x"]  # answered at once when it runs
    result_key, nonce = f"captured-{uuid.uuid4().hex}", uuid.uuid4().hex
    ctx = {**_context(), "uol_job": {"task": task.name, "nonce": nonce}}
    message = manager.handle.amqp.as_task_v2(uuid.uuid4().hex, task.name, args=[
        result_key, result_key + "-progress", bad_budget, ctx])
    captured = seal_message(message.body, ide_jobs["key"])
    _publish(ide_jobs, task.name, [], captured)
    give_up = time.monotonic() + 30
    while redis.get(f"{queue}:{result_key}") is None:  # the first copy runs
        assert time.monotonic() < give_up, "the sealed job did not run the first time"
        time.sleep(0.05)
    assert redis.exists(f"{queue}:claim:{nonce}")
    # whoever reaches Redis removes the result and the claim, then sends the message again
    redis.delete(f"{queue}:{result_key}", f"{queue}:claim:{nonce}")
    _publish(ide_jobs, task.name, [], captured)
    cache_key = uuid.uuid4().hex  # a job the IDE sends after it: answered once it has passed
    _wait_result(manager, cache_key, manager.call_job_fn(cache_key, task, bad_budget,
                                                         _context()), 60)
    time.sleep(0.5)
    assert redis.get(f"{queue}:{result_key}") is None  # it did not run a second time
    assert not redis.exists(f"{queue}:claim:{nonce}")


def test_a_result_written_without_the_key_reads_as_missing(ide_jobs):
    manager, queue, redis = ide_jobs["manager"], ide_jobs["queue"], ide_jobs["redis"]
    forged = f"forged-result-{uuid.uuid4().hex}"
    redis.set(f"{queue}:{forged}", b'["<script>alert(1)</script>", null, null, false]')
    assert not manager.result_ready(forged)
    assert manager.get_result(forged, None) is manager.UNDEFINED
    # a genuine sealed value moved to another key does not verify there either
    manager.handle.backend.set("genuine", '["ok"]')
    assert manager.handle.backend.get("genuine") == b'["ok"]'
    redis.set(f"{queue}:{forged}", redis.get(f"{queue}:genuine"))
    assert not manager.result_ready(forged)
