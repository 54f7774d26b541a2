"""The Dash application factory: pages, theme, navigation, status bar, background-job manager."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import dash
import diskcache
from dash import Dash, DiskcacheManager

ASSETS = Path(__file__).parent / "assets"
TOKEN_ENV = "UOL_SERVE_TOKEN"


def create_app(cache_dir: str | None = None, token: str | None = None) -> Dash:
    """Build the IDE (one per process: Dash page callbacks are registered globally)."""
    cache = diskcache.Cache(cache_dir or tempfile.mkdtemp(prefix="uol-ide-jobs-"))
    app = Dash(
        __package__,  # pages import as app.pages.<name>: a test import does not re-register them
        use_pages=True,
        assets_folder=str(ASSETS),  # inside the package, so a pip install ships it
        background_callback_manager=DiskcacheManager(cache),
        suppress_callback_exceptions=True,  # page layouts are not all in the first layout
        title="UOL Studio",
        update_title=None,
    )
    # background-job handles are signed with this key; stable per server process
    app.server.secret_key = os.environ.get("UOL_SECRET_KEY") or secrets.token_hex(16)
    from app import shell

    app.layout = shell.layout()
    from app import security

    security.install(app, token)  # every request: loopback Host, or the token when one is set
    return app


def page_names() -> list[str]:
    """Registered page paths, in navigation order (for tests and the CLI)."""
    return [p["path"] for p in sorted(dash.page_registry.values(), key=lambda p: p["order"] or 0)]
