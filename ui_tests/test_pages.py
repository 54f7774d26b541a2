"""Every page opens without console errors; Hardware and Reports do their jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ARTIFACTS, check_layout_at_widths, wait_idle
from playwright.sync_api import expect

PAGES = ["/graph", "/debugger", "/profiler", "/communication", "/training", "/hardware", "/guide",
         "/reports"]


@pytest.mark.parametrize("path", PAGES)
def test_page_opens_without_console_errors(page, live_server, path):
    page.goto(live_server + path)
    expect(page.locator("#status-target")).to_contain_text("target:", timeout=30_000)
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / f"page{path.replace('/', '_')}.png"), full_page=True)
    assert page.js_errors == []


def test_hardware_table_sorts_and_draws_rooflines(page, live_server):
    page.goto(live_server + "/hardware")
    expect(page.locator("#hardware-table")).to_contain_text("h100-sxm", timeout=30_000)
    expect(page.locator("#hardware-roofline .scatterlayer .trace").first).to_be_attached(
        timeout=30_000)
    page.locator('#hardware-table .ag-header-cell[col-id="cores"] .ag-header-cell-label').click()
    wait_idle(page)
    expect(page.locator('#hardware-table .ag-header-cell[col-id="cores"]')).to_have_attribute(
        "aria-sort", "ascending")
    # a click on a target's cell shows where each of its numbers comes from
    page.locator('#hardware-table .ag-row[row-id="h100-sxm"] [col-id="name"]').first.click()
    expect(page.locator("#hardware-provenance")).to_contain_text("h100-sxm: provenance")
    # the same targets compared at their bf16 peaks (AMX, VDPBF16PS, tensor cores)
    page.locator("#hardware-roof-dtype").get_by_text("bf16", exact=True).click()
    wait_idle(page)
    expect(page.locator("#hardware-roofline")).to_contain_text("Roofline per target (bf16)")
    expect(page.locator("#hardware-roofline")).to_contain_text("xeon-spr-8480 (bf16 ")
    assert page.js_errors == []


def test_the_host_probe_fits_beside_the_rooflines(page, live_server):
    """A probed host's facts (a long ISA list, long provenance) wrap in their panel: they
    once widened their grid column until the roofline plot beside them covered its names."""
    page.goto(live_server + "/hardware")
    expect(page.locator("#hardware-table")).to_contain_text("h100-sxm", timeout=30_000)
    expect(page.locator("#hardware-roofline .scatterlayer .trace").first).to_be_attached(
        timeout=30_000)
    page.click("#probe-button")
    expect(page.locator("#probe-facts")).to_contain_text("peak_gflops.fp32", timeout=120_000)
    expect(page.locator("#probe-facts")).not_to_contain_text("['")  # a list reads as a list
    check_layout_at_widths(page, "hardware_probed")
    assert page.js_errors == []


def test_export_html_report_of_a_run(page, live_server, tmp_path):
    page.goto(live_server + "/")
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    page.goto(live_server + "/reports")
    row = page.locator('#runs-table .ag-row[row-index="0"]').first  # the newest run
    row.locator("input[type=checkbox]").check()
    with page.expect_download() as dl:
        page.click("#export-button")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.suffix == ".html"
    text = path.read_text()
    assert "matmul" in text and "Roofline" in text
    expect(page.locator("#export-status")).to_contain_text("exported")
    # the JSON export of the same run carries the measurement
    page.click("#export-format")
    page.get_by_role("option", name="JSON", exact=True).click()
    with page.expect_download() as dl:
        page.click("#export-button")
    data = json.loads(Path(dl.value.path()).read_text())
    assert data["op"]["name"] == "matmul" and data["measurements"]
    assert page.js_errors == []
