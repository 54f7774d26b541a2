"""The Studio flows a user walks: open, pick an op, compile, change a knob, run, diff, errors."""

from __future__ import annotations

import os
import re

from conftest import ARTIFACTS, pick, wait_idle
from playwright.sync_api import expect


def open_studio(page, live_server):
    page.goto(live_server + "/")
    # opens with matmul compiled: kernel code with lines mapped to ODL lines
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)


def test_studio_opens_with_matmul_and_maps_lines(page, live_server):
    open_studio(page, live_server)
    expect(page.locator("#odl-editor")).to_have_value(re.compile(r"op matmul"))
    expect(page.locator("#compile-status")).to_contain_text("compiled in")
    # hovering a kernel line of the statement highlights the ODL line it came from
    stmt = page.locator("#kernel-source span.mapped:not(.sig)").first
    odl_line = stmt.get_attribute("data-odl")
    stmt.hover()
    expect(page.locator(f'#odl-highlight [data-odl="{odl_line}"]')).to_have_class(
        re.compile(r"\bhot\b"))
    page.screenshot(path=str(ARTIFACTS / "studio_matmul.png"), full_page=True)
    assert page.js_errors == []


def test_softmax_compile_knob_run_and_diff(page, live_server):
    open_studio(page, live_server)
    page.click("#op-select")  # a long list: search it, as a user does
    page.get_by_placeholder("Search").fill("softmax")
    page.get_by_role("option", name="softmax", exact=True).click()
    expect(page.locator("#odl-editor")).to_have_value(re.compile(r"op softmax"))
    pick(page, "backend-select", "Triton")
    expect(page.locator("#kernel-source")).to_contain_text("triton.jit", timeout=60_000)
    wait_idle(page)
    # first run with the default knobs
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    # change a knob: a legal value of num_warps; the kernel is re-emitted with it
    knob = page.locator('[data-knob="num_warps"]')
    expect(knob).to_be_visible()
    knob.locator(".dash-dropdown, [role=combobox]").first.click()
    page.get_by_role("option", name="2", exact=True).click()
    expect(page.locator("#kernel-source")).to_contain_text("num_warps=2", timeout=30_000)
    wait_idle(page)
    page.click("#run-button")
    # the diff of the first run (against an older run of the op) may already show: wait for
    # the second run's, against the first Triton run
    expect(page.locator("#run-diff")).to_be_visible(timeout=120_000)
    expect(page.locator("#diff-summary")).to_contain_text("num_warps: 4 → 2", timeout=120_000)
    expect(page.locator("#diff-summary")).not_to_contain_text("threads")
    page.screenshot(path=str(ARTIFACTS / "studio_softmax_diff.png"), full_page=True)
    assert page.js_errors == []


def test_illegal_knob_values_are_disabled_with_their_constraint(page, live_server):
    open_studio(page, live_server)
    mr = page.locator('[data-knob="mr"]')
    mr.locator(".dash-dropdown, [role=combobox]").first.click()
    disabled = page.locator("[role=option]:has(input[disabled])")
    expect(disabled.first).to_be_visible()
    expect(disabled.first).to_contain_text(re.compile(r"register file|latency|divisibility|L1"))
    page.keyboard.press("Escape")


def test_broken_odl_shows_error_at_its_line(page, live_server):
    open_studio(page, live_server)
    page.fill("#odl-editor", "op bad(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] +\n")
    page.click("#compile-button")
    expect(page.locator("#odl-error")).to_contain_text("line 2", timeout=30_000)
    expect(page.locator("#odl-highlight .err-line")).to_have_attribute("data-line", "2")
    page.screenshot(path=str(ARTIFACTS / "studio_odl_error.png"))
    assert page.js_errors == []


def test_crashing_kernel_shows_error_and_server_keeps_serving(page, live_server):
    open_studio(page, live_server)
    os.environ["UOL_FAULT_INJECT"] = "segfault"  # the run worker kills itself with SIGSEGV
    try:
        page.click("#run-button")
        expect(page.locator("#run-error")).to_contain_text("SIGSEGV", timeout=120_000)
    finally:
        del os.environ["UOL_FAULT_INJECT"]
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
