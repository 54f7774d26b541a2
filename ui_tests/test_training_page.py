"""Training page: start a real pipeline run from the browser, watch the per-rank timeline fill in live."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ARTIFACTS, wait_idle
from playwright.sync_api import expect


def test_training_run_draws_measured_and_simulated_timelines(page, live_server):
    page.goto(live_server + "/training")
    expect(page.locator("#nav-training")).to_be_visible()
    page.fill("#train-steps", "6")
    page.click("#train-start")
    expect(page.locator("#train-status")).to_contain_text("steps", timeout=30_000)
    # the live view: bars of both ranks in the measured chart while (or once) the run goes
    bars = page.locator("#train-measured .barlayer .point")
    expect(bars.first).to_be_attached(timeout=120_000)
    expect(page.locator("#train-status")).to_contain_text("finished", timeout=120_000)
    wait_idle(page)
    lanes = page.locator("#train-measured .yaxislayer-above .ytick text").all_text_contents()
    assert sorted(lanes) == ["rank 0", "rank 1"]
    expect(page.locator("#train-simulated .barlayer .point").first).to_be_attached()
    expect(page.locator("#train-result")).to_contain_text("simulated")
    page.screenshot(path=str(ARTIFACTS / "training.png"), full_page=True)
    assert page.js_errors == []


def test_training_knobs_out_of_range_are_said(page, live_server):
    page.goto(live_server + "/training")
    page.fill("#train-stages", "9")
    page.click("#train-start")
    expect(page.locator("#train-status")).to_contain_text("Stages: use 2-4")
    assert page.js_errors == []


def test_training_on_uol_kernels_draws_both_losses_and_step_times(page, live_server):
    """The digits MLP and its UOL twin trained from the browser: the curves fill in, the
    result names the speedup, the loss gap and what ran on UOL (its layers and its SGD)."""
    from conftest import check_layout_at_widths

    page.goto(live_server + "/training")
    page.fill("#ktrain-steps", "3")  # under the limit: said, nothing started
    page.click("#ktrain-start")
    expect(page.locator("#ktrain-status")).to_contain_text("Steps: use 10-400")
    page.fill("#ktrain-steps", "40")
    page.click("#ktrain-start")
    expect(page.locator("#ktrain-status")).to_contain_text("finished", timeout=180_000)
    wait_idle(page)
    names = page.locator("#ktrain-loss .legendtext").all_text_contents()
    assert names == ["torch eager", "UOL kernels"]
    assert page.locator("#ktrain-times .scatterlayer .trace").count() == 2
    result = page.locator("#ktrain-result")
    # which way, with its interval, or that the runs cannot tell them apart
    expect(page.locator("#ktrain-speed")).to_have_text(re.compile(
        r"UOL is \d+\.\d\dx (faster|slower) than torch eager \(95% CI|no significant "
        r"difference between UOL and torch eager"))
    expect(result).to_contain_text("relative gap")
    expect(result).to_contain_text("SGD (momentum)")
    check_layout_at_widths(page, "training_uol_kernels")
    # the nanoGPT block: UOL's norms, linears, causal flash attention and AdamW
    from conftest import pick
    pick(page, "ktrain-model", "nanoGPT block (AdamW)")
    page.fill("#ktrain-steps", "10")
    page.click("#ktrain-start")
    expect(page.locator("#ktrain-status")).to_contain_text("started: nanogpt")
    expect(page.locator("#ktrain-status")).to_contain_text("finished", timeout=240_000)
    wait_idle(page)
    expect(result).to_contain_text("attention (causal), AdamW")
    expect(result).not_to_contain_text("accuracy")  # a regression
    page.screenshot(path=str(ARTIFACTS / "training_uol_nanogpt.png"), full_page=True)
    # the README shows this panel (the pipeline section below it is the other test's)
    page.screenshot(path=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"
                             / "training_uol_kernels.png"))
    assert page.js_errors == []
