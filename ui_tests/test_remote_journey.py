"""Remote target workers from the browser: redis-server on 127.0.0.1 (a free port, a temporary
folder), two `uol worker` processes serving different targets (`host` and the AVX2 target,
which every x86 CPU with AVX2 + FMA runs) and the IDE started as `uol serve --broker`. The
Studio's target list shows both live workers; a Run on each comes back verified with the
worker that measured it in its mode and in the run history; a Tune on a worker writes every
measurement to the coordinator's tuning database with that worker's host facts. The Tune is a
background callback: it goes through Dash's Celery manager to the IDE's job worker, which
`uol serve --broker` started and stops with itself."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest
from conftest import ARTIFACTS, new_context, wait_idle
from playwright.sync_api import expect

from uol_remote.local_cluster import (
    REPO_ROOT,
    LocalBroker,
    free_port,
    start_worker,
    stop_processes,
    wait_for_workers,
    worker_env,
    write_secret,
)

SECOND = "avx2-desktop"
OP_URL = "/?op=softmax&sizes=R=64,C=64"  # a small row kernel: each Run takes well under 1 s


def _wait_for_server(url: str, server: subprocess.Popen, log, wait_s: float = 60.0) -> None:
    give_up = time.monotonic() + wait_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:  # 401 without the token: it answers
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"`uol serve --broker` did not start:\n"
                                   f"{log.read_text()[-2000:]}") from None
            time.sleep(0.2)


@pytest.fixture(scope="module")
def remote_ide(tmp_path_factory):
    """{url, token, folder, nodes: {target: node}}: the IDE on a broker with two workers."""
    from uol_remote.client import Coordinator
    from uol_remote.hostfacts import host_facts

    if not {"avx2", "fma"} <= set(host_facts()["flags"]):
        pytest.skip(f"the second worker serves {SECOND}, which needs an AVX2 + FMA CPU")
    folder = tmp_path_factory.mktemp("remote-ide")
    broker = LocalBroker(folder / "redis").start()
    secret = write_secret(folder / "remote.secret")
    procs = [start_worker(t, broker.url, secret, folder / f"worker-{t}.log")
             for t in ("host", SECOND)]
    # the IDE's own cache (its tuning database) in the test's folder; this machine's host
    # probe is copied in, so the server does not probe the machine again
    from uol_core.runtime.usercache import user_cache_root

    cache = folder / "cache"
    cache.mkdir(mode=0o700)
    for probe in user_cache_root().glob("host-*.json"):
        shutil.copy(probe, cache / probe.name)
    token, port = secrets.token_urlsafe(16), free_port()
    env = worker_env(secret, {"UOL_SERVE_TOKEN": token, "UOL_CACHE_DIR": str(cache),
                              "UOL_IDE_RUNS_DB": str(folder / "ide_runs.sqlite")})
    log = folder / "serve.log"
    with open(log, "ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "uol_cli.main", "serve", "--port", str(port), "--broker",
             broker.url, "--secret-file", str(secret)], env=env, cwd=str(REPO_ROOT),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    job_workers: list = []
    try:
        coordinator = Coordinator(broker.url, secret)
        wait_for_workers(coordinator, {"host": 1, SECOND: 1}, procs)
        _wait_for_server(url + "/", server, log)
        job_workers = [p for p in psutil.Process(server.pid).children()
                       if "uol_cli.ide_worker_cmd" in " ".join(p.cmdline())]
        nodes = {w["target"]: w["node"] for w in coordinator.live_workers()}
        yield {"url": url, "token": token, "folder": folder, "nodes": nodes, "cache": cache,
               "host": host_facts()["host"], "broker": broker.url}
    finally:
        stop_processes([server, *procs])
        # the IDE's job worker ends with `uol serve`
        assert len(job_workers) == 1, job_workers
        psutil.wait_procs(job_workers, timeout=10)
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                       for p in job_workers), job_workers
        assert list((cache / "ide-jobs").iterdir()) == []  # its key went with it
        broker.stop()
        for name in ("serve.log", "worker-host.log", f"worker-{SECOND}.log"):
            print(f"--- {name} tail ---\n{(folder / name).read_text()[-1500:]}")


@pytest.fixture
def remote_page(browser, remote_ide):
    ARTIFACTS.mkdir(exist_ok=True)
    context = new_context(browser)
    login = context.request.get(f"{remote_ide['url']}/_dash-layout?token={remote_ide['token']}",
                                max_redirects=0)
    assert login.status == 302, login.status
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.js_errors = errors
    yield page
    context.close()


def _choose_target(page, target: str, label: str) -> None:
    page.click("#target-select")
    search = page.get_by_placeholder("Search")
    if search.count():
        search.last.fill(target)
    page.get_by_role("option", name=label, exact=True).click()


def _run_on(page, target: str, node: str, host: str) -> str:
    """Pick `target` (marked as served by a live worker), Run, and return the run's mode."""
    _choose_target(page, target, f"{target} · live worker")
    expect(page.locator("#status-target")).to_contain_text(
        f"target: {target} → 1 live worker(s) on {host}", timeout=10_000)
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_have_text("✓ correct", timeout=60_000)
    result = page.locator("#run-result")
    expect(result).to_contain_text(f"measured on worker {node}")
    return result.inner_text()


def select_case(page, text: str) -> None:
    """Select the Guide row holding `text` (a click on a row selects that one case)."""
    page.locator("#guide-table .ag-center-cols-container .ag-row", has_text=text).first.locator(
        '[col-id="family"]').click()


def test_runs_and_a_tune_on_two_remote_workers_from_the_studio(remote_page, remote_ide):
    page, nodes, host = remote_page, remote_ide["nodes"], remote_ide["host"]
    page.goto(remote_ide["url"] + OP_URL)
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=60_000)
    wait_idle(page)
    # the target list puts the targets with a live worker first, marked
    page.click("#target-select")
    options = page.get_by_role("option")
    expect(options.nth(0)).to_contain_text("· live worker")
    expect(options.nth(1)).to_contain_text("· live worker")
    page.keyboard.press("Escape")
    # an ARM target no worker serves: emulated here, never said to run here
    _choose_target(page, "graviton3", "graviton3")
    expect(page.locator("#status-target")).to_have_text(
        "target: graviton3 (verified under emulation here; not timed; no live worker)"
        " · background jobs through the broker", timeout=10_000)

    _run_on(page, SECOND, nodes[SECOND], host)
    page.screenshot(path=str(ARTIFACTS / "remote_run_avx2_worker.png"), full_page=True)
    _run_on(page, "host", nodes["host"], host)
    page.screenshot(path=str(ARTIFACTS / "remote_run_host_worker.png"), full_page=True)
    assert _ide_jobs_done(remote_ide["broker"]) == 2  # both Runs went through Celery

    # a short Tune on the host worker: every measurement lands in the coordinator's database
    page.fill("#tune-budget", "2")
    page.click("#tune-button")
    expect(page.locator("#tune-status")).to_contain_text(re.compile(r"best verified"),
                                                         timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "remote_tune_host_worker.png"), full_page=True)
    assert page.js_errors == []

    with sqlite3.connect(remote_ide["folder"] / "ide_runs.sqlite") as conn:
        runs = conn.execute("SELECT target, ok, machine, result FROM runs WHERE kind = 'run' "
                            "ORDER BY id").fetchall()
    assert [(t, ok) for t, ok, _, _ in runs] == [(SECOND, 1), ("host", 1)]
    for target, _, machine, result in runs:
        worker = json.loads(result)["worker"]
        assert worker["node"] == nodes[target] and worker["flags"]
        assert machine == f"{worker['host']} ({worker['cpu']})"  # the machine that measured it
    with sqlite3.connect(remote_ide["cache"] / "tuning.sqlite") as conn:
        rows = conn.execute("SELECT target, status, extra FROM measurements").fetchall()
    # two measurements, then (where both verified) their confirmation race: all on the worker
    single = [r for r in rows if '"race"' not in r[2]]
    assert len(single) == 2 and all(status == "ok" for _, status, _ in rows), rows
    assert len(rows) - len(single) in (0, 2), rows
    for _, _, extra in rows:
        worker = json.loads(extra)["worker"]
        assert worker["node"] == nodes["host"] and worker["fingerprint"]
    assert _ide_jobs_done(remote_ide["broker"]) == 3  # and so did the Tune


def _ide_jobs_done(broker_url: str) -> int:
    """Background callbacks the IDE's job worker finished, from their task states on the
    broker (each sealed: a signature, then the state)."""
    import redis

    client = redis.Redis.from_url(broker_url)
    done = 0
    for key in client.keys("uol-ide-*:celery-task-meta-*"):
        sig, _, state = client.get(key).partition(b":")
        assert len(sig) == 64, key  # an HMAC-SHA256 in hex
        done += json.loads(state)["status"] == "SUCCESS"
    return done


def test_the_guide_measures_cases_on_the_live_workers(remote_page, remote_ide):
    """Guide page with a broker: a target's cases are measured on its live worker and say
    which; a target no worker serves keeps its prediction and says why."""
    page, nodes = remote_page, remote_ide["nodes"]
    page.goto(remote_ide["url"] + f"/guide?targets=host,{SECOND},graviton3&families=softmax")
    expect(page.locator("#guide-summary")).to_contain_text("3 cases", timeout=120_000)
    status = page.locator("#guide-measure-status")
    expect(status).to_contain_text(f"live workers of {SECOND}, host")
    wait_idle(page)
    page.fill("#guide-measure-limit", "1")
    page.click("#guide-measure-button")
    expect(status).to_contain_text("✓", timeout=60_000)
    for target in ("host", SECOND):
        expect(status).to_contain_text(f"{target}: 1 measured on worker {nodes[target]} (")
    table = page.locator("#guide-table")
    for target in ("host", SECOND):
        expect(table).to_contain_text(f"(measured on worker {nodes[target]})")
    page.screenshot(path=str(ARTIFACTS / "remote_guide_measured.png"), full_page=True)
    select_case(page, "graviton3")
    expect(page.locator("#guide-detail-measured")).to_have_text(
        "not measured: no live worker of graviton3 on the broker; model-predicted only")
    select_case(page, SECOND)
    expect(page.locator("#guide-detail-measured")).to_contain_text(
        f"measured on worker {nodes[SECOND]} (")
    assert page.js_errors == []
