"""`uol serve` as a user starts it: a fresh token in the printed URL, every route guarded on
127.0.0.1, sessions that die with the server, tokens kept out of logs and `ps`."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from app import security

REPO = Path(__file__).resolve().parents[1]
STATUS_OUTPUTS = ["status-target", "status-gpu", "status-running", "status-util"]
# the status bar's callback as Dash's renderer posts it (four outputs, one interval input)
STATUS_BODY = {"output": ".." + "...".join(f"{i}.children" for i in STATUS_OUTPUTS) + "..",
               "outputs": [{"id": i, "property": "children"} for i in STATUS_OUTPUTS],
               "inputs": [{"id": "status-tick", "property": "n_intervals", "value": 1}],
               "state": [{"id": "current-target", "property": "data", "value": "host"}],
               "changedPropIds": ["status-tick.n_intervals"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A `uol serve` child on 127.0.0.1: its URL line, stdout and stderr (read when stopped)."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None) -> None:
        self.port = _free_port()
        self.cache = tmp / "cache"
        clean = {k: v for k, v in os.environ.items() if k != security.TOKEN_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uol_cli.main", "serve", "--port", str(self.port), *args],
            cwd=REPO, env={**clean, "UOL_IDE_RUNS_DB": str(tmp / "runs.sqlite"),
                           "UOL_CACHE_DIR": str(self.cache), **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.base = f"{'https' if '--certfile' in args else 'http'}://127.0.0.1:{self.port}"
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_for_url()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line)

    def _wait_for_url(self, timeout: float = 180.0) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"uol serve exited: {self.proc.stderr.read()[-2000:]}") from None
                continue
            found = re.search(r"UOL Studio at (\S+)", line)
            if found:
                return found.group(1)
        raise TimeoutError("uol serve printed no URL")

    def stop(self, how: int = signal.SIGINT) -> str:
        """Stop the server (Ctrl-C, as a user does); returns everything it wrote to stderr."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, how)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.stderr.read()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    served = Served(tmp_path_factory.mktemp("fresh"))
    yield served
    served.stop()


def test_serve_prints_a_url_with_a_fresh_strong_token(fresh):
    base, _, token = fresh.url.partition("?token=")
    assert base == fresh.base + "/"
    assert security.token_problem(token) is None and security.estimated_bits(token) >= 128
    cmdline = Path(f"/proc/{fresh.proc.pid}/cmdline")
    if cmdline.exists():  # the token never travels in argv, where `ps` shows it
        assert token not in cmdline.read_bytes().decode(errors="replace")


def test_every_route_needs_the_token_on_loopback(fresh):
    for path in ("/", "/_dash-layout", "/_dash-dependencies", "/assets/theme.css", "/studio",
                 "/_dash-component-suites/dash/deps/react@18.3.1.min.js", "/reports"):
        assert requests.get(fresh.base + path, timeout=30,
                            allow_redirects=False).status_code == 401, path
    post = requests.post(fresh.base + "/_dash-update-component", json=STATUS_BODY, timeout=60)
    assert post.status_code == 401


def test_printed_url_logs_in_with_a_session_cookie(fresh):
    session = requests.Session()
    first = session.get(fresh.url, timeout=60, allow_redirects=False)
    assert first.status_code == 302 and "token" not in first.headers["Location"]
    assert session.get(fresh.base + "/_dash-layout", timeout=60).status_code == 200
    answer = session.post(fresh.base + "/_dash-update-component", json=STATUS_BODY, timeout=120)
    assert answer.status_code == 200 and "target: host" in answer.text


def test_restart_with_the_same_token_ends_old_sessions(fresh, tmp_path):
    """Sessions are signed per server start: a restarted server refuses yesterday's cookie."""
    token = fresh.url.partition("?token=")[2]
    session = requests.Session()
    session.get(fresh.url, timeout=60, allow_redirects=False)
    old_value = next(c.value for c in session.cookies if c.name.startswith(security.COOKIE))
    again = Served(tmp_path, "--token", token)  # argv on purpose: it must warn
    try:
        name = security.cookie_name(f"127.0.0.1:{again.port}")
        stale = requests.get(again.base + "/_dash-layout", cookies={name: old_value}, timeout=60)
        assert stale.status_code == 401
        assert requests.get(again.base + "/_dash-layout", timeout=60,
                            headers={"X-UOL-Token": token}).status_code == 200
    finally:
        stderr = again.stop()
    assert "shows in `ps`" in stderr
    assert "?token=<the token from argv>" in "".join(again.stdout)  # a token you chose is yours


def test_server_log_masks_tokens_right_and_wrong(tmp_path):
    served = Served(tmp_path)
    token = served.url.partition("?token=")[2]
    wrong = security.new_token()
    try:
        assert requests.get(f"{served.base}/?token={wrong}", timeout=60).status_code == 401
        assert requests.get(served.url, timeout=60, allow_redirects=False).status_code == 302
    finally:
        stderr = served.stop()
    assert "token=[masked]" in stderr, stderr[-2000:]
    assert token not in stderr and wrong not in stderr


def test_no_token_warns_at_each_start_and_keeps_the_host_check(tmp_path):
    served = Served(tmp_path, "--no-token")
    try:
        assert served.url == served.base + "/"
        assert requests.get(served.base + "/_dash-layout", timeout=60).status_code == 200
        rebinding = requests.get(served.base + "/_dash-layout", timeout=60,
                                 headers={"Host": "evil.example"})
        assert rebinding.status_code == 403
    finally:
        stderr = served.stop()
    assert "WARNING: --no-token" in stderr


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl makes the test certificate")
def test_tls_serves_https_with_secure_cookies_and_cleans_up_on_sigterm(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    served = Served(tmp_path, "--certfile", str(cert), "--keyfile", str(key))
    try:
        assert served.url.startswith(f"https://127.0.0.1:{served.port}/?token=")
        login = requests.get(served.url, timeout=60, allow_redirects=False, verify=str(cert))
        assert login.status_code == 302
        assert "; Secure" in login.headers["Set-Cookie"]
        jobs = list((served.cache / "jobs").iterdir())
        assert len(jobs) == 1 and jobs[0].name.startswith(f"job-{served.proc.pid}-")
    finally:
        served.stop(signal.SIGTERM)
    assert list((served.cache / "jobs").iterdir()) == []  # the job folder left with the server


@pytest.fixture
def refuses(monkeypatch):
    """Invoke `uol serve` args that must be refused before any app or socket exists."""
    import app.main
    from uol_cli.main import app as cli

    def must_not_start(**_kw):
        raise AssertionError("uol serve would have started")

    monkeypatch.setattr(app.main, "create_app", must_not_start)
    monkeypatch.delenv(security.TOKEN_ENV, raising=False)

    def run(args: list[str], env: dict | None = None) -> str:
        result = CliRunner().invoke(cli, ["serve", *args], env=env)
        assert result.exit_code == 2, result.output
        return result.output

    return run


def test_weak_or_conflicting_tokens_are_refused(refuses, tmp_path):
    assert "printable ASCII without spaces" in refuses([], env={security.TOKEN_ENV: " " * 8})
    assert "at least 16" in refuses(["--token", "hunter2"])
    assert "loopback only" in refuses(["--host", "0.0.0.0", "--no-token"])
    assert "choose one" in refuses(["--no-token", "--token", security.new_token()])
    token_file = tmp_path / "token"
    token_file.write_text(security.new_token() + "\n")
    token_file.chmod(0o600)
    assert "one way only" in refuses(["--token", security.new_token(),
                                      "--token-file", str(token_file)])
    assert "--keyfile" in refuses(["--certfile", str(token_file)])


def test_token_file_must_be_private(refuses, tmp_path):
    from uol_cli.serve_cmd import read_token_file

    token = security.new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o644)
    assert "chmod 600" in refuses(["--token-file", str(token_file)])
    token_file.chmod(0o600)
    assert read_token_file(token_file) == token
    token_file.write_text("  \n")
    assert "printable ASCII" in refuses(["--token-file", str(token_file)])
