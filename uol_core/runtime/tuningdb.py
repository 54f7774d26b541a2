"""The tuning database: SQLite (WAL), one row per measurement or failure, written at once.

Rows are keyed by op hash, shapes, dtypes, target fingerprint, compiler and generator
versions. Failures are kept (and never retried); `replay` answers from the rows alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

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
    predicted_gflops REAL, extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS by_key ON measurements (op_hash, shapes, dtypes, target, compiler,
                                                   generator, config);
"""


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


def op_hash(op) -> str:
    """Content hash of an op (its ODL text when known)."""
    return hashlib.sha256((op.source or repr(op)).encode()).hexdigest()[:16]


def target_fingerprint(target) -> str:
    """Name plus a hash of every HFL fact (a re-probed host with new numbers is a new target)."""
    facts = json.dumps([(k, v, str(p)) for k, v, p in target.facts()], sort_keys=True, default=str)
    return f"{target.name}:{hashlib.sha256(facts.encode()).hexdigest()[:12]}"


def default_path() -> Path:
    root = Path(os.environ.get("UOL_CACHE_DIR") or Path.home() / ".cache" / "uol-studio")
    root.mkdir(parents=True, exist_ok=True)
    return root / "tuning.sqlite"


class TuningDB:
    """Append-only store of measurements; every `record` is committed before it returns."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()
        self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # durable against a killed process
        self.conn.executescript(SCHEMA)
        self.conn.row_factory = sqlite3.Row

    def record(self, key: TuningKey, config: str, result: dict) -> None:
        """Write one measurement or failure now."""
        self.conn.execute(
            "INSERT INTO measurements (ts, op_hash, op_name, shapes, dtypes, target, compiler, "
            "generator, config, status, reason, median_s, iqr_s, gflops, max_abs_err, "
            "max_rel_err, predicted_gflops, extra) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (time.time(), key.op_hash, key.op_name, key.shapes, key.dtypes, key.target,
             key.compiler, key.generator, config, result.get("status", "error"),
             result.get("reason", ""), result.get("median_s"), result.get("iqr_s"),
             result.get("gflops"), result.get("max_abs_err"), result.get("max_rel_err"),
             result.get("predicted_gflops"),
             json.dumps({k: v for k, v in result.items() if k not in _COLUMNS}, default=str)))

    def rows(self, key: TuningKey) -> list[dict]:
        """Every row for `key`, oldest first."""
        cur = self.conn.execute(
            "SELECT * FROM measurements WHERE op_hash=? AND shapes=? AND dtypes=? AND target=? "
            "AND compiler=? AND generator=? ORDER BY id",
            (key.op_hash, key.shapes, key.dtypes, key.target, key.compiler, key.generator))
        return [dict(r) for r in cur.fetchall()]

    def lookup(self, key: TuningKey, config: str) -> dict | None:
        """The first row of `config` under `key` (a failure counts: it is never retried)."""
        for row in self.rows(key):
            if row["config"] == config:
                return row
        return None

    def best(self, key: TuningKey) -> dict | None:
        """The fastest verified row for `key`."""
        ok = [r for r in self.rows(key) if r["status"] == "ok" and r["gflops"]]
        return max(ok, key=lambda r: r["gflops"]) if ok else None

    def close(self) -> None:
        self.conn.close()


_COLUMNS = {"status", "reason", "median_s", "iqr_s", "gflops", "max_abs_err", "max_rel_err",
            "predicted_gflops"}
