"""One tuner per key at a time (a lease in the tuning database), and rows that disagree about
one config always carry a note with the conditions of both measurements."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time

from uol_core.acg.fixtures import runnable_target
from uol_core.acg.session import open_session
from uol_core.acg.tuner import tuning_key
from uol_core.ops import load_op
from uol_core.runtime.tuningdb import DISAGREE_RATIO, TuningDB
from uol_core.runtime.tuninglease import TuningLease

TARGET = runnable_target()
SIZES = {"M": 40, "N": 40, "K": 40}


def _key():
    return tuning_key(load_op("matmul"), SIZES, TARGET)


def _unnoted_contradictions(db: TuningDB, key) -> list[tuple[int, int]]:
    """Pairs (earlier id, later id) of rows of one config that disagree, the later without a note."""
    by_config: dict[str, list[dict]] = {}
    for row in db.rows(key):
        by_config.setdefault(row["config"], []).append(row)
    bad = []
    for rows in by_config.values():
        for i, later in enumerate(rows):
            for earlier in rows[:i]:
                differ = earlier["status"] != later["status"] or (
                    later["status"] == "ok" and max(earlier["gflops"], later["gflops"])
                    > DISAGREE_RATIO * min(earlier["gflops"], later["gflops"]))
                if differ and not later["note"]:
                    bad.append((earlier["id"], later["id"]))
    return bad


def test_a_held_key_is_refused_to_a_second_tuner_until_released(tmp_path):
    path = tmp_path / "t.sqlite"
    first, second = TuningDB(path), TuningDB(path)
    a, b = TuningLease(first, _key(), ttl_s=60), TuningLease(second, _key(), ttl_s=60)
    assert a.try_acquire()
    assert not b.try_acquire() and "pid" in b.blocker.describe()
    assert not b.acquire(wait_s=0.3)  # waits, then gives up with the holder named
    a.release()
    assert b.try_acquire()
    other_key = tuning_key(load_op("matmul"), {"M": 8, "N": 8, "K": 8}, TARGET)
    assert TuningLease(first, other_key, ttl_s=60).try_acquire()  # leases are per key
    b.release()


def test_a_lease_of_a_dead_or_silent_tuner_is_taken_over(tmp_path):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    stale = TuningLease(db, _key(), ttl_s=60)
    assert stale.try_acquire()
    db.conn.execute("UPDATE leases SET pid=?", (dead_pid,))  # its process has exited
    assert TuningLease(TuningDB(path), _key(), ttl_s=60).try_acquire()
    db.conn.execute("UPDATE leases SET pid=?, expires=?", (db.conditions()["pid"], time.time() - 1))
    assert TuningLease(TuningDB(path), _key(), ttl_s=60).try_acquire()  # expired: not renewed


def test_two_tuners_on_one_key_never_measure_a_config_twice(tmp_path):
    path = tmp_path / "t.sqlite"
    results: dict[str, object] = {}
    errors: list[BaseException] = []
    started = threading.Barrier(2)

    def tune(name: str) -> None:
        try:
            session = open_session(load_op("matmul"), SIZES, TARGET, db=TuningDB(path),
                                   min_seconds=0.0)
            started.wait()
            try:
                results[name] = session.tune(budget=3, top=3)
            finally:
                session.close()
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)
            started.abort()  # the other tuner must not wait for this one at the barrier

    threads = [threading.Thread(target=tune, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    db = TuningDB(path)
    rows = db.rows(_key())
    configs = [r["config"] for r in rows if '"race"' not in r["extra"]]
    assert len(configs) == len(set(configs)) >= 3  # one row per config: nothing measured twice
    races = {json.loads(r["extra"])["race"] for r in rows if '"race"' in r["extra"]}
    assert len(races) <= 1  # the second tuner found the first one's race too
    fresh = {name: [t for t in res.trials if not t.from_db] for name, res in results.items()}
    # whoever got the key second found the first one's rows in the database
    assert sorted(len(v) for v in fresh.values())[0] == 0, {k: len(v) for k, v in fresh.items()}
    conditions = [json.loads(r["conditions"]) for r in rows]
    assert all(c["lease"] and c["tuners"] >= 1 and c["pid"] for c in conditions)
    assert db.conn.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0  # released
    assert not _unnoted_contradictions(db, _key())


def test_a_second_tuner_that_cannot_wait_says_who_holds_the_key(tmp_path):
    path = tmp_path / "t.sqlite"
    holder = TuningLease(TuningDB(path), _key(), ttl_s=60)
    assert holder.try_acquire()
    session = open_session(load_op("matmul"), SIZES, TARGET, db=TuningDB(path),
                           lease_wait_s=0.3)
    try:
        result = session.tune(budget=2)
    finally:
        session.close()
    assert result.best is None and not result.trials
    assert "another tuner" in result.stopped and "pid" in result.stopped
    assert not TuningDB(path).rows(_key())  # nothing was measured beside the holder
    holder.release()


def test_disagreeing_rows_are_all_kept_and_noted(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    key, cfg = _key(), "isa=avx2,mr=4"
    first = db.record(key, cfg, {"status": "ok", "gflops": 214.0, "median_s": 1e-5})
    second = db.record(key, cfg, {"status": "ok", "gflops": 0.3, "median_s": 7e-3})
    third = db.record(key, cfg, {"status": "ok", "gflops": 214.0 * 0.9, "median_s": 1.1e-5})
    rows = {r["id"]: r for r in db.rows(key)}
    assert set(rows) == {first, second, third}  # every record written
    assert rows[first]["note"] == ""
    note = rows[second]["note"]
    assert f"row #{first}" in note and "214" in note and "0.3" in note and "conditions" in note
    assert f"row #{second}" in rows[third]["note"]  # agrees with the first, not the second
    assert not _unnoted_contradictions(db, key)
    failed = db.record(key, "isa=avx2,mr=6", {"status": "crash", "reason": "SIGSEGV"})
    again = db.record(key, "isa=avx2,mr=6", {"status": "crash", "reason": "SIGSEGV"})
    assert {rows["note"] for rows in db.config_rows(key, "isa=avx2,mr=6")} == {""}
    assert failed < again


def test_a_database_from_before_the_notes_gains_the_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE measurements (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,
          op_hash TEXT NOT NULL, op_name TEXT NOT NULL, shapes TEXT NOT NULL,
          dtypes TEXT NOT NULL, target TEXT NOT NULL, compiler TEXT NOT NULL,
          generator TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL,
          reason TEXT NOT NULL DEFAULT '', median_s REAL, iqr_s REAL, gflops REAL,
          max_abs_err REAL, max_rel_err REAL, predicted_gflops REAL,
          extra TEXT NOT NULL DEFAULT '{}');""")
    conn.close()
    db = TuningDB(path)
    db.record(_key(), "isa=avx2", {"status": "ok", "gflops": 1.0})
    (row,) = db.rows(_key())
    assert row["note"] == "" and json.loads(row["conditions"])["pid"]
