"""A kernel engineer used to Compiler Explorer on a machine without a GPU: picks h100 and Triton,
asks for Triton's stages, reads the PTX, switches to TTGIR, clicks a PTX row and lands on the
Triton line it came from (and sees the ODL line behind it), at 1280 and 1920 px."""

from __future__ import annotations

import re

import pytest
from conftest import ARTIFACTS, OVERFLOW_JS, pick, wait_idle
from playwright.sync_api import expect

WIDTHS = (1280, 1920)
# a row op opened on another GPU (a host target would first probe the machine)
START = "/?op=softmax&target=a100-sxm-80gb&backend=triton&sizes=R%3D256%2CC%3D256"


def open_studio(page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)


def _in_view(page, selector: str) -> bool:
    """Whether the element is inside the visible part of its scrolling code pane."""
    return page.evaluate("""(sel) => {
        const el = document.querySelector(sel);
        const pane = el && el.closest('.code-blob');
        if (!pane) return false;
        const r = el.getBoundingClientRect(), p = pane.getBoundingClientRect();
        return r.top >= p.top - 1 && r.bottom <= p.bottom + 1;
    }""", selector)


@pytest.mark.parametrize("width", WIDTHS)
def test_h100_triton_stages_link_back_to_the_source(page, live_server, width):
    page.set_viewport_size({"width": width, "height": 1000})
    open_studio(page, live_server + START)
    pick(page, "target-select", "h100-sxm")
    wait_idle(page)
    if "Triton" not in page.locator("#backend-select").inner_text():
        pick(page, "backend-select", "Triton")
    expect(page.locator("#kernel-source")).to_contain_text("triton.jit", timeout=60_000)
    wait_idle(page)
    page.click("#stage-button")
    status = page.locator("#stage-status")
    expect(status).to_contain_text("PTX of softmax_rows for h100-sxm", timeout=180_000)
    expect(status).to_contain_text("sm_90a")
    listing = page.locator("#stage-source")
    expect(listing).to_contain_text(".target sm_90a")
    expect(listing).to_contain_text("ld.global")
    # another stage: TTGIR, with its layouts
    pick(page, "stage-select", "TTGIR")
    expect(status).to_contain_text("TTGIR of softmax_rows", timeout=60_000)
    expect(listing).to_contain_text("#ttg.blocked")
    pick(page, "stage-select", "PTX")
    expect(status).to_contain_text("PTX of softmax_rows", timeout=60_000)
    # a PTX load lands on the Triton line that loads, which names the ODL line behind it
    row = page.locator("#stage-source [data-kline]", has_text="ld.global").first
    kline = row.get_attribute("data-kline")
    odl = row.get_attribute("data-odl")
    row.scroll_into_view_if_needed()
    row.click()
    target = page.locator(f"#kernel-source #k-{kline}")
    expect(target).to_have_class(re.compile(r"\blanded\b"))
    expect(target).to_contain_text("tl.load")
    assert _in_view(page, f"#kernel-source #k-{kline}")
    assert odl and target.get_attribute("data-odl") == odl
    row.hover()
    expect(page.locator(f'#odl-highlight [data-odl="{odl}"]').first).to_have_class(
        re.compile(r"\bhot\b"))
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / f"triton_stages_{width}.png"), full_page=True)
    assert page.evaluate(OVERFLOW_JS) == []
    assert page.js_errors == []


def test_a_cpu_target_says_why_there_are_no_stages(page, live_server):
    open_studio(page, live_server + START.replace("a100-sxm-80gb", "graviton3"))
    page.click("#stage-button")
    expect(page.locator("#stage-source")).to_contain_text(
        "No stages: graviton3 is not a GPU target", timeout=60_000)
    assert page.js_errors == []


def test_a_tune_without_a_gpu_says_it_needs_one_to_time(page, live_server):
    page.set_viewport_size({"width": 1280, "height": 1000})
    open_studio(page, live_server + START.replace("a100-sxm-80gb", "h200-sxm"))
    page.fill("#tune-budget", "2")
    page.click("#tune-button")
    status = page.locator("#tune-status")
    expect(status).to_contain_text("needs a GPU to time", timeout=240_000)
    expect(status).to_contain_text("verified under the Triton interpreter")
    expect(status).not_to_contain_text("0 verified")
    plot = page.locator("#tune-plot")
    expect(plot).to_contain_text("needs a GPU to time")
    assert page.locator("#tune-plot .scatterlayer .point").count() == 0  # no point at 0
    assert page.js_errors == []
