"""Who may talk to the IDE server: loopback by default, a token off loopback, capped uploads.

The IDE compiles and runs code built from what a client sends, so every request (pages,
`_dash-update-component` callbacks, downloads, assets) passes one check, as Jupyter does:
- no token: the server is on loopback; requests must name a loopback Host (so a web page
  that rebinds its DNS name to 127.0.0.1 cannot drive the IDE) and cross-site POSTs are refused;
- a token: `?token=` once (then an HttpOnly, SameSite=Strict cookie), or the `X-UOL-Token` /
  `Authorization: token ...` header; compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
from html import escape
from urllib.parse import urlencode, urlsplit

COOKIE = "uol_session"
HEADER = "X-UOL-Token"
MIN_TOKEN_CHARS = 8
# One callback carries at most an editor's text and a few stores; 16 MiB is far above that
# and far below what would hurt the server (Flask answers 413 before reading the body).
MAX_REQUEST_BYTES = int(float(os.environ.get("UOL_MAX_REQUEST_MB", "16")) * 2**20)
# Per kind of uploaded file: the byte cap and the accepted suffixes. Uploads are text that a
# parser reads (ODL, JSON); a Triton file is shown, and runs only when the user presses Run.
UPLOAD_LIMITS = {"odl": 256 << 10, "graph": 4 << 20, "topology": 4 << 20, "triton": 256 << 10}
UPLOAD_SUFFIXES = {"odl": (".odl", ".txt"), "graph": (".json",), "topology": (".json",),
                   "triton": (".py",)}
LOOPBACK_NAMES = ("localhost",)


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


def refusal(host: str, token: str | None, debug: bool = False) -> str | None:
    """Why `uol serve` must not start on `host` with `token`, or None when it may."""
    if debug and not is_loopback(host):
        # Werkzeug's debugger answers before any Flask hook: a console no token protects
        return "--debug runs an interactive debugger: use it on 127.0.0.1 only"
    if token and len(token) < MIN_TOKEN_CHARS:
        return (f"the token must have at least {MIN_TOKEN_CHARS} characters (anyone who guesses "
                "it can run code here); for example: python -c 'import secrets; "
                "print(secrets.token_urlsafe(24))'")
    if is_loopback(host) or token:
        return None
    return (f"refusing to listen on {host} without a token: anyone who reaches this port could "
            "run code here. Pass --token SECRET (or set UOL_SERVE_TOKEN) and open the IDE with "
            "?token=SECRET once.")


def session_value(token: str) -> str:
    """The cookie value for `token` (a keyed hash, so the cookie is not the token itself)."""
    return hmac.new(token.encode(), b"uol-studio-session", hashlib.sha256).hexdigest()


def _given_token(request) -> str:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() in ("token", "bearer") and value:
        return value.strip()
    return request.headers.get(HEADER, "") or request.args.get("token", "")


def _authorised(request, token: str) -> bool:
    cookie = request.cookies.get(COOKIE, "")
    if cookie and hmac.compare_digest(cookie.encode(), session_value(token).encode()):
        return True
    given = _given_token(request)
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def _host_name(host_header: str) -> str:
    """The name part of a Host header ('127.0.0.1:8050' -> '127.0.0.1', '[::1]:80' -> '::1')."""
    return urlsplit(f"//{host_header}").hostname or ""


def _login_page(status: int):
    from flask import Response

    body = ("<!doctype html><title>UOL Studio: token</title><body style='font-family:sans-serif'>"
            "<h2>UOL Studio needs the server's token</h2><p>The server was started with "
            "<code>--token</code>; enter it once (it is kept in a cookie for this browser).</p>"
            "<form method='get'><input name='token' type='password' autofocus size='40'> "
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


def install(app, token: str | None) -> None:
    """Check every request of `app` (a Dash app or its Flask server) against the token/loopback rule."""
    from flask import redirect, request

    server = getattr(app, "server", app)
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES

    @server.before_request
    def _check_request():
        host = _host_name(request.headers.get("Host", ""))
        origin = request.headers.get("Origin")
        # a browser names the page that sent a POST; only this server's own pages may send one
        if (origin and request.method not in ("GET", "HEAD", "OPTIONS")
                and urlsplit(origin).netloc.lower() != request.headers.get("Host", "").lower()):
            return _refuse(request, "origin")
        if not token:
            return None if is_loopback(host) else _refuse(request, "host")
        if not _authorised(request, token):
            return _refuse(request, "token")
        if request.method == "GET" and request.args.get("token"):
            # trade the token in the URL for the cookie, so it leaves the address bar and history
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), 302)
            response.set_cookie(COOKIE, session_value(token), httponly=True, samesite="Strict")
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
