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

# elements that overflow their .panel (plots, tables, code, headings), unless a scroll box inside
# the panel holds them; and the status bar covering the first or last panel
OVERFLOW_JS = """() => {
    const bad = [];
    const clipped = (el, panel) => {
        for (let a = el.parentElement; a && a !== panel; a = a.parentElement) {
            const s = getComputedStyle(a);
            if (s.overflowX !== 'visible' && s.overflowY !== 'visible') {
                const r = a.getBoundingClientRect(), p = panel.getBoundingClientRect();
                return r.right <= p.right + 1 && r.bottom <= p.bottom + 1;
            }
        }
        return false;
    };
    for (const panel of document.querySelectorAll('.panel')) {
        const p = panel.getBoundingClientRect();
        for (const el of panel.querySelectorAll('.js-plotly-plot, .main-svg, table, pre, h3')) {
            const r = el.getBoundingClientRect();
            if (r.width === 0 && r.height === 0) continue;
            if (clipped(el, panel)) continue;  // inside a scroll box of the panel: it scrolls
            if (r.right > p.right + 1 || r.bottom > p.bottom + 1 || r.left < p.left - 1)
                bad.push(`${el.id || el.className.baseVal || el.className || el.tagName} in `
                         + `${panel.querySelector('h3') ? panel.querySelector('h3').innerText : '?'}`);
        }
    }
    // at each end of the page, the first and the last panel's edges show, not the status bar
    const bar = document.querySelector('.statusbar');
    const panels = Array.from(document.querySelectorAll('.panel'));
    if (!panels.length) return bad.concat(['no panel rendered']);
    const shown = (panel, y) => {
        const r = panel.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + r.width / 2, y);
        return hit && panel.contains(hit) || !(bar && bar.contains(hit));
    };
    window.scrollTo(0, 0);
    const top = panels[0].getBoundingClientRect().top;
    if (!shown(panels[0], top + 2)) bad.push('status bar covers the first panel');
    window.scrollTo(0, document.documentElement.scrollHeight);
    const last = panels.reduce((a, p) => p.getBoundingClientRect().bottom
                                        > a.getBoundingClientRect().bottom ? p : a);
    if (!shown(last, last.getBoundingClientRect().bottom - 2))
        bad.push('status bar covers the last panel');
    return bad;
}"""

WIDTHS = (1280, 1500, 1920)


@pytest.fixture(scope="session")
def live_app(tmp_path_factory):
    """The app (one per process: Dash registers page callbacks globally) on a free port.

    Yields (base URL, token): the server needs its token on loopback too.
    """
    runs = tmp_path_factory.mktemp("runs")
    os.environ["UOL_IDE_RUNS_DB"] = str(runs / "ide_runs.sqlite")  # history isolated per session
    # and the compiler's private caches (tuning database, builds): the Reports page shows them
    os.environ.setdefault("UOL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    from app.main import create_app
    from app.security import app_token

    app = create_app(cache_dir=str(tmp_path_factory.mktemp("jobs")))
    from app.main import warm_host_probe

    warm_host_probe()  # the server's start probes the host too: wait for it before any page
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


def check_layout_at_widths(page: Page, name: str) -> None:
    """The page as the journey left it, at each width: a screenshot per width (CI artefacts)
    and no element overflowing its panel."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        wait_idle(page)
        page.wait_for_timeout(500)  # plotly's resize after the layout settles
        page.screenshot(path=str(ARTIFACTS / f"{name}_{width}.png"), full_page=True)
        overflowing = page.evaluate(OVERFLOW_JS)
        assert overflowing == [], (width, overflowing)
    page.set_viewport_size({"width": 1500, "height": 1000})
