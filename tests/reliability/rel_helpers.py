"""Helpers of the reliability suite: loopback servers, Dash callback bodies, fuzz counters.

UOL_LONG=1 turns on the long fuzz, kill and load runs; the default run stays short.
"""

from __future__ import annotations

import json
import os
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


def run_body(state: dict) -> dict:
    """The Studio's Run callback for `state` (what the Compile callback stores)."""
    return callback_body(RUN_OUTPUTS, [("run-button", "n_clicks", 1)],
                         [("studio-state", "data", state)])


def studio_state(odl: str, sizes: dict, backend: str = "c", config: dict | None = None) -> dict:
    """The studio-state store after a successful compile of `odl` (as the page would hold)."""
    from app.services.kernels import compile_odl

    res = compile_odl(odl, backend, target_name(), sizes, config)
    assert res.ok, res.error
    return {"odl": odl, "backend": backend, "target": target_name(), "sizes": res.sizes,
            "config": res.config, "ok": True, "op": res.op_name, "kernel": res.source}


def post(base: str, body: dict, timeout: float = 180.0, **kw) -> requests.Response:
    """POST one callback; returns the response (status checked by the caller)."""
    return requests.post(f"{base}/_dash-update-component", json=body, timeout=timeout, **kw)


def response_text(resp: requests.Response) -> str:
    """The callback's answer as one string (component trees flattened into JSON)."""
    return json.dumps(resp.json())
