"""The token guard on its own (a small Flask app behind `security.install`): every route, the
session cookie, strength rules, log masking; `uol serve` itself is in test_security_serve.py."""

from __future__ import annotations

import logging
import threading

import pytest
import requests
from flask import Flask
from werkzeug.serving import make_server

from app import security

TOKEN = security.new_token()
ROUTES = ("/", "/_dash-layout", "/_dash-dependencies", "/assets/theme.css", "/reports",
          "/_dash-component-suites/dash/deps/react.min.js", "/_reload-hash", "/no-such-page")


def guarded_app(token: str | None, session_seconds: int = security.SESSION_SECONDS) -> Flask:
    """A Flask app answering 200 on every path, behind the same guard as the IDE."""
    app = Flask(__name__)

    @app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT", "DELETE"])
    @app.route("/<path:path>", methods=["GET", "POST", "PUT", "DELETE"])
    def anything(path):
        return f"ok {path}"

    security.install(app, token, session_seconds)
    return app


def session_cookie(response) -> str:
    """The Set-Cookie header of the session cookie in `response`."""
    cookies = [v for v in response.headers.getlist("Set-Cookie")
               if v.startswith(security.COOKIE)]
    assert len(cookies) == 1, response.headers
    return cookies[0]


@pytest.mark.parametrize("token, says", [
    (" " * 8, "printable ASCII without spaces"),
    (" " * 40, "printable ASCII without spaces"),
    ("a-good-token but spaced", "printable ASCII without spaces"),
    ("tab\tseparated-token-value", "printable ASCII without spaces"),
    ("Aé" * 20, "printable ASCII"),
    ("short-token", "at least 16"),
    ("a" * 64, "too predictable"),
    ("abababababababababababababab", "too predictable"),
])
def test_weak_tokens_are_refused(token, says):
    assert says in security.token_problem(token)
    with pytest.raises(ValueError, match=says):
        guarded_app(token)


def test_fresh_tokens_are_strong_and_new_each_time():
    tokens = {security.new_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(security.token_problem(t) is None and security.estimated_bits(t) > 128
               for t in tokens)


def test_refusal_rules_for_serve():
    assert security.refusal("127.0.0.1", None, no_token=True) is None
    assert "loopback only" in security.refusal("0.0.0.0", None, no_token=True)
    assert "loopback only" in security.refusal("192.168.1.4", None, no_token=True)
    assert security.refusal("0.0.0.0", TOKEN) is None  # a strong token may serve other hosts
    assert "127.0.0.1 only" in security.refusal("0.0.0.0", TOKEN, debug=True)
    assert "at least 16" in security.refusal("127.0.0.1", "")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "HEAD"])
def test_every_route_without_the_token_is_refused_on_loopback(method):
    client = guarded_app(TOKEN).test_client()
    for path in ROUTES:
        for extra in ({}, {"headers": {"X-UOL-Token": TOKEN + "x"}},
                      {"query_string": {"token": "wrong-" + TOKEN}},
                      {"headers": {"Authorization": "token " + TOKEN[:-1]}},
                      {"headers": {"Cookie": f"{security.COOKIE}=1.deadbeef"}}):
            response = client.open(path, method=method, base_url="http://127.0.0.1:8050",
                                   **extra)
            assert response.status_code == 401, (method, path, extra)
            assert TOKEN not in response.get_data(as_text=True)


def test_headers_let_scripts_in():
    client = guarded_app(TOKEN).test_client()
    for headers in ({"X-UOL-Token": TOKEN}, {"Authorization": f"token {TOKEN}"},
                    {"Authorization": f"Bearer {TOKEN}"}):
        assert client.post("/_dash-update-component", headers=headers).status_code == 200


def test_token_url_gives_a_strict_expiring_cookie_and_leaves_the_url():
    client = guarded_app(TOKEN).test_client()
    first = client.get(f"/studio?token={TOKEN}&x=1", base_url="http://127.0.0.1:8050")
    assert first.status_code == 302 and first.headers["Location"] == "/studio?x=1"
    header = session_cookie(first)
    assert header.startswith(f"{security.COOKIE}_8050=")  # one cookie per port
    for part in ("HttpOnly", "SameSite=Strict", f"Max-Age={security.SESSION_SECONDS}",
                 "Path=/"):
        assert part in header, header
    assert "Secure" not in header  # plain http: a Secure cookie would never come back
    assert TOKEN not in header
    assert client.get("/studio", base_url="http://127.0.0.1:8050").status_code == 200
    assert client.post("/_dash-update-component",
                       base_url="http://127.0.0.1:8050").status_code == 200


def test_cookie_is_secure_under_tls():
    client = guarded_app(TOKEN).test_client()
    first = client.get(f"/?token={TOKEN}", base_url="https://127.0.0.1:8443")
    assert "; Secure" in session_cookie(first)


def test_cookie_expires():
    app = guarded_app(TOKEN)
    sessions = app.extensions["uol_security"]["sessions"]
    value = sessions.issue()
    assert sessions.valid(value)
    assert not sessions.valid(value, now=int(value.split(".")[0]) + security.SESSION_SECONDS)
    assert not sessions.valid(value, now=int(value.split(".")[0]) - 3600)  # issued "later"
    client = guarded_app(TOKEN, session_seconds=0).test_client()
    client.get(f"/?token={TOKEN}", base_url="http://127.0.0.1:8050")
    assert client.get("/", base_url="http://127.0.0.1:8050").status_code == 401


def test_cookie_is_rotated_per_server_start():
    """The same token, a new start: a cookie of the previous start is worthless."""
    before = guarded_app(TOKEN).test_client()
    cookie = session_cookie(before.get(f"/?token={TOKEN}", base_url="http://127.0.0.1:8050"))
    name_value = cookie.split(";")[0]
    after = guarded_app(TOKEN).test_client()
    response = after.get("/", base_url="http://127.0.0.1:8050", headers={"Cookie": name_value})
    assert response.status_code == 401
    value = name_value.split("=", 1)[1]
    forged = value.split(".")[0] + "." + "0" * 64
    assert not after.application.extensions["uol_security"]["sessions"].valid(forged)


def test_browser_without_a_token_gets_the_login_page():
    client = guarded_app(TOKEN).test_client()
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "needs the server's token" in page.get_data(as_text=True)


def test_cross_site_posts_are_refused_even_with_the_token():
    client = guarded_app(TOKEN).test_client()
    evil = {"X-UOL-Token": TOKEN, "Origin": "http://evil.example"}
    assert client.post("/_dash-update-component", headers=evil,
                       base_url="http://127.0.0.1:8050").status_code == 403


def test_no_token_mode_keeps_the_loopback_host_check():
    """--no-token: DNS rebinding (evil.example resolving to 127.0.0.1) still gets nothing."""
    client = guarded_app(None).test_client()
    assert client.get("/", base_url="http://127.0.0.1:8050").status_code == 200
    assert client.get("/", base_url="http://localhost:8050").status_code == 200
    assert client.get("/", base_url="http://evil.example").status_code == 403
    assert client.post("/x", base_url="http://evil.example:80").status_code == 403


def test_mask_tokens_in_text():
    line = f'"GET /studio?a=1&token={TOKEN}&b=2 HTTP/1.1" 302'
    assert security.mask_tokens(line) == '"GET /studio?a=1&token=[masked]&b=2 HTTP/1.1" 302'
    assert TOKEN not in security.mask_tokens(f"Authorization: token {TOKEN}", TOKEN)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_request_log_never_shows_a_token_right_or_wrong():
    """A real werkzeug server on 127.0.0.1: its request lines carry no token, wrong ones too."""
    wrong = "guessed-" + security.new_token()
    app = guarded_app(TOKEN)
    handler = _Lines()
    werkzeug_log = logging.getLogger("werkzeug")
    werkzeug_log.addHandler(handler)
    old_level = werkzeug_log.level
    werkzeug_log.setLevel(logging.INFO)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert requests.get(f"{base}/?token={wrong}", timeout=10).status_code == 401
        login = requests.get(f"{base}/x?token={TOKEN}", timeout=10, allow_redirects=False)
        assert login.status_code == 302
        assert requests.get(f"{base}/y?TOKEN={TOKEN}", timeout=10).status_code == 401  # name is case-sensitive
    finally:
        server.shutdown()
        thread.join(timeout=5)
        werkzeug_log.removeHandler(handler)
        werkzeug_log.setLevel(old_level)
    text = "\n".join(handler.lines)
    assert len(handler.lines) >= 3 and "token=[masked]" in text, text
    assert TOKEN not in text and wrong not in text
