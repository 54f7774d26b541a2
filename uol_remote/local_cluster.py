"""A broker and workers on this machine, as separate processes: for tests, the benchmark and
trying remote targets without a second machine. Redis listens on 127.0.0.1 only, on a free
port, with its files (append-only log included) in a folder of the caller's."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalBroker:
    """redis-server on 127.0.0.1:`port` with persistence in `folder` (restartable)."""

    def __init__(self, folder: Path, port: int | None = None):
        exe = shutil.which("redis-server")
        if exe is None:
            raise FileNotFoundError("redis-server is not installed: apt-get install "
                                    "redis-server (or your system's package of it)")
        self.exe, self.folder, self.port = exe, Path(folder), port or free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, wait_s: float = 10.0) -> LocalBroker:
        # appendfsync always: a reply or a queued job the broker acknowledged survives a restart
        with open(self.folder / "redis.log", "ab") as log:  # the child keeps its own handle
            self.proc = subprocess.Popen(
                [self.exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
                 "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                 "--protected-mode", "yes"], stdout=log, stderr=subprocess.STDOUT)
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        give_up = time.monotonic() + wait_s
        while True:
            try:
                client.ping()
                return self
            except redis.exceptions.ConnectionError:
                if time.monotonic() > give_up or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}: see "
                                       f"{self.folder / 'redis.log'}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # a clean shutdown flushes the append-only log
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def worker_env(secret_file: Path, extra: dict | None = None) -> dict:
    """The environment of a worker process started from a checkout or an install."""
    env = dict(os.environ, UOL_REMOTE_SECRET_FILE=str(secret_file), **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def start_worker(target: str, broker_url: str, secret_file: Path, log: Path,
                 extra_env: dict | None = None, cpus: set[int] | None = None
                 ) -> subprocess.Popen:
    """`uol worker --target TARGET --broker URL` as a separate process (log to `log`); with
    `cpus`, the worker and its kernels are kept to those cores, as a machine of its own."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    with open(log, "ab") as out:  # the child keeps its own handle
        return subprocess.Popen(
            [sys.executable, "-m", "uol_cli.worker_cmd", "--target", target, "--broker",
             broker_url, "--loglevel", "INFO"],
            env=worker_env(secret_file, extra_env), cwd=str(REPO_ROOT),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pin)


def wait_for_workers(coordinator, want: dict[str, int], procs: list, wait_s: float = 60.0
                     ) -> None:
    """Until `want` (target -> count) workers beat, or RuntimeError naming what is missing."""
    give_up = time.monotonic() + wait_s
    while True:
        live = coordinator.live_workers()
        counts = {t: sum(1 for w in live if w["target"] == t) for t in want}
        if all(counts[t] >= n for t, n in want.items()):
            return
        dead = [p.args for p in procs if p.poll() is not None]
        if dead or time.monotonic() > give_up:
            raise RuntimeError(f"workers not live: want {want}, have {counts}; exited: {dead}")
        time.sleep(0.1)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop a process started here (its session too: the worker's sandbox child)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """`stop_process` on all of `procs` at once: each gets SIGTERM before any is waited for
    (a worker's warm shutdown takes seconds; one after another they add up)."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            stop_process(proc, signal.SIGKILL)


def write_secret(path: Path) -> Path:
    """A fresh shared secret in `path`, readable by its owner alone."""

    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path
