"""Who may talk to the IDE server: a token on every request, loopback too; capped uploads.

The IDE compiles and runs code built from what a client sends, so every request (pages,
`_dash-update-component` callbacks, downloads, assets) passes one check, as Jupyter does:
- a token, always: fresh per start unless the user gives one (from a file or the environment,
  not argv); `?token=` once, traded for a session cookie (HttpOnly, SameSite=Strict, Secure under
  TLS, expiring, signed with a key made at each start so a restart ends every session), or the
  `X-UOL-Token` / `Authorization: token ...` header; compared in constant time;
- `--no-token` (loopback only): requests must name a loopback Host (so a web page that rebinds
  its DNS name to 127.0.0.1 cannot drive the IDE); any local user can then run code;
- cross-site POSTs are refused in both modes, and tokens are masked in every log line.

Deferred imports: flask's response helpers load when a request is first refused or redirected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import re
import secrets
import time
from html import escape
from urllib.parse import urlencode, urlsplit

COOKIE = "uol_session"
HEADER = "X-UOL-Token"
TOKEN_ENV = "UOL_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16
MIN_TOKEN_BITS = 64
# a browser session lasts a working day; after that (or a restart) the token URL is needed again
SESSION_SECONDS = int(float(os.environ.get("UOL_SESSION_HOURS", "12")) * 3600)
# One callback carries at most an editor's text and a few stores; 16 MiB is far above that
# and far below what would hurt the server (Flask answers 413 before reading the body).
MAX_REQUEST_BYTES = int(float(os.environ.get("UOL_MAX_REQUEST_MB", "16")) * 2**20)
# Per kind of uploaded file: the byte cap and the accepted suffixes. Uploads are text that a
# parser reads (ODL, JSON); a Triton file is shown, and runs only when the user presses Run.
UPLOAD_LIMITS = {"odl": 256 << 10, "graph": 4 << 20, "topology": 4 << 20, "triton": 256 << 10,
                 "speedscope": 8 << 20}
UPLOAD_SUFFIXES = {"odl": (".odl", ".txt"), "graph": (".json",), "topology": (".json",),
                   "triton": (".py",), "speedscope": (".json",)}
LOOPBACK_NAMES = ("localhost",)
MASK = "[masked]"
_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"']*", re.IGNORECASE)
_EXTENSION = "uol_security"


class UploadError(ValueError):
    """An upload that is too big, of the wrong kind or not text: the message says which limit."""


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (with or without brackets)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe (what `uol serve` uses unless given one)."""
    return secrets.token_urlsafe(32)


def estimated_bits(token: str) -> float:
    """A generous guess of a token's entropy: length x log2(distinct characters)."""
    distinct = len(set(token))
    return len(token) * math.log2(distinct) if distinct > 1 else 0.0


def token_problem(token: str) -> str | None:
    """Why `token` is too weak to guard a server that runs code, or None when it will do."""
    hint = "for example: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if any(not ("!" <= ch <= "~") for ch in token):
        return ("the token must be printable ASCII without spaces or control characters "
                f"(it travels in URLs and headers); {hint}")
    if len(token) < MIN_TOKEN_CHARS:
        return (f"the token must have at least {MIN_TOKEN_CHARS} characters (anyone who guesses "
                f"it can run code here); {hint}")
    bits = estimated_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (f"the token is too predictable (about {bits:.0f} bits, at least {MIN_TOKEN_BITS} "
                f"needed: use more varied characters); {hint}")
    return None


def refusal(host: str, token: str | None, debug: bool = False,
            no_token: bool = False) -> str | None:
    """Why `uol serve` must not start on `host` with `token`, or None when it may."""
    if debug and not is_loopback(host):
        # Werkzeug's debugger answers before any Flask hook: a console no token protects
        return "--debug runs an interactive debugger: use it on 127.0.0.1 only"
    if no_token and token:
        return "--no-token and a token were both given: choose one"
    if no_token:
        return None if is_loopback(host) else (
            f"--no-token is allowed on loopback only: anyone who reaches {host} could run code "
            "here. Drop --no-token (a token is made for you) or bind 127.0.0.1.")
    return token_problem(token) if token is not None else None


def mask_tokens(text: str, token: str | None = None) -> str:
    """`text` with every `token=...` value, and `token` itself wherever it appears, masked."""
    text = _TOKEN_IN_TEXT.sub(rf"\g<1>{MASK}", text)
    return text.replace(token, MASK) if token else text


class TokenMaskFilter(logging.Filter):
    """Masks tokens in log records (werkzeug logs every request line, query string included)."""

    def __init__(self) -> None:
        super().__init__("")
        self.tokens: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_tokens(message)
        for token in self.tokens:
            masked = masked.replace(token, MASK)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


LOG_FILTER = TokenMaskFilter()
# werkzeug: request lines; flask.app / dash: errors quoting requests; ours: anything else
MASKED_LOGGERS = ("werkzeug", "flask.app", "dash", "dash.dash", "app", "uol_cli", "uol_core")


def mask_logs(token: str | None) -> None:
    """Mask `token` and every `token=` query value in our loggers and the root handlers."""
    if token:
        LOG_FILTER.tokens.add(token)
    for name in MASKED_LOGGERS:
        logger = logging.getLogger(name)
        if LOG_FILTER not in logger.filters:
            logger.addFilter(LOG_FILTER)
    for handler in logging.getLogger().handlers:  # records propagated from other loggers
        if LOG_FILTER not in handler.filters:
            handler.addFilter(LOG_FILTER)


class Sessions:
    """Session cookies signed with a key made at each server start (a restart ends them all)."""

    def __init__(self, max_age: int = SESSION_SECONDS) -> None:
        self._key = secrets.token_bytes(32)
        self.max_age = max_age

    def _sign(self, issued: int) -> str:
        return hmac.new(self._key, f"uol-session:{issued}".encode(), hashlib.sha256).hexdigest()

    def issue(self, now: float | None = None) -> str:
        """A new cookie value: issue time and its signature (the token itself is never in it)."""
        issued = int(time.time() if now is None else now)
        return f"{issued}.{self._sign(issued)}"

    def valid(self, value: str, now: float | None = None) -> bool:
        """True for a cookie this server start issued less than max_age seconds ago."""
        issued_text, _, signature = value.partition(".")
        if not issued_text.isdigit() or not signature:
            return False
        issued = int(issued_text)
        if not hmac.compare_digest(signature.encode(), self._sign(issued).encode()):
            return False
        age = (time.time() if now is None else now) - issued
        return -60 <= age < self.max_age  # a minute of clock slack, never a future session


def cookie_name(host_header: str) -> str:
    """One cookie per port: browsers share cookies across ports of a host, servers must not."""
    port = urlsplit(f"//{host_header}").port
    return f"{COOKIE}_{port}" if port else COOKIE


def _given_token(request) -> str:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() in ("token", "bearer") and value:
        return value.strip()
    return request.headers.get(HEADER, "") or request.args.get("token", "")


def _host_name(host_header: str) -> str:
    """The name part of a Host header ('127.0.0.1:8050' -> '127.0.0.1', '[::1]:80' -> '::1')."""
    return urlsplit(f"//{host_header}").hostname or ""


def _login_page(status: int):
    from flask import Response

    body = ("<!doctype html><title>UOL Studio: token</title><body style='font-family:sans-serif'>"
            "<h2>UOL Studio needs the server's token</h2><p>Open the URL that <code>uol serve"
            "</code> printed (it ends in <code>?token=...</code>), or enter the token once: it "
            "is kept in a session cookie for this browser until the server restarts.</p>"
            "<form method='get'><input name='token' type='password' autofocus size='48'> "
            "<button>Open</button></form></body>")
    return Response(body, status=status, mimetype="text/html")


def _refuse(request, why: str):
    from flask import Response

    wants_html = request.method == "GET" and "text/html" in request.headers.get("Accept", "")
    if wants_html and why == "token":
        return _login_page(401)
    text = {"token": "UOL Studio: this server needs its token (?token=..., header X-UOL-Token)",
            "host": "UOL Studio listens on this machine only: the Host header must be "
                    "localhost or 127.0.0.1 (DNS-rebinding protection)",
            "origin": "UOL Studio: cross-site request refused"}[why]
    return Response(escape(text) + "\n", status=401 if why == "token" else 403,
                    mimetype="text/plain")


def app_token(app) -> str | None:
    """The token a server built by `install` expects (None with --no-token)."""
    server = getattr(app, "server", app)
    return server.extensions[_EXTENSION]["token"]


def install(app, token: str | None, session_seconds: int = SESSION_SECONDS) -> None:
    """Check every request of `app` (a Dash app or its Flask server) against the token rule.

    `token=None` is --no-token: loopback Host names only, no credential.
    """
    from flask import redirect, request

    if token is not None:
        problem = token_problem(token)
        if problem:
            raise ValueError(problem)
    server = getattr(app, "server", app)
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    sessions = Sessions(session_seconds)
    server.extensions[_EXTENSION] = {"token": token, "sessions": sessions}
    mask_logs(token)

    def authorised() -> bool:
        cookie = request.cookies.get(cookie_name(request.headers.get("Host", "")), "")
        if cookie and sessions.valid(cookie):
            return True
        given = _given_token(request)
        return bool(given) and hmac.compare_digest(given.encode(), token.encode())

    @server.before_request
    def _check_request():
        origin = request.headers.get("Origin")
        # a browser names the page that sent a POST; only this server's own pages may send one
        if (origin and request.method not in ("GET", "HEAD", "OPTIONS")
                and urlsplit(origin).netloc.lower() != request.headers.get("Host", "").lower()):
            return _refuse(request, "origin")
        if token is None:
            host = _host_name(request.headers.get("Host", ""))
            return None if is_loopback(host) else _refuse(request, "host")
        if not authorised():
            return _refuse(request, "token")
        if request.method == "GET" and "token" in request.args:
            # trade the token in the URL for the cookie, so it leaves the address bar and history
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), 302)
            response.set_cookie(cookie_name(request.headers.get("Host", "")), sessions.issue(),
                                max_age=sessions.max_age, httponly=True, samesite="Strict",
                                secure=request.is_secure, path="/")
            return response
        return None

    @server.after_request
    def _headers(response):
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")  # a ?token= URL stays here
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        return response


def decode_upload(contents: str, filename: str, kind: str) -> str:
    """The text of a dcc.Upload `contents` data URL, checked for kind, size and UTF-8."""
    if kind not in UPLOAD_LIMITS:
        raise UploadError(f"unknown upload kind '{kind}': one of {', '.join(UPLOAD_LIMITS)}")
    limit, suffixes = UPLOAD_LIMITS[kind], UPLOAD_SUFFIXES[kind]
    name = os.path.basename(filename or "")
    if not name.lower().endswith(suffixes):
        raise UploadError(f"'{name}' is not a {kind} file: expected {' or '.join(suffixes)}")
    _, sep, payload = (contents or "").partition(";base64,")
    if not sep:
        raise UploadError(f"'{name}': not a base64 data URL (as dcc.Upload sends)")
    if len(payload) * 3 // 4 > limit:  # checked before decoding: a huge upload costs nothing
        raise UploadError(f"'{name}' is larger than the {kind} limit of {limit // 1024} KiB")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UploadError(f"'{name}': the upload is not valid base64") from None
    if len(raw) > limit:
        raise UploadError(f"'{name}' is larger than the {kind} limit of {limit // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UploadError(f"'{name}' is not UTF-8 text (byte {exc.start})") from None
