"""Live-server fixtures: the IDE on a free 127.0.0.1 port in a thread, Debian's Chromium via Playwright."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright
from werkzeug.serving import make_server

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = os.environ.get("UOL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
# mirrors dash.testing's wait: no callback requested, blocked, executing or pending
WAIT_IDLE_JS = """() => {
    const s = window.store && window.store.getState();
    if (!s) return false;
    const cbs = Object.assign({}, s.callbacks);
    delete cbs.stored; delete cbs.completed;
    return Object.values(cbs).every(a => a.length === 0);
}"""


@pytest.fixture(scope="session")
def live_app(tmp_path_factory):
    """The app (one per process: Dash registers page callbacks globally) on a free port.

    Yields (base URL, token): the server needs its token on loopback too.
    """
    runs = tmp_path_factory.mktemp("runs")
    os.environ["UOL_IDE_RUNS_DB"] = str(runs / "ide_runs.sqlite")  # history isolated per session
    from app.main import create_app
    from app.security import app_token

    app = create_app(cache_dir=str(tmp_path_factory.mktemp("jobs")))
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", app_token(app)
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture(scope="session")
def live_server(live_app) -> str:
    """The base URL of the live app (pages opened through `page` carry its session cookie)."""
    return live_app[0]


@pytest.fixture(scope="session")
def live_token(live_app) -> str:
    """The live app's token (what `uol serve` prints in its URL)."""
    return live_app[1]


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium (no browser download)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_context(browser):
    """A browser context of the size the screenshots use, with no cookie yet."""
    return browser.new_context(viewport={"width": 1500, "height": 1000},
                               device_scale_factor=1, accept_downloads=True)


@pytest.fixture
def page(browser, live_server, live_token) -> Page:
    """A fresh page, logged in as a user is (the token URL, traded for the session cookie);
    JS errors and console errors are collected in page.js_errors."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = new_context(browser)
    # the request API shares the context's cookies: the token URL's 302 leaves the cookie there
    login = context.request.get(f"{live_server}/_dash-layout?token={live_token}", max_redirects=0)
    assert login.status == 302, login.status
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.js_errors = errors
    yield pg
    context.close()


def wait_idle(page: Page, timeout: int = 60_000) -> None:
    """Wait until Dash has no callback in flight (before screenshots and assertions on state)."""
    page.wait_for_function(WAIT_IDLE_JS, timeout=timeout)


def pick(page: Page, dropdown_id: str, value: str) -> None:
    """Choose `value` in a Dash 4 dropdown as a user does: open it, type into its search box
    where it has one (long lists render only the options in view), click the option."""
    page.click(f"#{dropdown_id}")
    search = page.get_by_placeholder("Search")
    if search.count():
        search.last.fill(value)
    page.get_by_role("option", name=value, exact=True).click()
