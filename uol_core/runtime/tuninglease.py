"""A lease per tuning key, kept in the tuning database, so one tuner measures a key at a time.

Two tuners timing the same kernel side by side share the cores, so each measures the other's
load and their rows disagree (214 GFLOP/s from one, 0.3 from the other). With the lease the
second tuner waits; once it holds the key, every config the first measured is answered from
the database and only new configs are measured.

A lease names its holder (host, pid and a random id: threads of one process are told apart)
and expires unless renewed; the holder renews it after every measurement. A holder that died
(its pid is gone on this host) or stopped renewing loses the key to the next tuner.
"""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
import time
from dataclasses import dataclass

from uol_core.runtime.tuningdb import TuningDB, TuningKey

LEASE_WAIT_S = 300.0  # how long a tuner waits for a key before giving up (a tune takes minutes)
LEASE_POLL_S = 0.2


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a key, and until when unless renewed."""

    holder: str
    host: str
    pid: int
    expires: float

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, lease until {time.strftime('%H:%M:%S', time.localtime(self.expires))}"


class TuningLease:
    """The lease of one tuner on one key: `acquire` (waits), `renew`, `release`; a context
    manager releases on exit."""

    def __init__(self, db: TuningDB, key: TuningKey, ttl_s: float):
        self.db, self.key, self.ttl_s = db, key, float(ttl_s)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        self.held = False
        self.blocker: LeaseHolder | None = None  # the other holder when acquire gave up

    def try_acquire(self) -> bool:
        """Take the key if it is free, expired, or held by a process that is gone."""
        conn = self.db.conn
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")  # one writer decides: no two tuners both see it free
        try:
            row = conn.execute("SELECT holder, host, pid, expires FROM leases WHERE key=?",
                               (self.key.lease_id(),)).fetchone()
            other = LeaseHolder(*row) if row is not None else None
            if other is not None and other.holder != self.holder and _alive(other, now):
                conn.execute("ROLLBACK")
                self.blocker = other
                return False
            conn.execute("INSERT OR REPLACE INTO leases (key, holder, host, pid, acquired, "
                         "expires) VALUES (?,?,?,?,?,?)",
                         (self.key.lease_id(), self.holder, socket.gethostname(), os.getpid(),
                          now, now + self.ttl_s))
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.held, self.blocker = True, None
        self.db.lease_holder = self.holder
        return True

    def acquire(self, wait_s: float = LEASE_WAIT_S) -> bool:
        """Take the key, waiting up to `wait_s` for another tuner to finish; False if it did
        not finish in time (`blocker` says who holds the key)."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(LEASE_POLL_S)
        return True

    def renew(self) -> None:
        """Push the expiry out by the lease's time to live (after every measurement)."""
        if self.held:
            self.db.conn.execute("UPDATE leases SET expires=? WHERE key=? AND holder=?",
                                 (time.time() + self.ttl_s, self.key.lease_id(), self.holder))

    def release(self) -> None:
        if self.held:
            self.db.conn.execute("DELETE FROM leases WHERE key=? AND holder=?",
                                 (self.key.lease_id(), self.holder))
            self.held = False
            self.db.lease_holder = None

    def __enter__(self) -> TuningLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _alive(other: LeaseHolder, now: float) -> bool:
    """An unexpired lease whose process still runs (checked only on this host)."""
    if other.expires <= now:
        return False
    if other.host != socket.gethostname():
        return True
    try:
        os.kill(other.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True
