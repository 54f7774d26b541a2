"""Journeys of a user who reloads, changes inputs and edits, at 1280 and 1920 px: the Studio's
state, the Communication topology and the Debugger's mode and kernel survive a reload; a Tune
keeps running across a reload and its result and Apply best come back; no panel shows a kernel
the inputs no longer describe; the ODL editor is a code editor."""

from __future__ import annotations

import re

import pytest
from conftest import ARTIFACTS, wait_idle
from playwright.sync_api import expect

WIDTHS = (1280, 1920)
KEPT_ODL = """op rms_kept(X: f32[R, C]) -> Y: f32[R, C]:
    # typed here, not a library op: the reload must bring it back
    ms[r] = mean[c](X[r, c] ** 2)
    Y[r, c] = X[r, c] * rsqrt(ms[r] + 1e-6)
"""
SMALL = "M=32,K=32,N=32"


def open_studio(page, url: str, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(url)
    compiled(page)


def compiled(page) -> None:
    """Wait for the page's compile; one stopped at its time limit (the first compile of a
    server on a busy host pays its imports) is pressed again, as a user would."""
    status = page.locator("#compile-status")
    expect(status).not_to_be_empty(timeout=90_000)
    wait_idle(page)
    if "time limit" in page.locator("#odl-error").inner_text():
        page.click("#compile-button")
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)


def set_sizes(page, text: str) -> None:
    page.fill("#sizes-input", text)
    page.press("#sizes-input", "Enter")
    wait_idle(page)


def knob_shows(page, name: str) -> str:
    return page.locator(f'[data-knob="{name}"]').inner_text().split("\n")[1].strip()


def choose_knob(page, name: str, value: str) -> None:
    knob = page.locator(f'[data-knob="{name}"]')
    knob.locator(".dash-dropdown, [role=combobox]").first.click()
    page.get_by_role("option", name=value, exact=True).click()
    wait_idle(page)


def pick(page, dropdown: str, label: str) -> None:
    page.click(f"#{dropdown}")
    search = page.get_by_placeholder("Search")
    if search.count():
        search.last.fill(label)
    page.get_by_role("option", name=label, exact=True).click()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reload_and_the_nav_link_reopen_the_studio_state(page, live_server, width):
    open_studio(page, live_server + "/", width)
    set_sizes(page, SMALL)
    choose_knob(page, "ku", "1")
    expect(page.locator("#kernel-source")).to_be_attached()
    page.fill("#tune-budget", "3")
    wait_idle(page)
    assert "config=" in page.url and "ku%3D1" in page.url, page.url
    page.reload()
    compiled(page)
    page.wait_for_timeout(1000)  # a late re-compile (a knob echo) would show by now
    wait_idle(page)
    expect(page.locator("#sizes-input")).to_have_value(SMALL)
    assert knob_shows(page, "ku") == "1"
    expect(page.locator("#tune-budget")).to_have_value("3")
    # typed ODL of the user's own, then a reload: the text, not the library op, comes back
    page.fill("#odl-editor", KEPT_ODL)
    wait_idle(page)
    page.click("#compile-button")
    wait_idle(page)
    page.reload()
    compiled(page)
    expect(page.locator("#odl-editor")).to_have_value(KEPT_ODL)
    expect(page.locator("#op-select")).to_contain_text("(edited)")
    # away to another page and back by the navigation bar: the same state
    page.click("#nav-graph")
    expect(page.locator("#odl-editor")).to_have_count(0)
    page.click("#nav-studio")
    compiled(page)
    expect(page.locator("#odl-editor")).to_have_value(KEPT_ODL, timeout=30_000)
    assert page.js_errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reload_keeps_the_topology_and_the_debugger_kernel(page, live_server, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(live_server + "/communication")
    page.fill("#nodes-input", "32")
    page.press("#nodes-input", "Enter")
    pick(page, "topology-select", "2D torus")
    wait_idle(page)
    page.reload()
    wait_idle(page)
    expect(page.locator("#nodes-input")).to_have_value("32")
    expect(page.locator("#topology-select")).to_contain_text("2D torus")
    page.goto(live_server + "/debugger")
    wait_idle(page)
    page.get_by_text("your Triton kernel file").click()
    page.fill("#debug-kernel-text", "import triton\n# my kernel, kept across a reload\n")
    page.fill("#debug-function", "my_kernel")
    wait_idle(page)
    page.reload()
    wait_idle(page)
    expect(page.locator("#debug-mode input[value=file]")).to_be_checked()
    expect(page.locator("#debug-kernel-text")).to_have_value(re.compile("kept across a reload"))
    expect(page.locator("#debug-function")).to_have_value("my_kernel")
    assert page.js_errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reloaded_page_reattaches_to_its_tune_and_applies_the_best(page, live_server, width):
    open_studio(page, live_server + "/", width)
    set_sizes(page, SMALL)
    page.fill("#tune-budget", "4")
    page.click("#tune-button")
    expect(page.locator("#tune-status")).to_contain_text("measured", timeout=120_000)
    page.reload()  # Dash's own handle on the running callback is gone with the page
    compiled(page)
    status = page.locator("#tune-status")
    expect(status).to_contain_text("measured of a budget of 4", timeout=240_000)
    expect(status).to_contain_text("best verified")
    apply = page.locator("#tune-apply")
    expect(apply).to_be_enabled()
    best = dict(pair.split("=") for pair in re.search(
        r"with ([^;]+)", status.inner_text()).group(1).split(", "))
    apply.click()
    wait_idle(page)
    page.wait_for_timeout(500)
    wait_idle(page)
    shown = {name: knob_shows(page, name) for name in best
             if page.locator(f'[data-knob="{name}"]').count()}
    assert shown and shown == {k: v for k, v in best.items() if k in shown}, (shown, best)
    page.screenshot(path=str(ARTIFACTS / f"studio_tune_reattached_{width}.png"), full_page=True)
    # other sizes, then a reload: the tune of the old sizes is not shown, nor offered to Apply
    set_sizes(page, "M=48,K=32,N=32")
    page.reload()
    compiled(page)
    page.wait_for_timeout(2500)  # the job's record is polled once a second
    wait_idle(page)
    expect(page.locator("#tune-status")).not_to_contain_text("best verified")
    expect(page.locator("#tune-apply")).to_be_disabled()
    expect(page.locator("#tune-button")).to_be_enabled()
    assert page.js_errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_no_panel_outlives_the_inputs_it_was_made_for(page, live_server, width):
    open_studio(page, live_server + "/", width)
    set_sizes(page, SMALL)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    # other sizes: the Result, the roofline and the history of the old kernel go
    set_sizes(page, "M=48,K=32,N=32")
    expect(page.locator("#run-verdict")).to_have_count(0)
    expect(page.locator("#run-cleared")).to_contain_text("M=48")
    expect(page.locator("#roofline-graph")).to_contain_text("Run the kernel")
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    # an ODL error: the previous op's Result and roofline go, the error shows
    page.fill("#odl-editor", "op bad(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] +\n")
    wait_idle(page)
    page.click("#compile-button")
    wait_idle(page)
    expect(page.locator("#odl-error")).to_contain_text("✗")
    expect(page.locator("#run-verdict")).to_have_count(0)
    expect(page.locator("#run-cleared")).to_contain_text("error")
    # a new op's sizes come from its signature, not the old M,K,N
    page.fill("#odl-editor", KEPT_ODL)
    wait_idle(page)
    expect(page.locator("#sizes-input")).to_have_value(re.compile(r"^R=\d+,C=\d+$"))
    # a GPU target with the C backend: switched to Triton, said so, the status bar names it
    pick(page, "target-select", "h100-sxm")
    expect(page.locator("#backend-select")).to_contain_text("Triton", timeout=30_000)
    expect(page.locator("#studio-note")).to_contain_text("GPU target")
    expect(page.locator("#status-target")).to_contain_text("h100-sxm", timeout=10_000)
    assert page.js_errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_an_emulated_run_says_it_was_not_timed(page, live_server, width):
    open_studio(page, live_server + f"/?op=matmul&target=graviton3&backend=c&sizes={SMALL}",
                width)
    page.click("#run-button")
    result = page.locator("#run-result")
    expect(result).to_contain_text("verified under emulation; not timed", timeout=180_000)
    expect(result).not_to_contain_text("measured")
    # the history names the run's mode the same way
    expect(page.locator("#history-table")).to_contain_text("verified under emulation; not timed")
    assert page.js_errors == []


LONG_ODL = ("op many_lines(X: f32[R, C]) -> Y: f32[R, C]:\n"
            + "".join(f"    # note {i:02d}" + (" a long comment" * 12 if i == 5 else "") + "\n"
                      for i in range(40))
            + "    Y[r, c] = X[r, c] * 2.0\n")

EDITOR_GEOMETRY_JS = """() => {
    const area = document.getElementById('odl-editor');
    const box = area.getBoundingClientRect();
    const inside = el => { const r = el.getBoundingClientRect();
                           return r.top >= box.top - 1 && r.bottom <= box.bottom + 1; };
    const rows = Array.from(document.querySelectorAll('#odl-highlight > span[data-line]'));
    const gutter = n => document.querySelector(`#odl-gutter [data-gutter-line="${n}"]`);
    return {scrolls_sideways: area.scrollWidth > area.clientWidth + 1,
            cut: rows.filter(r => r.getBoundingClientRect().right > box.right + 1).length,
            first_shown: gutter(1) ? inside(gutter(1)) : null,
            last_shown: gutter(rows.length) ? inside(gutter(rows.length)) : null,
            // a number sits at the height of its own line of text
            aligned: rows.every(r => gutter(r.dataset.line) &&
                Math.abs(gutter(r.dataset.line).getBoundingClientRect().top
                         - r.getBoundingClientRect().top) < 2)};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_odl_editor_numbers_wraps_finds_and_indents(page, live_server, width):
    open_studio(page, live_server + "/", width)
    page.fill("#odl-editor", LONG_ODL)
    wait_idle(page)
    geometry = page.evaluate(EDITOR_GEOMETRY_JS)
    assert not geometry["scrolls_sideways"] and geometry["cut"] == 0, geometry
    assert geometry["aligned"], geometry
    # the line numbers scroll with the text
    page.evaluate("() => { const a = document.getElementById('odl-editor'); a.scrollTop = 0; }")
    page.wait_for_timeout(200)
    top = page.evaluate(EDITOR_GEOMETRY_JS)
    assert top["first_shown"] and not top["last_shown"], top
    page.evaluate("() => { const a = document.getElementById('odl-editor'); "
                  "a.scrollTop = a.scrollHeight; }")
    page.wait_for_timeout(200)
    bottom = page.evaluate(EDITOR_GEOMETRY_JS)
    assert bottom["last_shown"] and not bottom["first_shown"] and bottom["aligned"], bottom
    # find: Ctrl+F in the editor, the match's line marked and scrolled into view
    page.focus("#odl-editor")
    page.keyboard.press("Control+f")
    page.keyboard.type("note 37")
    expect(page.locator("#odl-find-count")).to_have_text("1 of 1")
    expect(page.locator("#odl-line-39")).to_have_class(re.compile(r"\bfind-current\b"))
    expect(page.locator('#odl-gutter [data-gutter-line="39"]')).to_be_in_viewport()
    page.screenshot(path=str(ARTIFACTS / f"studio_editor_find_{width}.png"), full_page=True)
    page.keyboard.press("Escape")
    expect(page.locator("#odl-find")).to_be_hidden()
    # auto-indent: Enter after the signature line (it ends in ':') indents the new line
    page.evaluate("() => { const a = document.getElementById('odl-editor'); a.focus(); "
                  "const end = a.value.indexOf('\\n'); a.setSelectionRange(end, end); }")
    page.keyboard.press("Enter")
    page.keyboard.type("Z")
    lines = page.input_value("#odl-editor").split("\n")
    assert lines[1] == "    Z", lines[:3]
    page.keyboard.press("Shift+Tab")
    assert page.input_value("#odl-editor").split("\n")[1] == "Z"
    page.keyboard.press("Enter")  # a plain line: the next one keeps its (zero) indent
    page.keyboard.type("W")
    assert page.input_value("#odl-editor").split("\n")[2] == "W"
    assert page.js_errors == []
