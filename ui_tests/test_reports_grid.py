"""The Reports page on AG Grid: runs with their 95% CI and noisy flag (the reason in the
tooltip), two runs of one config exported as "no significant difference", a run pinned as the
baseline, markdown permalinks, sorting and filtering."""

from __future__ import annotations

import random
import re
from pathlib import Path

from conftest import wait_idle
from playwright.sync_api import expect

MATMUL = """op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""
SIZES = {"M": 24, "K": 24, "N": 24}


def _record(seed: int) -> int:
    """A timed run of one config with samples, as the Studio records it."""
    import statistics

    import uol_core
    from app.services import history
    from uol_core.runtime import stats

    rng = random.Random(seed)
    samples = sorted(1e-4 * rng.lognormvariate(0.0, 0.08) for _ in range(60))
    cost = uol_core.op_cost(uol_core.parse(MATMUL), SIZES)
    median = statistics.median(samples)
    result = {"ok": True, "op": "matmul", "sizes": SIZES, "median_s": median,
              "iqr_s": median * 0.1, "flops": cost.flops, "bytes": cost.bytes,
              "gflops": cost.flops / median / 1e9, "gbs": cost.bytes / median / 1e9,
              "config": {"ku": 2}, "mode": "measured", "samples": samples,
              **stats.summary(samples, median_s=median, load={"load_per_core": 3.0})}
    return history.record("run", {"odl": MATMUL, "backend": "c", "target": "host",
                                  "sizes": SIZES, "config": {"ku": 2}}, result, "kernel;")


def test_reports_grid_verdict_pin_and_tooltip(page, live_server, tmp_path):
    first, second = _record(11), _record(12)
    page.goto(live_server + "/reports")
    table = page.locator("#runs-table")
    row = table.locator(f'.ag-center-cols-container .ag-row[row-id="{second}"]')
    expect(row).to_contain_text("⚠ yes")
    expect(row).to_contain_text(re.compile(r"\d\.\d+-\d\.\d+"))  # the CI in ms
    expect(table.locator(f'.ag-row[row-id="{second}"] a[href="/run/{second}"]')).to_have_count(1)
    # the noisy cell's tooltip gives the thresholds and the values
    row.locator('[col-id="noisy"]').hover()
    expect(page.locator(".ag-tooltip")).to_contain_text("load per core 3.00 > 1.00")
    for run_id in (first, second):
        table.locator(f'.ag-row[row-id="{run_id}"] input[type=checkbox]').first.check()
    wait_idle(page)
    page.click("#pin-button")  # two selected: pinning asks for one, and pins nothing
    expect(page.locator("#export-status")).to_contain_text("Select one run to pin it")
    # a report is built on the server (the first one imports the renderer): give it time
    with page.expect_download(timeout=120_000) as dl:
        page.click("#export-button")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    text = path.read_text()
    assert "no significant difference" in text and "x faster" not in text
    # pin one run: the table says so, and a single run exports against it
    table.locator(f'.ag-row[row-id="{second}"] input[type=checkbox]').first.uncheck()
    wait_idle(page)
    page.click("#pin-button")
    expect(page.locator("#export-status")).to_contain_text(f"run #{first} is the baseline")
    expect(table.locator(f'.ag-center-cols-container .ag-row[row-id="{first}"]')).to_contain_text(
        "pinned")
    table.locator(f'.ag-row[row-id="{second}"] input[type=checkbox]').first.check()
    wait_idle(page)
    with page.expect_download(timeout=120_000) as dl:
        page.click("#export-button")
    assert Path(dl.value.path()).name and dl.value.suggested_filename == \
        f"uol_compare_{first}_{second}.html"
    assert page.js_errors == []
