"""The Dash application factory: pages, theme, navigation, status bar, background-job manager.

Deferred imports: the server's parts load when create_app builds it, so importing app is cheap.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import dash
from dash import Dash

ASSETS = Path(__file__).parent / "assets"


def create_app(cache_dir: str | None = None, token: str | None = None,
               no_token: bool = False) -> Dash:
    """Build the IDE (one per process: Dash page callbacks are registered globally).

    Every request needs `token` (a fresh one when None; read it back with
    `app.security.app_token(app)`); `no_token=True` opens it to loopback Host names instead,
    which `uol serve` allows on loopback binds only. Background jobs run through the broker
    when `uol serve --broker` set this process up for it (app.background), else here, their
    files in `cache_dir` or a private per-user job folder removed when the process exits.
    """
    from app import security
    from app.background import make_manager
    from uol_core.runtime.usercache import job_dir

    if no_token and token:
        raise ValueError("no_token=True and a token were both given: choose one")
    jobs = Path(cache_dir) if cache_dir else job_dir("jobs")
    app = Dash(
        __package__,  # pages import as app.pages.<name>: a test import does not re-register them
        use_pages=True,
        assets_folder=str(ASSETS),  # inside the package, so a pip install ships it
        background_callback_manager=make_manager(jobs),
        suppress_callback_exceptions=True,  # page layouts are not all in the first layout
        title="UOL Studio",
        update_title=None,
        on_error=callback_failed,
    )
    # background-job handles are signed with this key; stable per server process
    app.server.secret_key = os.environ.get("UOL_SECRET_KEY") or secrets.token_hex(16)
    from app import shell

    app.layout = shell.layout()
    security.install(app, None if no_token else (token or security.new_token()))
    from app.services import job_queue

    job_queue.install(app)  # a per-browser id, so one browser's jobs queue apart from another's
    threading.Thread(target=warm_host_probe, name="host-probe", daemon=True).start()
    return app


def warm_host_probe() -> None:
    """Probe this machine once as the server starts (seconds), so the user's first compile for
    the host finds its facts cached rather than spending its time budget measuring them; a
    compile that comes sooner waits for this probe (uol_core.hfl.probe) instead of repeating it."""
    import logging  # stdlib, loaded with the thread

    from uol_core.hfl import load_target  # the compiler's facts load in this thread

    try:
        load_target("host")
    except Exception as exc:  # no compiler, no cache folder: the first compile says what
        logging.getLogger(__name__).warning("host probe at start failed: %s", exc)


def callback_failed(err: Exception) -> None:
    """Every callback's last resort: input it could not use (a malformed store, a value the page
    never offered) leaves its outputs as they were and says so in one line in the status bar;
    the server logs the error. Never a 500 or a traceback to the client."""
    import logging

    from dash import set_props

    message = " ".join(str(err).split())[:200] or type(err).__name__
    logging.getLogger("uol.app").warning("callback failed: %s: %s", type(err).__name__, message)
    set_props("status-error", {"children": f"✗ the last action failed: {message}",
                               "title": type(err).__name__})


def page_names() -> list[str]:
    """Registered page paths, in navigation order (for tests and the CLI)."""
    return [p["path"] for p in sorted(dash.page_registry.values(), key=lambda p: p["order"] or 0)]
