"""Guide page: a user browses the cases of a target, filters them, reads one case's binding
constraints and knob moves, downloads the offline HTML, and opens a case's kernel in the Studio."""

from __future__ import annotations

from conftest import ARTIFACTS, pick, wait_idle
from playwright.sync_api import expect

from uol_core.guide.families import FAMILIES


def test_guide_browses_filters_and_opens_the_studio(page, live_server, tmp_path):
    # a target other than this host (the page opens on the host; a link names the targets)
    page.goto(live_server + "/guide?targets=graviton3")
    table = page.locator("#guide-table")
    # the target's cases (built on first use, then cached)
    expect(page.locator("#guide-summary")).to_contain_text(f"{len(FAMILIES)} cases",
                                                           timeout=240_000)
    wait_idle(page)
    expect(table).to_contain_text("graviton3")
    expect(table).to_contain_text("(predicted)")
    page.screenshot(path=str(ARTIFACTS / "guide.png"), full_page=True)

    pick(page, "guide-bound", "memory")
    wait_idle(page)
    expect(table).not_to_contain_text("vecext")  # the GEMM cases are compute-bound
    expect(table).to_contain_text("softmax")

    # a click on a row selects it (one case at a time); a click that lands while the grid
    # swaps in the filtered rows selects nothing, as it would for a user, who clicks again
    detail = page.locator("#guide-detail")
    for _ in range(3):
        page.locator("#guide-table .ag-center-cols-container .ag-row").first.locator(
            '[col-id="family"]').click()
        wait_idle(page)
        if "Binding constraints" in detail.inner_text():
            break
        page.wait_for_timeout(1000)
    expect(detail).to_contain_text("Binding constraints")
    expect(detail).to_contain_text("model-predicted")
    expect(detail).to_contain_text("not measured: this target is not this host")

    with page.expect_download() as download:
        page.click("#guide-download-button")
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.read_text().startswith("<!DOCTYPE html>")

    op = detail.locator("#guide-detail-title").inner_text().split(" on ")[0]
    page.click("#guide-open-studio")
    expect(page.locator("#target-select")).to_contain_text("graviton3", timeout=60_000)
    family = next(f for f in FAMILIES if f.name == op)
    expect(page.locator("#op-select")).to_contain_text(family.op)
    expect(page.locator("#sizes-input")).to_have_value(
        ",".join(f"{k}={v}" for k, v in family.sizes.items()))
    assert page.js_errors == []
