"""Journeys at the narrow (1280 px) and wide (1920 px) ends: library ops compiled on C for three
CPU targets and on Triton for a GPU (kernel shown, the chosen knob values legal), then a run, the
assembly and a kernel diff, and every page checked for elements overflowing their panels."""

from __future__ import annotations

import os

import pytest
from conftest import ARTIFACTS, pick, wait_idle
from playwright.sync_api import expect
from test_studio_journeys import OVERFLOW_JS, open_studio, pick_op

COMBOS = [("C (gcc, CPU)", "host"), ("C (gcc, CPU)", "avx2-desktop"),
          ("C (gcc, CPU)", "xeon-spr-8480"), ("Triton", "h200-sxm")]
WIDTHS = (1280, 1920)
# Two ops per width on all four pairs; then every library op in the browser on one pair each,
# the pairs taken in turn down the sorted op list (the same split every run: a CI result must
# not depend on the date). UOL_LONG=1 walks every op on every pair. Every op on every pair is
# compiled below the browser by tests/test_studio_every_op.py.
FIXED = {1280: ["softmax", "layernorm"], 1920: ["matmul", "rmsnorm"]}


def ops_on_every_pair(width: int) -> list[str]:
    from uol_core.ops import list_ops

    every = list_ops()
    if os.environ.get("UOL_LONG") == "1":
        return every[WIDTHS.index(width)::len(WIDTHS)]
    return [op for op in FIXED[width] if op in every]


def ops_by_pair(width: int) -> dict[tuple[str, str], list[str]]:
    """This width's share of the library, each op under the one pair it is compiled on."""
    from uol_core.ops import list_ops

    mine = list_ops()[WIDTHS.index(width)::len(WIDTHS)]
    return {combo: mine[i::len(COMBOS)] for i, combo in enumerate(COMBOS)}


def choose_pair(page, backend: str, target: str) -> None:
    # the GPU target before the Triton backend, the CPU target before the C backend
    pick(page, "target-select", target)
    wait_idle(page)
    pick(page, "backend-select", backend)
    wait_idle(page)


def assert_compiled(page, op: str, backend: str, target: str) -> None:
    """A kernel is shown and no chosen knob value is one a constraint forbids (its ✕)."""
    status = page.locator("#compile-status").inner_text()
    assert "compiled in" in status, (op, backend, target, status,
                                     page.locator("#odl-error").inner_text())
    expect(page.locator("#kernel-source pre").first).to_be_attached()
    assert "✕" not in page.locator("#knob-panel").inner_text(), (op, backend, target)


def compile_everywhere(page, op: str) -> None:
    """The op on each backend/target pair."""
    pick_op(page, op)
    wait_idle(page)
    for backend, target in COMBOS:
        choose_pair(page, backend, target)
        assert_compiled(page, op, backend, target)


def compile_library(page, width: int) -> int:
    """Every op of this width's share, on its pair; returns how many were compiled."""
    done = 0
    for (backend, target), ops in ops_by_pair(width).items():
        choose_pair(page, backend, target)
        for op in ops:
            pick_op(page, op)
            wait_idle(page)
            assert_compiled(page, op, backend, target)
            done += 1
    return done


@pytest.mark.parametrize("width", [1280, 1920])
def test_studio_journey_at_width(page, live_server, width):
    page.set_viewport_size({"width": width, "height": 1000})
    open_studio(page, live_server)
    for op in ops_on_every_pair(width):
        compile_everywhere(page, op)
    if os.environ.get("UOL_LONG") != "1":
        assert compile_library(page, width) >= 70
    pick(page, "backend-select", "C (gcc, CPU)")
    pick(page, "target-select", "host")
    pick_op(page, "matmul")
    wait_idle(page)
    page.fill("#sizes-input", "M=64,K=64,N=64")
    page.press("#sizes-input", "Enter")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    page.click("#asm-button")
    expect(page.locator("#asm-status")).to_contain_text("instructions", timeout=60_000)
    page.fill("#diff-config", "ku=1")
    page.click("#diff-button")
    expect(page.locator("#diff-status")).to_contain_text("A → B", timeout=60_000)
    wait_idle(page)
    page.wait_for_timeout(500)  # plotly's resize after the layout settles
    page.screenshot(path=str(ARTIFACTS / f"studio_{width}.png"), full_page=True)
    overflowing = page.evaluate(OVERFLOW_JS)
    assert overflowing == [], overflowing
    assert page.js_errors == []


@pytest.mark.parametrize("width", [1280, 1920])
@pytest.mark.parametrize("path", ["/profiler", "/debugger", "/communication", "/graph"])
def test_pages_fit_their_panels_at_width(page, live_server, width, path):
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(live_server + path)
    page.wait_for_selector(".panel", timeout=90_000)  # the page's layout, before the idle wait
    wait_idle(page, timeout=90_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"page{path.replace('/', '_')}_{width}.png"),
                    full_page=True)
    overflowing = page.evaluate(OVERFLOW_JS)
    assert overflowing == [], overflowing
    assert page.js_errors == []
