"""A machine's own record of the signed jobs it has taken, so that replay protection does not
rest on one Redis key.

A worker claims each job's nonce in Redis (`SET NX`), and that claim is what stops a second
worker, anywhere, from running it. But whoever can write to Redis can also delete the claim,
and a captured job would then run again. So each worker also writes the nonce to this ledger,
an SQLite file in the per-user cache (0700 folder, 0600 file) that every worker of the same
user on the same machine shares, and runs a job only when both say it is new. A row is kept
for `KEEP_S`, far longer than a job stays valid (signing.MAX_AGE_S plus MAX_FUTURE_S): by the
time a row is pruned, its job is refused as expired anyway. The file outlives the worker, so a
restart does not reopen a job either.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

KEEP_S = 2 * 24 * 3600.0  # as long as the Redis claim keys live
PRUNE_EVERY_S = 60.0
WORKER_LEDGER = "seen-jobs.sqlite"  # target workers (`uol worker`)
IDE_LEDGER = "seen-ide-jobs.sqlite"  # the IDE's job worker (`uol serve --broker`)


def ledger_path(name: str) -> Path:
    """`name` in the private `remote` folder of the per-user cache (created 0700, checked)."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.runtime.usercache import private_dir

    return private_dir("remote") / name


class JobLedger:
    """Nonces seen on this machine, each with the time until which it is kept."""

    def __init__(self, path: Path):
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)  # created readable by its owner alone before SQLite opens it
        # several workers (processes) of one machine share the file: wait for each other's
        # short transactions instead of failing
        self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS seen (nonce TEXT PRIMARY KEY, "
                           "until REAL NOT NULL)")
        self._conn.execute("CREATE INDEX IF NOT EXISTS seen_until ON seen (until)")
        self._lock = threading.Lock()
        self._pruned_at = 0.0

    def first_sight(self, nonce: str, keep_s: float = KEEP_S) -> bool:
        """Record `nonce`; True when no job of that nonce was recorded here before (within
        the time rows are kept), False for a replay or a redelivered copy."""
        now = time.time()
        with self._lock:
            if now - self._pruned_at > PRUNE_EVERY_S:
                self._conn.execute("DELETE FROM seen WHERE until < ?", (now,))
                self._pruned_at = now
            cursor = self._conn.execute("INSERT OR IGNORE INTO seen (nonce, until) "
                                        "VALUES (?, ?)", (nonce, now + keep_s))
            return cursor.rowcount == 1

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_OPEN: dict[tuple[int, str], JobLedger] = {}
_OPEN_LOCK = threading.Lock()


def ledger(name: str) -> JobLedger:
    """This process's ledger `name` (opened once per process: a pool child forked from a
    parent that had it open opens its own connection)."""
    key = (os.getpid(), name)
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = JobLedger(ledger_path(name))
        return _OPEN[key]
