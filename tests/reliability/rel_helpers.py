"""Helpers of the reliability suite: loopback servers, Dash callback bodies, fuzz counters.

UOL_LONG=1 turns on the long fuzz, kill and load runs; the default run stays short.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import requests

LONG = os.environ.get("UOL_LONG") == "1"
REPO = Path(__file__).resolve().parents[2]
FUZZ_COUNTS: Counter = Counter()  # inputs run per fuzz target, printed at the end of the session
# base URL -> token of the servers these tests start (every server needs one, loopback too)
TOKENS: dict[str, str] = {}
TOKEN_ENV = "UOL_SERVE_TOKEN"


def auth_headers(base: str) -> dict:
    """The token header for a server started here ({} for one whose token a test withholds)."""
    return {"X-UOL-Token": TOKENS[base]} if base in TOKENS else {}


def target_name() -> str:
    """A shipped AVX2 target when the CPU has AVX2 (no host probe in tests), else 'host'."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx2-desktop" if " avx2" in flags and " fma" in flags else "host"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (tests bind loopback only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 120.0) -> None:
    """Wait until `url` answers at all (any status)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            requests.get(url, timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def start_uol_serve(port: int, env: dict, *args: str) -> subprocess.Popen:
    """`uol serve` on 127.0.0.1:port in its own process group (so kill -9 takes its workers too)."""
    cmd = [sys.executable, "-m", "uol_cli.main", "serve", "--host", "127.0.0.1",
           "--port", str(port), *args]
    if not {"--token", "--token-file", "--no-token"} & set(args) and TOKEN_ENV not in env:
        env = {**env, TOKEN_ENV: secrets.token_urlsafe(24)}  # through the environment, as a user
        TOKENS[f"http://127.0.0.1:{port}"] = env[TOKEN_ENV]
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **env}, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def callback_body(outputs: list[tuple[str, str]], inputs: list[tuple[str, str, object]],
                  state: list[tuple[str, str, object]]) -> dict:
    """The JSON a Dash 4 renderer posts to /_dash-update-component for one callback."""
    out_id = ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".." if len(outputs) > 1 \
        else f"{outputs[0][0]}.{outputs[0][1]}"
    return {"output": out_id,
            "outputs": [{"id": i, "property": p} for i, p in outputs] if len(outputs) > 1
            else {"id": outputs[0][0], "property": outputs[0][1]},
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
            "changedPropIds": [f"{i}.{p}" for i, p, _ in inputs]}


RUN_OUTPUTS = [("run-result", "children"), ("run-history", "children"),
               ("roofline-graph", "figure")]


def shown_inputs(state: dict) -> list[tuple[str, str, object]]:
    """The page's inputs as they show `state`'s kernel (Run and Tune read them: a page whose
    inputs moved on runs those)."""
    sizes = ",".join(f"{k}={v}" for k, v in (state.get("sizes") or {}).items())
    return [("odl-editor", "value", state["odl"]), ("sizes-input", "value", sizes),
            ("backend-select", "value", state["backend"]),
            ("target-select", "value", state["target"])]


def run_body(state: dict) -> dict:
    """The Studio's Run callback for `state` (what the Compile callback stores)."""
    return callback_body(RUN_OUTPUTS, [("run-button", "n_clicks", 1)],
                         [("studio-state", "data", state), *shown_inputs(state)])


def studio_state(odl: str, sizes: dict, backend: str = "c", config: dict | None = None) -> dict:
    """The studio-state store after a successful compile of `odl` (as the page would hold)."""
    from app.services.kernels import compile_odl

    res = compile_odl(odl, backend, target_name(), sizes, config)
    assert res.ok, res.error
    return {"odl": odl, "backend": backend, "target": target_name(), "sizes": res.sizes,
            "config": res.config, "ok": True, "op": res.op_name, "kernel": res.source}


def post(base: str, body: dict, timeout: float = 180.0, **kw) -> requests.Response:
    """POST one callback (with the server's token unless headers or cookies are given)."""
    if "headers" not in kw and "cookies" not in kw:
        kw["headers"] = auth_headers(base)
    return requests.post(f"{base}/_dash-update-component", json=body, timeout=timeout, **kw)


def response_text(resp: requests.Response) -> str:
    """The callback's answer as one string (component trees flattened into JSON)."""
    return json.dumps(resp.json())


# --- durability (kill -9) helpers -------------------------------------------------------------

def read_rows(db: str | Path, table: str, columns: str = "*") -> list[tuple]:
    """Every committed row of `table`, from a second, read-only connection ([] before it exists)."""
    import sqlite3

    if not Path(db).exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(f"SELECT {columns} FROM {table} ORDER BY id").fetchall()
    except sqlite3.OperationalError as exc:  # the table is not created yet
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


def integrity(db: str | Path) -> str:
    """`PRAGMA integrity_check` of a database file after a crash ('ok' when sound)."""
    import sqlite3

    conn = sqlite3.connect(str(db), timeout=30)
    try:
        return "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check").fetchall())
    finally:
        conn.close()


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True, and its group (workers, jobs)."""
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_rows(db: str | Path, table: str, at_least: int, proc: subprocess.Popen | None = None,
              timeout: float = 120.0) -> int:
    """Poll (read-only) until `table` holds `at_least` committed rows; returns the count."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = len(read_rows(db, table, "id"))
        if n >= at_least:
            return n
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {at_least} rows")
        time.sleep(0.1)
    raise TimeoutError(f"{db}: fewer than {at_least} rows after {timeout:.0f} s")


# A tuner run of `matmul` 16x16x16 that does not stop on flat gains; about a third of the configs
# get a planted wrong result (real failures, which a restarted tuner must never retry).
TUNER_SCRIPT = r'''
import json, sys, time
sys.path.insert(0, sys.argv[4])

def main():
    db_path, budget, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    import uol_core.backends.c as c_entry
    from test_faults import plant
    from uol_core.acg.session import open_session
    from uol_core import parse
    from uol_core.ops import op_text
    from uol_core.runtime.tuningdb import TuningDB

    built = []

    def emit(op, cfg, tgt, sizes, real_emit=c_entry.emit):
        src = real_emit(op, cfg, tgt, sizes)
        built.append(cfg.key())
        # the first config each run builds, then every other one, gives wrong results: a run
        # killed after its first row has left a failed row, whatever the model ranks first
        return plant(src, "wrong") if len(built) % 2 == 1 else src

    c_entry.emit = emit  # the C runner emits through the entry (read when the session opens)
    session = open_session(parse(op_text("matmul")), {"M": 16, "N": 16, "K": 16}, target,
                           db=TuningDB(db_path), min_seconds=0.01)
    def show(trial, n):
        print(json.dumps({"n": n, "config": trial.config.key(), "from_db": trial.from_db,
                          "status": trial.result.get("status")}), flush=True)
    try:
        res = session.tune(budget=budget, top=budget, patience=10**6, progress=show)
    finally:
        session.close()
    print(json.dumps({"done": res.stopped, "trials": len(res.trials)}), flush=True)

if __name__ == "__main__":
    main()
'''


def start_tuner(script: Path, db: Path, budget: int, env: dict) -> subprocess.Popen:
    """The tuner script in its own process group (kill9 takes its worker process too)."""
    return subprocess.Popen([sys.executable, str(script), str(db), str(budget), target_name(),
                             str(Path(__file__).parent)], cwd=REPO, env={**os.environ, **env},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
