"""Signed jobs: the broker carries only jobs (and results) sealed with a shared secret.

Whoever reaches Redis can put messages in a queue; a worker builds and runs the C or Triton
code a job carries, so an unsigned job would make the broker a code-execution path. Every job
is canonical JSON with an HMAC-SHA256 over it, a fresh nonce and its issue time; the worker
rejects a missing or wrong signature, an old job, and (through its claim key) a replayed one.
Results are sealed the same way, so a forged result cannot enter the tuning database.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import stat
import time
import uuid
from pathlib import Path

SECRET_ENV = "UOL_REMOTE_SECRET"
SECRET_FILE_ENV = "UOL_REMOTE_SECRET_FILE"
MIN_SECRET_CHARS = 16
# A job older than this is refused: long enough for a queue behind a slow tune and for clock
# skew between machines, shorter than the claim keys live (so a replay always meets its claim).
MAX_AGE_S = 3600.0
# A job issued further than this in the future (by the receiver's clock) is refused: machines
# kept by NTP differ by milliseconds, and a far-future time would stretch the expiry window.
MAX_FUTURE_S = 60.0
MAKE_SECRET_HINT = ("make one with: python -c \"import secrets; print(secrets.token_hex(32))\" "
                    "> remote.secret && chmod 600 remote.secret; then give the same file to "
                    f"every worker and the coordinator (--secret-file or ${SECRET_FILE_ENV})")


class SignatureError(ValueError):
    """A job or result whose seal does not hold (unsigned, altered, wrong secret, too old)."""


class SecretError(ValueError):
    """No usable shared secret: the message says how to make one."""


def read_secret_file(path: Path) -> bytes:
    """The secret in `path` (first line); the file must be readable by its owner alone."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(f"{path} can be read by other users (mode "
                          f"{stat.S_IMODE(st.st_mode):o}): chmod 600 {path}")
    lines = text.splitlines()
    return _checked(lines[0].strip() if lines else "", str(path))


def _checked(secret: str, where: str) -> bytes:
    if len(secret) < MIN_SECRET_CHARS:
        raise SecretError(f"the shared secret from {where} has {len(secret)} characters, fewer "
                          f"than {MIN_SECRET_CHARS}; {MAKE_SECRET_HINT}")
    return secret.encode()


def load_secret(path: str | Path | None = None) -> bytes:
    """The shared secret: `path`, else ${SECRET_FILE_ENV}, else ${SECRET_ENV}."""
    if path:
        return read_secret_file(Path(path))
    if os.environ.get(SECRET_FILE_ENV):
        return read_secret_file(Path(os.environ[SECRET_FILE_ENV]))
    if os.environ.get(SECRET_ENV):
        return _checked(os.environ[SECRET_ENV], f"${SECRET_ENV}")
    raise SecretError(f"remote jobs need a shared secret and none was given; {MAKE_SECRET_HINT}")


def canonical(payload: dict) -> bytes:
    """The bytes that are signed: sorted keys, no spaces, so both sides hash the same text."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()


def seal(payload: dict, secret: bytes, **stamp) -> dict:
    """`payload` with a nonce and issue time (unless given in `stamp`) and its signature."""
    # through JSON once, as the broker will carry it (int keys become text, tuples lists), so
    # the receiver hashes exactly the text that was signed
    body = json.loads(canonical({"nonce": uuid.uuid4().hex, "issued": time.time(), **stamp,
                                 **payload}))
    return {"body": body, "sig": hmac.new(secret, canonical(body), hashlib.sha256).hexdigest()}


def open_sealed(envelope, secret: bytes, max_age_s: float = MAX_AGE_S) -> dict:
    """The body of a sealed envelope, or SignatureError naming what is wrong with it."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("body"), dict):
        raise SignatureError("not a signed job (no body): refused")
    sig = envelope.get("sig")
    if not isinstance(sig, str) or not sig:
        raise SignatureError("unsigned job: refused")
    body = envelope["body"]
    want = hmac.new(secret, canonical(body), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig):
        raise SignatureError("bad signature (altered, or signed with another secret): refused")
    check_issued(body.get("issued"), max_age_s)
    where = non_finite(body)
    if where:
        raise SignatureError(f"signed field {where} is not a finite number: refused")
    return body


def check_issued(issued, max_age_s: float = MAX_AGE_S, what: str = "job") -> float:
    """`issued` when it is a finite number of seconds within [now - max_age_s, now +
    MAX_FUTURE_S], else SignatureError saying which way it is wrong.

    Every comparison with NaN is false, so `now - nan > max_age_s` let a job with `issued:
    NaN` through forever; an issue time far in the future did the same for as long as it
    chose. Only a real, finite number inside the window passes."""
    if isinstance(issued, bool) or not isinstance(issued, (int, float)):
        raise SignatureError(f"{what} issue time {str(issued)[:40]!r} is not a number: refused")
    if not math.isfinite(issued):
        raise SignatureError(f"{what} issue time {issued!r} is not a finite number: refused")
    age = time.time() - issued
    if age > max_age_s:
        raise SignatureError(f"{what} issued {age:.0f} s ago, older than {max_age_s:.0f} s: "
                             "refused")
    if -age > MAX_FUTURE_S:
        raise SignatureError(f"{what} issued {-age:.0f} s in the future, beyond the "
                             f"{MAX_FUTURE_S:.0f} s allowed for clock skew: refused (check "
                             "both machines' clocks, e.g. NTP)")
    return float(issued)


def non_finite(value, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinity in `value` (JSON data), else None.

    Python's JSON reads `NaN` and `Infinity`, and every comparison with NaN is false, so a
    bound such as `timeout <= limit` does not hold it back: no signed number may be one."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "(the body)"
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None
