"""The tuning database: SQLite (WAL), one row per measurement or failure, written at once.

Rows are keyed by op hash, shapes, dtypes, target fingerprint, compiler and generator
versions. Failures are kept (and never retried); `replay` answers from the rows alone.

Every row carries the conditions it was measured under (host, pid, load, tuners active on
this database). A tuner holds a lease on its key (tuninglease.py) so that two tuners never
measure the same op side by side, where each slows the other and they disagree. A row that
still contradicts an earlier row of the same config is kept (no record is ever dropped) with a
note naming that row and both sets of conditions.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from uol_core.runtime.usercache import private_dir

SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    op_hash TEXT NOT NULL, op_name TEXT NOT NULL, shapes TEXT NOT NULL, dtypes TEXT NOT NULL,
    target TEXT NOT NULL, compiler TEXT NOT NULL, generator TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,          -- ok | mismatch | crash | timeout | build_error | error
    reason TEXT NOT NULL DEFAULT '',
    median_s REAL, iqr_s REAL, gflops REAL, max_abs_err REAL, max_rel_err REAL,
    predicted_gflops REAL, extra TEXT NOT NULL DEFAULT '{}',
    conditions TEXT NOT NULL DEFAULT '{}',  -- JSON: host, pid, load1, cpus, tuners, lease
    note TEXT NOT NULL DEFAULT ''           -- set when this row disagrees with an earlier one
);
CREATE INDEX IF NOT EXISTS by_key ON measurements (op_hash, shapes, dtypes, target, compiler,
                                                   generator, config);
CREATE TABLE IF NOT EXISTS leases (
    key TEXT PRIMARY KEY,          -- TuningKey.lease_id()
    holder TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    acquired REAL NOT NULL, expires REAL NOT NULL
);
"""
# Columns added after the first release: older databases gain them on open.
_ADDED_COLUMNS = {"conditions": "TEXT NOT NULL DEFAULT '{}'", "note": "TEXT NOT NULL DEFAULT ''"}
# Two verified timings of one config further apart than this factor disagree: run-to-run noise
# on a quiet machine stays well inside it, a contended or throttled run does not.
DISAGREE_RATIO = 1.5


@dataclass(frozen=True)
class TuningKey:
    """What a measurement is about, apart from the config."""

    op_hash: str
    op_name: str
    shapes: str  # JSON of the bound sizes, sorted
    dtypes: str
    target: str  # target fingerprint
    compiler: str
    generator: str
    # older spellings of the same generator, each a prefix ('c-<hash>/'): rows written under
    # one are read as this key's own (a new key form never loses a record); rows are written
    # under `generator` only
    older: tuple[str, ...] = ()

    def generator_clause(self) -> tuple[str, tuple]:
        """The SQL test of a row's generator against this key, with its parameters."""
        tests = ["generator=?"] + ["substr(generator, 1, ?)=?"] * len(self.older)
        params: list = [self.generator]
        for prefix in self.older:
            params += [len(prefix), prefix]
        return "(" + " OR ".join(tests) + ")", tuple(params)

    def lease_id(self) -> str:
        """One text naming the key (the lease table's primary key)."""
        return hashlib.sha256("\x1f".join((self.op_hash, self.shapes, self.dtypes, self.target,
                                           self.compiler, self.generator)).encode()).hexdigest()


def op_hash(op) -> str:
    """Content hash of an op (its ODL text when known)."""
    return hashlib.sha256((op.source or repr(op)).encode()).hexdigest()[:16]


def target_fingerprint(target) -> str:
    """Name plus a hash of every HFL fact (a re-probed host with new numbers is a new target)."""
    facts = json.dumps([(k, v, str(p)) for k, v, p in target.facts()], sort_keys=True, default=str)
    return f"{target.name}:{hashlib.sha256(facts.encode()).hexdigest()[:12]}"


def default_path() -> Path:
    return private_dir() / "tuning.sqlite"


def _while_locked(step, limit_s: float = 30.0):
    """Run `step` again while SQLite says the database is locked. Switching a new database to
    WAL and creating its tables take an exclusive lock that SQLite's busy timeout does not
    wait for: two tuners opening a fresh database at once would otherwise fail."""

    deadline = time.monotonic() + limit_s
    delay = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(0.2, delay * 2)


class TuningDB:
    """Append-only store of measurements; every `record` is committed before it returns."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()
        self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        _while_locked(lambda: self.conn.execute("PRAGMA journal_mode=WAL"))
        self.conn.execute("PRAGMA synchronous=NORMAL")  # durable against a killed process
        _while_locked(lambda: self.conn.executescript(SCHEMA))
        _while_locked(self._add_columns)
        self.conn.row_factory = sqlite3.Row
        self.lease_holder: str | None = None  # set by a TuningLease while it holds a key

    def _add_columns(self) -> None:
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(measurements)")}
        for name, decl in _ADDED_COLUMNS.items():
            if name not in have:
                try:
                    self.conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {decl}")
                except sqlite3.OperationalError as err:  # another process added it first
                    if "duplicate column" not in str(err):
                        raise

    def record(self, key: TuningKey, config: str, result: dict) -> int:
        """Write one measurement or failure now (its id is returned); a row that disagrees with
        an earlier row of the same config gets a note with both rows' conditions."""
        conditions = self.conditions()
        note = disagreement_note(self.config_rows(key, config), result, conditions)
        cur = self.conn.execute(
            "INSERT INTO measurements (ts, op_hash, op_name, shapes, dtypes, target, compiler, "
            "generator, config, status, reason, median_s, iqr_s, gflops, max_abs_err, "
            "max_rel_err, predicted_gflops, extra, conditions, note) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (time.time(), key.op_hash, key.op_name, key.shapes, key.dtypes, key.target,
             key.compiler, key.generator, config, result.get("status", "error"),
             result.get("reason", ""), result.get("median_s"), result.get("iqr_s"),
             result.get("gflops"), result.get("max_abs_err"), result.get("max_rel_err"),
             result.get("predicted_gflops"),
             json.dumps({k: v for k, v in result.items() if k not in _COLUMNS}, default=str),
             json.dumps(conditions, sort_keys=True), note))
        return int(cur.lastrowid)

    def conditions(self) -> dict:
        """What a measurement ran beside: this process, the machine's load, live tuners."""
        now = time.time()
        tuners = self.conn.execute("SELECT COUNT(*) FROM leases WHERE expires > ?",
                                   (now,)).fetchone()[0]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return {"host": socket.gethostname(), "pid": os.getpid(), "cpus": os.cpu_count(),
                "load1": None if load is None else round(load, 2), "tuners": int(tuners),
                "lease": self.lease_holder}

    def config_rows(self, key: TuningKey, config: str) -> list[dict]:
        """Every row of one config under `key`, oldest first."""
        generator, params = key.generator_clause()
        cur = self.conn.execute(
            "SELECT * FROM measurements WHERE op_hash=? AND shapes=? AND dtypes=? AND target=? "
            f"AND compiler=? AND {generator} AND config=? ORDER BY id",
            (key.op_hash, key.shapes, key.dtypes, key.target, key.compiler, *params, config))
        return [dict(r) for r in cur.fetchall()]

    def rows(self, key: TuningKey) -> list[dict]:
        """Every row for `key`, oldest first."""
        generator, params = key.generator_clause()
        cur = self.conn.execute(
            "SELECT * FROM measurements WHERE op_hash=? AND shapes=? AND dtypes=? AND target=? "
            f"AND compiler=? AND {generator} ORDER BY id",
            (key.op_hash, key.shapes, key.dtypes, key.target, key.compiler, *params))
        return [dict(r) for r in cur.fetchall()]

    def lookup(self, key: TuningKey, config: str) -> dict | None:
        """The first row of `config` under `key` (a failure counts: it is never retried)."""
        rows = self.config_rows(key, config)
        return rows[0] if rows else None

    def best(self, key: TuningKey) -> dict | None:
        """The fastest verified row for `key`. A confirmation race (rows whose extra names a
        `race`: configs timed in turn) settles every row recorded before it: then the race's
        rows and the rows recorded after them compete."""
        rows = self.rows(key)
        races = [i for i, r in enumerate(rows) if '"race"' in (r.get("extra") or "")]
        if races:
            last = json.loads(rows[races[-1]]["extra"])["race"]
            first = next(i for i in races if json.loads(rows[i]["extra"])["race"] == last)
            rows = rows[first:]
        ok = [r for r in rows if r["status"] == "ok" and r["gflops"]]
        return max(ok, key=lambda r: r["gflops"]) if ok else None

    def close(self) -> None:
        self.conn.close()


_COLUMNS = {"status", "reason", "median_s", "iqr_s", "gflops", "max_abs_err", "max_rel_err",
            "predicted_gflops"}


def disagreement_note(earlier: list[dict], result: dict, conditions: dict) -> str:
    """'' when `result` agrees with every earlier row of its config, else a note naming the
    first row it contradicts (status, or GFLOP/s apart by more than DISAGREE_RATIO) and the
    conditions of both measurements."""
    status = result.get("status", "error")
    for row in earlier:
        differ = row["status"] != status
        if not differ and status == "ok":
            a, b = row.get("gflops") or 0.0, result.get("gflops") or 0.0
            differ = min(a, b) <= 0 or max(a, b) / min(a, b) > DISAGREE_RATIO
        if differ:
            return (f"disagrees with row #{row['id']} of this config: {_summary(row)} then, "
                    f"{_summary(result)} now; conditions then {row.get('conditions') or '{}'}, "
                    f"now {json.dumps(conditions, sort_keys=True)}")
    return ""


def _summary(row: dict) -> str:
    status = row.get("status", "error")
    return f"{status} {row.get('gflops') or 0.0:.3g} GFLOP/s" if status == "ok" else status
