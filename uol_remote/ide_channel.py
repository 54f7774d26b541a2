"""The IDE's own background jobs on the broker (`uol serve --broker`): a Celery app whose
messages and stored results are sealed with a key of the IDE alone.

Dash's Celery manager would put the IDE's background callbacks (Run, Tune, Profile, the gloo
measurement, the hardware probe, the guide's measurements) on Redis as plain JSON, and read their results back the same way. A
callback builds and runs the kernel its arguments describe, so whoever could put a message on
that queue could run code on the IDE's machine, and whoever could write a result could put
any component into the user's page. Here:

- every message (task and control: the cancel button's terminate) is HMAC-SHA256-sealed with
  a fresh random key that `uol serve` writes to a private file (mode 600) for itself and its
  job worker; the worker accepts no other content type, so an unsigned or wrongly signed
  message is refused when it is decoded, before any task is looked at;
- every value the jobs store (result, progress, task state) is sealed with the same key and
  bound to its Redis key; a value that does not verify reads as missing;
- the key never leaves this machine: the target workers' shared secret cannot sign IDE jobs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from celery import Celery
from celery.backends.redis import RedisBackend
from kombu.serialization import register
from kombu.utils.json import dumps, loads

from uol_remote.celery_app import broker_from_env, check_broker_url
from uol_remote.ledger import IDE_LEDGER, ledger
from uol_remote.signing import MAX_AGE_S, SignatureError, check_issued, read_secret_file

QUEUE_ENV = "UOL_IDE_QUEUE"  # set by `uol serve --broker`: the IDE's own job queue
KEY_FILE_ENV = "UOL_IDE_KEY_FILE"  # the private file of the IDE's sealing key
SERIALIZER = "uol-sealed"
CONTENT_TYPE = "application/x-uol-sealed"
_SEAL: dict[str, bytes] = {}  # this process's key (one IDE per process)


def new_queue_name() -> str:
    """A queue of this IDE alone: two IDEs on one broker never take each other's jobs."""
    return f"uol-ide-{secrets.token_hex(4)}"


def write_key(folder: Path, queue: str) -> Path:
    """A fresh random key in `folder`/QUEUE.key, created readable by its owner alone."""
    path = folder / f"{queue}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return path


def _mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\0".join(parts), hashlib.sha256).hexdigest()


def seal_message(body, key: bytes) -> str:
    """`body` as the text a message carries: its signature, then JSON with the issue time."""
    text = dumps({"issued": time.time(), "body": body})
    return f"{_mac(key, b'message', text.encode())}:{text}"


def open_message(data, key: bytes, max_age_s: float = MAX_AGE_S):
    """The body of a sealed message, or SignatureError saying why it is refused."""
    text = data.decode() if isinstance(data, bytes | bytearray | memoryview) else str(data)
    sig, sep, rest = text.partition(":")
    if not sep or not hmac.compare_digest(sig, _mac(key, b"message", rest.encode())):
        raise SignatureError("IDE job with a missing or wrong seal: refused")
    envelope = loads(rest)
    if not isinstance(envelope, dict) or "body" not in envelope:
        raise SignatureError("IDE job without a body: refused")
    check_issued(envelope.get("issued"), max_age_s, what="IDE job")
    return envelope["body"]


def _key() -> bytes:
    if "key" not in _SEAL:
        raise SignatureError("no IDE key in this process: refused")
    return _SEAL["key"]


def install_key(key: bytes) -> None:
    """Seal and open this process's messages with `key` (the serializer is kombu-global)."""
    _SEAL["key"] = key
    register(SERIALIZER, lambda body: seal_message(body, _key()),
             lambda data: open_message(data, _key()), content_type=CONTENT_TYPE,
             content_encoding="utf-8")


class SealedRedisBackend(RedisBackend):
    """The Redis result store with every value sealed and bound to its key, and every key
    under this IDE's prefix (Dash's result keys are hashes of a callback's inputs: another IDE
    on the same broker would compute the same ones)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prefix = f"{self.app.conf.uol_ide_queue}:"

    def _sealed(self, key: str, value) -> bytes:
        raw = value.encode() if isinstance(value, str) else bytes(value)
        return f"{_mac(_key(), b'value', key.encode(), raw)}:".encode() + raw

    def _opened(self, key: str, stored):
        if stored is None:
            return None
        sig, sep, raw = bytes(stored).partition(b":")
        if sep and hmac.compare_digest(sig.decode("ascii", "replace"),
                                       _mac(_key(), b"value", key.encode(), raw)):
            return raw
        return None  # written by someone without the key: as if nothing were there

    def _name(self, key) -> str:
        key = key.decode() if isinstance(key, bytes) else str(key)
        return key if key.startswith(self.prefix) else self.prefix + key

    def get(self, key):
        name = self._name(key)
        return self._opened(name, super().get(name))

    def mget(self, keys):
        names = [self._name(k) for k in keys]
        return [self._opened(n, v) for n, v in zip(names, super().mget(names))]

    def set(self, key, value, expires=None, **retry_policy):
        name = self._name(key)
        return super().set(name, self._sealed(name, value), expires=expires, **retry_policy)

    def delete(self, key):
        return super().delete(self._name(key))

    def expire(self, key, value):
        return super().expire(self._name(key), value)

    def on_task_call(self, producer, task_id):
        # Dash polls the store; nothing here waits on a result, so subscribe to nothing
        # (a subscription nobody reads fills Redis's output buffer)
        return None

    def claim(self, nonce: str, ttl_s: int = int(2 * MAX_AGE_S)) -> bool:
        """True the first time `nonce` is claimed: a sealed job runs once, replays never.
        The nonce must be new to this machine's ledger as well as to Redis, so deleting the
        claim key does not let a captured message run again (uol_remote.ledger)."""

        if not ledger(IDE_LEDGER).first_sight(nonce):
            return False
        return bool(self.client.set(f"{self.prefix}claim:{nonce}", b"1", nx=True, ex=ttl_s))


def make_ide_app(broker_url: str, key: bytes, queue: str, task_cls=None) -> Celery:
    """The Celery app of the IDE's background callbacks: `queue` only, sealed everything."""
    check_broker_url(broker_url)
    install_key(key)
    backend = f"{SealedRedisBackend.__module__}:{SealedRedisBackend.__name__}+{broker_url}"
    app = Celery("uol_ide", broker=broker_url, backend=backend,
                 **({"task_cls": task_cls} if task_cls else {}))
    app.conf.update(
        uol_ide_queue=queue,
        # control messages (Dash's cancel is a terminate broadcast) use the task serializer
        task_serializer=SERIALIZER, event_serializer=SERIALIZER, accept_content=[SERIALIZER],
        result_serializer="json", result_accept_content=["json"],
        task_default_queue=queue, task_track_started=True,
        result_expires=24 * 3600,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        worker_hijack_root_logger=False,
        worker_prefetch_multiplier=1,  # a long tune does not hold the next job back
    )
    return app


def app_from_env(task_cls=None) -> Celery | None:
    """The IDE's job app when `uol serve --broker` set this process up for one, else None."""

    queue, key_file, broker = (os.environ.get(QUEUE_ENV), os.environ.get(KEY_FILE_ENV),
                               broker_from_env())
    if not (queue and key_file and broker):
        return None
    return make_ide_app(broker, read_secret_file(Path(key_file)), queue, task_cls)
