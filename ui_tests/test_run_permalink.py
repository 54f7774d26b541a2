"""A permalink /run/N reopens the run exactly: every knob at its recorded value, the op named
(not "(edited)") when its text is the library's, and the same kernel text."""

from __future__ import annotations

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
