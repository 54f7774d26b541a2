"""Run history of the IDE: one SQLite row per Studio run, plus the tuning database's rows when present.

Every run gets an integer id (the permalink /run/<id>) and keeps the ODL, sizes, config and
result, so a run can be reopened, compared and exported later.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    kind TEXT NOT NULL,
    op TEXT NOT NULL,
    backend TEXT NOT NULL,
    target TEXT NOT NULL,
    sizes TEXT NOT NULL,
    config TEXT NOT NULL,
    odl TEXT NOT NULL,
    ok INTEGER NOT NULL,
    median_s REAL,
    gflops REAL,
    gbs REAL,
    result TEXT NOT NULL,
    kernel TEXT NOT NULL DEFAULT '',
    mode TEXT NOT NULL DEFAULT 'timed',
    machine TEXT NOT NULL DEFAULT '',
    pinned INTEGER NOT NULL DEFAULT 0
)"""
COLUMNS = ("id", "created", "kind", "op", "backend", "target", "sizes", "config", "odl", "ok",
           "median_s", "gflops", "gbs", "result", "kernel", "mode", "machine", "pinned")
JSON_COLUMNS = ("sizes", "config", "result")
# Columns added after the first schema: an older database gains them (its rows get the default).
ADDED_COLUMNS = {"mode": "TEXT NOT NULL DEFAULT 'timed'", "machine": "TEXT NOT NULL DEFAULT ''",
                 "pinned": "INTEGER NOT NULL DEFAULT 0"}
# How a run's time was obtained; only "timed" runs are compared by time or put on a roofline.
TIMED, PROFILED, INTERPRETED, UNTIMED = "timed", "profiled", "interpreted", "untimed"
EMULATED = "verified under emulation; not timed"  # cross-built for another CPU, run by qemu


def db_path() -> Path:
    """$UOL_IDE_RUNS_DB, else ide_runs.sqlite in the private per-user cache root
    (uol_core.runtime.usercache: $UOL_CACHE_DIR, else $XDG_CACHE_HOME/uol, else ~/.cache/uol)."""
    from uol_core.runtime.usercache import private_dir

    if os.environ.get("UOL_IDE_RUNS_DB"):
        return Path(os.environ["UOL_IDE_RUNS_DB"])
    return private_dir() / "ide_runs.sqlite"


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(db_path(), timeout=10)
    conn.execute(SCHEMA)
    have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    for name, decl in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
            if name == "mode":  # older rows: a profile was never a timed run
                conn.execute("UPDATE runs SET mode = CASE WHEN kind = 'profile' THEN 'profiled' "
                             "WHEN median_s IS NULL THEN 'untimed' ELSE 'timed' END")
    return conn


def run_mode(kind: str, result: dict) -> str:
    """How the run's time was obtained: a profile (callgrind or the cycle-counter build) is
    "profiled", the Triton interpreter "interpreted", a run with a median "timed"."""
    if kind == "profile" or str(result.get("mode", "")).startswith("measured (profile"):
        return PROFILED
    if "interpret" in str(result.get("mode", "")).lower():
        return INTERPRETED
    if "under emulation" in str(result.get("mode", "")):
        return EMULATED
    return TIMED if result.get("median_s") else UNTIMED


def peak_of(row: dict) -> str:
    """The HFL peak a recorded run was held to (a bf16 GEMM: bf16); fp32 for runs recorded
    before runs named it."""
    return ((row.get("result") or {}).get("roofline") or {}).get("dtype", "fp32")


def this_machine() -> str:
    """Host name and CPU model: runs from different machines are told apart in comparisons."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:  # not Linux: the platform's own name is enough
        pass
    return f"{platform.node()} ({cpu})"


def measured_on(result: dict) -> str:
    """The machine a result was measured on: a remote worker's host (`uol serve --broker`),
    else this one."""
    worker = result.get("worker") or {}
    return f"{worker['host']} ({worker['cpu']})" if worker.get("host") else this_machine()


def record(kind: str, request: dict, result: dict, kernel: str = "") -> int:
    """Store one run (written at once, so a crash later loses nothing); returns its id.
    The run carries op, sizes, target, backend, config, mode and the machine it ran on."""
    sizes = result.get("sizes") or request.get("sizes") or {}
    row = (time.time(), kind, result.get("op") or request.get("op", "?"), request["backend"],
           request["target"], json.dumps(sizes),
           json.dumps(result.get("config") or request.get("config") or {}), request["odl"],
           int(bool(result.get("ok"))), result.get("median_s"), result.get("gflops"),
           result.get("gbs"), json.dumps(result), kernel, run_mode(kind, result),
           measured_on(result))
    with _connect() as conn:
        names = COLUMNS[1:-1]  # a new run is never pinned
        cur = conn.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES "
                           f"({', '.join('?' * len(names))})", row)
        return int(cur.lastrowid)


def _as_dict(row: tuple) -> dict[str, Any]:
    data = dict(zip(COLUMNS, row))
    for key in JSON_COLUMNS:
        data[key] = json.loads(data[key] or "{}")
    data["ok"] = bool(data["ok"])
    data["pinned"] = bool(data["pinned"])
    return data


def get(run_id: int) -> dict[str, Any] | None:
    """One run by id, or None."""
    with _connect() as conn:
        row = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs WHERE id = ?",
                           (int(run_id),)).fetchone()
    return _as_dict(row) if row else None


def runs(op: str | None = None, backend: str | None = None, target: str | None = None,
         ok: bool | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """Runs, newest first, filtered by op / backend / target / correctness."""
    where, args = [], []
    for column, value in (("op", op), ("backend", backend), ("target", target)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    if ok is not None:
        where.append("ok = ?")
        args.append(int(ok))
    sql = f"SELECT {', '.join(COLUMNS)} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ?"
    with _connect() as conn:
        rows = conn.execute(sql, (*args, limit)).fetchall()
    return [_as_dict(r) for r in rows]


def pin(run_id: int, pinned: bool = True) -> dict[str, Any]:
    """Pin run `run_id` as the baseline of its op, sizes, backend and target (the one pinned
    before it is unpinned: one baseline per kind of run), or unpin it; returns the run.
    KeyError for an unknown id."""
    row = get(run_id)
    if row is None:
        raise KeyError(f"no run #{run_id} in the history")
    with _connect() as conn:
        if pinned:
            conn.execute("UPDATE runs SET pinned = 0 WHERE op = ? AND sizes = ? AND backend = ? "
                         "AND target = ?", (row["op"], json.dumps(row["sizes"]), row["backend"],
                                            row["target"]))
        conn.execute("UPDATE runs SET pinned = ? WHERE id = ?", (int(pinned), int(run_id)))
    return {**row, "pinned": pinned}


def baseline_for(row: dict) -> dict[str, Any] | None:
    """The pinned run of `row`'s op, sizes, backend and target, or None (not `row` itself)."""
    with _connect() as conn:
        found = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs WHERE pinned = 1 AND op = ? "
                             "AND sizes = ? AND backend = ? AND target = ? AND id != ? "
                             "ORDER BY id DESC LIMIT 1",
                             (row["op"], json.dumps(row["sizes"]), row["backend"],
                              row["target"], int(row.get("id") or 0))).fetchone()
    return _as_dict(found) if found else None


def timing(row: dict) -> dict[str, Any]:
    """A run's time as it is shown: median, n, the 95% CI, noisy and its reason. Runs stored
    before samples were kept have no CI; their noisy flag comes from the IQR alone."""
    from uol_core.runtime import stats

    res = row.get("result") or {}
    if not row.get("median_s"):
        return {}
    out = {"median_s": row["median_s"], "samples": res.get("samples")}
    if "noisy" in res:  # judged when it ran, with the machine's load then
        return {**out, **{k: res[k] for k in ("n", "ci_low_s", "ci_high_s", "noisy",
                                              "noise_reason") if k in res}}
    return {**out, **stats.summary(res.get("samples"), median_s=row["median_s"],
                                   iqr_s=res.get("iqr_s"))}


def compare_rows(before: dict, after: dict) -> str:
    """'#5 is 1.24x faster than #3 (95% CI 1.18-1.30)', 'no significant difference ...', or
    the medians' ratio with 'no samples stored: significance unknown' for older runs."""
    from uol_core.runtime import stats

    verdict = stats.compare((before.get("result") or {}).get("samples"),
                            (after.get("result") or {}).get("samples"),
                            a_median=before.get("median_s"), b_median=after.get("median_s"),
                            a_label=f"#{before['id']}", b_label=f"#{after['id']}")
    return verdict.text


def sizes_text(sizes: dict) -> str:
    """'M=256,K=128,N=256': the sizes as a user types them."""
    return ",".join(f"{k}={v}" for k, v in sizes.items()) or "-"


def describe(row: dict) -> str:
    """One line naming a run fully: id, op, sizes, backend/target, mode and its time."""
    timing = f"{row['median_s'] * 1e6:.1f} µs" if row.get("median_s") else "no time"
    return (f"#{row['id']} {row['op']} {sizes_text(row['sizes'])} {row['backend']}/"
            f"{row['target']} {row.get('mode', TIMED)} {timing}"
            + (" (pinned baseline)" if row.get("pinned") else ""))


def tuning_rows(limit: int = 300) -> list[dict[str, Any]]:
    """Newest rows of the compiler's tuning database (every tuner measurement), [] if none."""
    from uol_core.runtime.tuningdb import default_path

    path = default_path()
    if not path.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT id, ts, op_name, shapes, target, config, status, reason, "
                            "median_s, gflops FROM measurements ORDER BY id DESC LIMIT ?",
                            (limit,)).fetchall()
        conn.close()
    except sqlite3.Error:  # an older schema or a locked file must not break the Reports page
        return []
    return [dict(r) for r in rows]


def diff_configs(before: dict, after: dict) -> list[tuple[str, Any, Any]]:
    """Knobs whose value changed between two runs: (name, before, after)."""
    keys = list(dict.fromkeys([*before, *after]))
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]
