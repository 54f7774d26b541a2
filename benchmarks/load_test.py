"""Load test: 20 simulated users on `uol serve` (127.0.0.1) posting compile, run and simulate.

Each user (a thread) loops over the Studio Compile callback, the Studio Run callback (verify +
time in the worker process) and the Communication page's Simulate callback, for a fixed time.
Reports p50/p95 latency per callback, errors (target: none) and the server's RSS at the start
and the end (psutil on the server pid, and with its worker processes). Writes
docs/benchmarks/load.json.

    .venv/bin/python benchmarks/load_test.py               # 20 users, 60 s
    .venv/bin/python benchmarks/load_test.py --users 5 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "load.json"
SIZES = "M=32,N=32,K=32"


def _body(outputs, inputs, state) -> dict:
    """The JSON the Dash 4 renderer posts to /_dash-update-component for one callback."""
    out_id = ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".." if len(outputs) > 1 \
        else f"{outputs[0][0]}.{outputs[0][1]}"
    return {"output": out_id,
            "outputs": [{"id": i, "property": p} for i, p in outputs] if len(outputs) > 1
            else {"id": outputs[0][0], "property": outputs[0][1]},
            "inputs": [x if isinstance(x, list) else {"id": x[0], "property": x[1], "value": x[2]}
                       for x in inputs],
            "state": [x if isinstance(x, list) else {"id": x[0], "property": x[1], "value": x[2]}
                      for x in state],
            "changedPropIds": [f"{x[0]}.{x[1]}" for x in inputs[:1]]}


def _target() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx2-desktop" if " avx2" in flags and " fma" in flags else "host"


def compile_body(odl: str, target: str) -> dict:
    """Studio Compile button (the knob inputs are pattern-matched: none rendered yet)."""
    outputs = [("kernel-html", "data"), ("knob-panel", "children"), ("explanation", "children"),
               ("odl-error", "children"), ("compile-status", "children"),
               ("studio-state", "data"), ("current-target", "data")]
    inputs = [("compile-button", "n_clicks", 1), ("op-loaded", "data", None),
              ("backend-select", "value", "c"), ("target-select", "value", target),
              ("sizes-input", "value", SIZES), []]
    state = [[], ("odl-editor", "value", odl), ("studio-state", "data", None),
             ("studio-init", "data", None)]
    return _body(outputs, inputs, state)


def run_body(studio_state: dict) -> dict:
    """Studio Run button with the state the Compile callback stored."""
    return _body([("run-result", "children"), ("run-history", "children"),
                  ("roofline-graph", "figure")], [("run-button", "n_clicks", 1)],
                 [("studio-state", "data", studio_state)])


def simulate_body() -> dict:
    """Communication page: Simulate allreduce 64 MiB on a 16-GPU fat-tree."""
    outputs = [("comm-result", "children"), ("link-heatmap", "figure"), ("comm-curves", "figure"),
               ("comm-state", "data"), ("comm-fault", "children")]
    inputs = [("simulate-button", "n_clicks", 1), ("fault-clear", "n_clicks", None)]
    state = [("topology-select", "value", "fat-tree"), ("nodes-input", "value", 16),
             ("link-select", "value", "default"), ("oversub-input", "value", 1),
             ("collective-select", "value", "allreduce"), ("algorithm-select", "value", "auto"),
             ("size-input", "value", "64MiB"), ("codec-select", "value", "none"),
             ("comm-custom", "data", None)]
    return _body(outputs, inputs, state)


def check(kind: str, resp: requests.Response) -> str:
    """'' when the callback answered with a good result, else what went wrong."""
    if resp.status_code != 200:
        return f"HTTP {resp.status_code}: {resp.text[:200]}"
    data = resp.json().get("response", {})
    text = json.dumps(data, ensure_ascii=False)
    if kind == "compile":
        ok = (data.get("studio-state") or {}).get("data", {}).get("ok")
        return "" if ok else f"compile failed: {text[:300]}"
    if kind == "run":
        return "" if "✓ correct" in text else f"run failed: {text[:300]}"
    result = json.dumps(data.get("comm-result"), ensure_ascii=False)
    return "" if "✗" not in result else f"simulate failed: {result[:300]}"


def rss_mib(pid: int) -> tuple[float, float]:
    """RSS of the server process, and of it with all its child processes, in MiB."""
    proc = psutil.Process(pid)
    own = proc.memory_info().rss
    total = own
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return own / 2**20, total / 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, headers: dict, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=5, headers=headers).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from uol_core.ops import op_text

    odl, target = op_text("matmul"), _target()
    cache = tempfile.mkdtemp(prefix="uol-load-")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    token = secrets.token_urlsafe(32)  # the server needs a token on loopback too
    auth = {"X-UOL-Token": token}
    env = {**os.environ, "UOL_CACHE_DIR": cache, "UOL_IDE_RUNS_DB": f"{cache}/ide_runs.sqlite",
           "UOL_SERVE_TOKEN": token}
    server = subprocess.Popen([sys.executable, "-m", "uol_cli.main", "serve", "--host",
                               "127.0.0.1", "--port", str(port)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    lat: dict[str, list[float]] = {"compile": [], "run": [], "simulate": []}
    errors: dict[str, list[str]] = {k: [] for k in lat}
    lock = threading.Lock()
    try:
        _wait(base + "/", server, auth)
        # one warm-up of each callback (first compile solves the space, first run starts the
        # worker), then the start memory
        warm = requests.post(f"{base}/_dash-update-component", json=compile_body(odl, target),
                             timeout=300, headers=auth)
        assert check("compile", warm) == "", check("compile", warm)
        state = warm.json()["response"]["studio-state"]["data"]
        for kind, body in (("run", run_body(state)), ("simulate", simulate_body())):
            resp = requests.post(f"{base}/_dash-update-component", json=body, timeout=300,
                                 headers=auth)
            assert check(kind, resp) == "", check(kind, resp)
        rss_start = rss_mib(server.pid)
        bodies = {"compile": compile_body(odl, target), "run": run_body(state),
                  "simulate": simulate_body()}
        order = ["compile", "run", "simulate"]
        end = time.time() + args.seconds

        def user(n: int) -> None:
            session = requests.Session()
            session.headers.update(auth)
            i = n  # users start at different callbacks
            while time.time() < end:
                kind = order[i % 3]
                i += 1
                t = time.perf_counter()
                try:
                    resp = session.post(f"{base}/_dash-update-component", json=bodies[kind],
                                        timeout=300)
                    why = check(kind, resp)
                except requests.RequestException as exc:
                    why = f"{type(exc).__name__}: {exc}"
                dt = time.perf_counter() - t
                with lock:
                    lat[kind].append(dt)
                    if why:
                        errors[kind].append(why)

        threads = [threading.Thread(target=user, args=(n,)) for n in range(args.users)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        rss_end = rss_mib(server.pid)
        alive = server.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    result = {
        "what": f"{args.users} simulated users (threads) posting the Studio Compile, Studio Run "
                f"(matmul {SIZES}, C, {target}) and Communication Simulate (allreduce 64MiB, "
                f"16-GPU fat-tree) callbacks to `uol serve` on 127.0.0.1 for {args.seconds:g} s",
        "command": "python benchmarks/load_test.py" + (
            f" --users {args.users}" if args.users != 20 else "") + (
            f" --seconds {args.seconds:g}" if args.seconds != 60 else ""),
        "users": args.users, "seconds": args.seconds, "wall_s": round(wall, 1),
        "callbacks": {k: {"requests": len(v), "p50_s": _r(pct(v, 0.5)), "p95_s": _r(pct(v, 0.95)),
                          "mean_s": _r(statistics.fmean(v) if v else None),
                          "max_s": _r(max(v) if v else None), "errors": len(errors[k]),
                          "first_errors": errors[k][:3]} for k, v in lat.items()},
        "requests_per_s": round(sum(len(v) for v in lat.values()) / wall, 2),
        "errors": sum(len(v) for v in errors.values()),
        "server_alive_at_end": alive,
        "rss_mib": {"server_start": round(rss_start[0], 1), "server_end": round(rss_end[0], 1),
                    "with_workers_start": round(rss_start[1], 1),
                    "with_workers_end": round(rss_end[1], 1)},
        "machine": {"python": platform.python_version(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2)
                                                                for x in os.getloadavg()]},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return result


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
