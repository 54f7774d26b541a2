"""A permalink /run/N reopens the run exactly: every knob at its recorded value, the op named
(not "(edited)") when its text is the library's, and the same kernel text."""

from __future__ import annotations

import re

import pytest
from conftest import wait_idle
from playwright.sync_api import expect

SIZES = {"softmax": {"R": 8, "C": 64}, "matmul": {"M": 32, "K": 32, "N": 32}}


def _record(op: str, config: dict) -> tuple[int, dict, str]:
    """A run of library op `op` with non-default knobs, recorded as the Studio records one."""
    from app.services import history
    from app.services.kernels import emit
    from uol_core.ops import op_text

    odl = op_text(op)
    _, sizes, src, _, _ = emit(odl, "c", "host", SIZES[op], config)
    recorded = dict(src.config)
    assert all(recorded[k] == v for k, v in config.items()), recorded
    result = {"ok": True, "op": op, "sizes": sizes, "config": recorded, "mode": "measured",
              "median_s": 1e-4}
    rid = history.record("run", {"odl": odl, "backend": "c", "target": "host",
                                 "sizes": sizes, "config": recorded}, result, src.text)
    return rid, recorded, src.text


def knob_shows(page, name: str) -> str:
    return page.locator(f'[data-knob="{name}"]').inner_text().split("\n")[1].strip()


@pytest.mark.parametrize(("op", "config"), [("softmax", {"vec": 16, "chunk": 4}),
                                             ("matmul", {"ku": 1})])
def test_run_permalink_restores_every_knob_and_the_kernel(page, live_server, op, config):
    rid, recorded, source = _record(op, config)
    page.goto(f"{live_server}/run/{rid}")
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)
    page.wait_for_timeout(1500)  # a late re-compile (a knob echo) would show by now
    wait_idle(page)
    expect(page.locator("#studio-note")).to_contain_text(f"Reopened run #{rid}")
    expect(page.locator("#op-select")).to_contain_text(op)
    expect(page.locator("#op-select")).not_to_contain_text("(edited)")
    shown = {name: knob_shows(page, name) for name in recorded
             if page.locator(f'[data-knob="{name}"]').count()}
    assert shown == {k: str(v) for k, v in recorded.items() if k in shown}
    assert set(config) <= set(shown)
    # the kernel on screen is the recorded one, line for line (line numbers left out)
    text = page.evaluate("""() => {
        const copy = document.querySelector('#kernel-source').cloneNode(true);
        copy.querySelectorAll('.linenos').forEach(n => n.remove());
        return copy.textContent;
    }""")
    assert [ln.rstrip() for ln in source.splitlines()] == \
        [ln.rstrip() for ln in text.strip("\n").splitlines()]
    assert page.js_errors == []


def test_studio_run_shows_its_interval_and_a_pinned_baseline(page, live_server):
    """A Run shows the median with its 95% CI and n, a noise badge whose tooltip names the
    thresholds; pinning it makes it the baseline the next run's diff is compared with."""
    rid, _, _ = _record("matmul", {"ku": 1})
    page.goto(f"{live_server}/run/{rid}")  # small sizes: a quick compile and run
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    result = page.locator("#run-result")
    expect(result).to_contain_text("(95% CI ")
    expect(result).to_contain_text(re.compile(r"n=\d+"))
    badge = page.locator("#run-noise")
    expect(badge).to_have_text(re.compile(r"^(⚠ noisy|quiet)$"))
    assert "IQR/median" in badge.get_attribute("title")
    result.get_by_role("button", name="Pin as baseline").click()
    expect(page.locator("#history-table")).to_contain_text("(pinned baseline)")
    pinned = page.locator("#history-table").inner_text().split("(pinned baseline)")[0]
    page.click("#run-button")
    expect(page.locator("#run-diff")).to_contain_text("(pinned baseline) →", timeout=120_000)
    expect(page.locator("#diff-summary")).to_contain_text(
        re.compile(r"no significant difference|x faster than|x slower than"))
    assert pinned and page.js_errors == []
