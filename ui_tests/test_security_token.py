"""The token as a user meets it in Chromium: refused without it, the printed URL logs in."""

from __future__ import annotations

import re

from conftest import new_context, wait_idle
from playwright.sync_api import expect

from app import security


def _sessions(context) -> list[dict]:
    """The context's session cookies (other cookies of the app are not credentials)."""
    return [c for c in context.cookies() if c["name"].startswith(security.COOKIE)]


def test_browser_without_token_sees_the_login_page_only(browser, live_server):
    context = new_context(browser)
    try:
        page = context.new_page()
        response = page.goto(live_server + "/")
        assert response.status == 401
        expect(page.locator("h2")).to_have_text("UOL Studio needs the server's token")
        assert page.locator("#status-bar").count() == 0  # not a byte of the IDE itself
        wrong = page.goto(live_server + "/?token=not-the-token-of-this-server")
        assert wrong.status == 401
        assert _sessions(context) == []
    finally:
        context.close()


def test_token_url_logs_in_and_the_ide_works(browser, live_server, live_token):
    context = new_context(browser)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{live_server}/hardware?token={live_token}")
        assert page.url == f"{live_server}/hardware"  # the token left the address bar
        # a callback answered: the session cookie rides on Dash's own requests
        expect(page.locator("#status-target")).to_have_text(re.compile(r"target: "),
                                                            timeout=60_000)
        wait_idle(page)
        cookies = _sessions(context)
        assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
        assert live_token not in cookies[0]["value"]
        assert security.COOKIE not in page.evaluate("document.cookie")  # HttpOnly: scripts cannot
        page.goto(f"{live_server}/reports")  # later pages need no token in the URL
        expect(page.locator("#status-target")).to_have_text(re.compile(r"target: "),
                                                            timeout=60_000)
        assert errors == []
    finally:
        context.close()
