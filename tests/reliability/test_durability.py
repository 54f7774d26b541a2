"""Durability: kill -9 the tuner and `uol serve` mid-run; every committed row survives.

Before each kill the committed rows are read from a second, read-only connection; after it
they must all still be there, unchanged, and `PRAGMA integrity_check` must say ok. A restarted
tuner goes on without measuring any config twice (failures included), and a restarted server
serves again from the same databases. UOL_LONG=1 kills more often.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import requests
from rel_helpers import (
    LONG,
    TUNER_SCRIPT,
    auth_headers,
    callback_body,
    free_port,
    integrity,
    kill9,
    post,
    read_rows,
    run_body,
    shown_inputs,
    start_tuner,
    start_uol_serve,
    studio_state,
    wait_http,
    wait_rows,
)

from uol_core.ops import op_text

SIZES = {"M": 16, "N": 16, "K": 16}
# seconds to wait after a new row before the kill: at a commit, mid-build, mid-measurement
KILL_DELAYS = [0.0, 1.2, 0.5, 2.0, 0.2, 1.6] if LONG else [0.0, 1.2, 0.5]
COLUMNS = "id, config, status, reason, median_s, gflops"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One UOL_CACHE_DIR (kernel build cache) for both tests; each test has its own DB file."""
    return tmp_path_factory.mktemp("durability")


def test_tuner_kill9_keeps_every_committed_row(cache):
    script = cache / "tuner.py"
    script.write_text(TUNER_SCRIPT)
    db = cache / "tuner.sqlite"
    env = {"UOL_CACHE_DIR": str(cache)}
    kept = 0
    for delay in KILL_DELAYS:
        have = len(read_rows(db, "measurements", "id"))
        proc = start_tuner(script, db, 500, env)
        try:
            wait_rows(db, "measurements", have + 1, proc)  # this run measured something
            time.sleep(delay)
            before = read_rows(db, "measurements", COLUMNS)
        finally:
            kill9(proc)
        assert integrity(db) == "ok"  # read-write first: it recovers what the crash left
        after = read_rows(db, "measurements", COLUMNS)
        assert after[:len(before)] == before, "a committed measurement was lost or changed"
        kept = len(after)
    assert kept >= len(KILL_DELAYS)
    # a restart goes on: it measures new configs and takes every known one (failures too)
    # from the database, never measuring a config twice in its search (the confirmation race
    # at its end times its finalists again on purpose, as rows of one race)
    rows = read_rows(db, "measurements", COLUMNS)
    failed = {r[1] for r in rows if r[2] != "ok"}
    assert failed, "the planted wrong results should have given failed rows"
    proc = start_tuner(script, db, len(rows) + 1, env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    trials = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert trials[-1].get("done"), out[-1000:]
    for t in trials[:-1]:
        assert t["from_db"] == (t["config"] in {r[1] for r in rows}), t
    final = read_rows(db, "measurements", COLUMNS)
    assert final[:len(rows)] == rows and len(final) > len(rows)
    searched = [config for config, extra in read_rows(db, "measurements", "config, extra")
                if '"race"' not in (extra or "")]
    twice = [c for c, n in Counter(searched).items() if n > 1]
    assert not twice, f"configs measured twice: {twice}"
    assert integrity(db) == "ok"


def _run_ok(resp: requests.Response) -> bool:
    """The Run callback answered with a verified result."""
    return resp.status_code == 200 and "✓ correct" in json.dumps(resp.json(), ensure_ascii=False)


def _tune_body(state: dict, budget: int) -> dict:
    """The Studio's Tune button (a Dash background callback: the POST starts the job)."""
    return callback_body([("tune-status", "children"), ("tune-plot", "figure"),
                          ("tune-best", "data"), ("tune-apply", "disabled")],
                         [("tune-button", "n_clicks", 1)],
                         [("studio-state", "data", state), ("tune-budget", "value", budget),
                          *shown_inputs(state)])


def test_server_kill9_keeps_rows_and_serves_again(cache):
    """Drive the real tune (background callback) and Run callbacks over HTTP, kill -9 the server
    (with its job and worker processes) mid-tune, check both SQLite files, restart, run again."""
    tuning, runs = cache / "tuning.sqlite", cache / "ide_runs.sqlite"
    env = {"UOL_CACHE_DIR": str(cache), "UOL_IDE_RUNS_DB": str(runs)}
    state = studio_state(op_text("matmul"), SIZES)
    rounds = 3 if LONG else 1
    for i in range(rounds):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        have_tune = len(read_rows(tuning, "measurements", "id"))
        have_runs = len(read_rows(runs, "runs", "id"))
        proc = start_uol_serve(port, env)
        try:
            wait_http(base + "/", proc)
            started = post(base, _tune_body(state, 40))
            assert started.status_code == 200 and "job" in started.json(), started.text[:500]
            resp = post(base, run_body(state))  # a Run while the tune is going
            assert _run_ok(resp), resp.text[:800]
            wait_rows(tuning, "measurements", have_tune + 1 + i % 2, proc)
            time.sleep(0.4 * i)
            before = read_rows(tuning, "measurements", COLUMNS)
            before_runs = read_rows(runs, "runs", "id, op, ok, result")
        finally:
            kill9(proc)
        assert len(before_runs) == have_runs + 1
        assert integrity(tuning) == "ok" and integrity(runs) == "ok"
        after = read_rows(tuning, "measurements", COLUMNS)
        assert after[:len(before)] == before, "a committed tuning row was lost or changed"
        assert read_rows(runs, "runs", "id, op, ok, result") == before_runs
        twice = [c for c, n in Counter(r[1] for r in after).items() if n > 1]
        assert not twice, f"configs measured twice: {twice}"
    # the restarted server serves pages and runs, on the same databases
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_uol_serve(port, env)
    try:
        wait_http(base + "/", proc)
        assert requests.get(base + "/", timeout=30, headers=auth_headers(base)).status_code == 200
        resp = post(base, run_body(state))
        assert _run_ok(resp), resp.text[:800]
        ids = [r[0] for r in read_rows(runs, "runs", "id")]
        assert ids == list(range(1, rounds + 2))
    finally:
        kill9(proc)
    assert integrity(tuning) == "ok" and integrity(runs) == "ok"
