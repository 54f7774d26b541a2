"""Studio journeys as a user walks them: sizes change (with a request count), an error op then
its fix, editing the ODL, tune then Apply, budget validation, and the layout at 1500 px."""

from __future__ import annotations

import re
import time

from conftest import ARTIFACTS, OVERFLOW_JS, wait_idle
from playwright.sync_api import expect

UPDATE_URL = "/_dash-update-component"


def open_studio(page, live_server):
    page.goto(live_server + "/")
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached(timeout=90_000)
    wait_idle(page)


def pick_op(page, name: str) -> None:
    """The operator dropdown is long (every library op): search it, then click the option."""
    page.click("#op-select")
    page.get_by_placeholder("Search").fill(name)
    page.get_by_role("option", name=name, exact=True).click()


def set_sizes(page, text: str) -> None:
    page.fill("#sizes-input", text)
    page.press("#sizes-input", "Enter")


def knob_value(page, name: str) -> str:
    return page.locator(f'[data-knob="{name}"]').inner_text()


def count_updates(page) -> list[str]:
    """Every callback request the page sends from now on."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if UPDATE_URL in r.url else None)
    return seen


def test_sizes_change_sends_few_requests_and_stops(page, live_server):
    open_studio(page, live_server)
    requests = count_updates(page)
    set_sizes(page, "M=256,K=128,N=256")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    time.sleep(3)  # a callback loop would keep sending in this quiet time
    after_action = len(requests)
    time.sleep(3)
    assert len(requests) == after_action, "the page keeps sending callback requests"
    assert after_action <= 4, f"{after_action} requests for one sizes change"
    # every knob still shows a value (none went blank)
    for name in ("mr", "nr", "kc"):
        assert re.search(r"\n\S+", knob_value(page, name)), f"knob {name} is blank"
    page.screenshot(path=str(ARTIFACTS / "studio_sizes_256.png"), full_page=True)
    assert page.js_errors == []


def test_error_compile_then_fix(page, live_server):
    open_studio(page, live_server)
    set_sizes(page, "M=-5,K=64,N=64")
    expect(page.locator("#compile-status")).to_contain_text("✗", timeout=60_000)
    wait_idle(page)
    page.click("#compile-button")
    wait_idle(page)
    expect(page.locator("#compile-status")).not_to_contain_text("compiled")
    expect(page.locator("#kernel-source")).to_contain_text("No kernel")
    # no knobs of a kernel that is not there (they would compile the broken sizes again)
    expect(page.locator("#knob-panel [data-knob]")).to_have_count(0)
    set_sizes(page, "M=64,K=64,N=64")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    expect(page.locator("#kernel-source [data-odl]").first).to_be_attached()
    expect(page.locator("#odl-error")).to_have_text("")
    expect(page.locator("#knob-panel [data-knob]").first).to_be_visible()
    assert page.js_errors == []


RMS_ODL = """op rms(X: f32[R, C]) -> Y: f32[R, C]:
    ms[r] = mean[c](X[r, c] ** 2)
    Y[r, c] = X[r, c] * rsqrt(ms[r] + 1e-6)
"""


def test_edited_odl_resets_op_sizes_and_knobs(page, live_server):
    open_studio(page, live_server)
    set_sizes(page, "M=256,K=128,N=256")
    wait_idle(page)
    page.fill("#odl-editor", RMS_ODL)
    wait_idle(page)
    expect(page.locator("#op-select")).to_contain_text("(edited)")
    expect(page.locator("#sizes-input")).to_have_value(re.compile(r"^R=\d+,\s*C=\d+$"))
    page.click("#compile-button")
    wait_idle(page)
    expect(page.locator("#compile-status")).to_contain_text(re.compile(r"compiled in|✗"))
    # the matmul knobs are gone with the matmul op
    expect(page.locator('[data-knob="mr"]')).to_have_count(0)
    # choosing a library op again loads it whole
    pick_op(page, "matmul")
    expect(page.locator("#odl-editor")).to_have_value(re.compile(r"op matmul"))
    expect(page.locator("#sizes-input")).to_have_value(re.compile(r"^M="))
    assert page.js_errors == []


def test_tune_budget_is_validated_with_its_limit(page, live_server):
    open_studio(page, live_server)
    for bad in ("100000", "-3", "abc"):
        page.fill("#tune-budget", bad)
        page.click("#tune-button")
        expect(page.locator("#tune-status")).to_contain_text(re.compile(r"1 to \d+"),
                                                             timeout=30_000)
        expect(page.locator("#tune-status")).not_to_contain_text("measured")
        wait_idle(page)


def test_tune_reports_counts_and_apply_loads_the_best(page, live_server):
    open_studio(page, live_server)
    set_sizes(page, "M=64,K=64,N=64")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    page.fill("#tune-budget", "4")
    page.click("#tune-button")
    status = page.locator("#tune-status")
    expect(status).to_contain_text(re.compile(r"best verified|No verified"), timeout=300_000)
    text = status.inner_text()
    measured = int(re.search(r"(\d+) measured", text).group(1))
    assert measured <= 4, text
    if "No verified" in text:
        return
    expect(page.locator("#tune-apply")).to_be_enabled()
    best = dict(re.findall(r"(\w+)=(\w+)", text.split("with", 1)[1]))
    # move a knob away from the tuned value first, so Apply has something to change
    other = "1" if best["ku"] != "1" else "4"
    page.locator('[data-knob="ku"]').locator(".dash-dropdown, [role=combobox]").first.click()
    page.get_by_role("option", name=other, exact=True).click()
    expect(page.locator("#kernel-source")).to_contain_text(f"ku={other}", timeout=60_000)
    wait_idle(page)
    page.click("#tune-apply")
    expect(page.locator("#kernel-source")).to_contain_text(f"ku={best['ku']}", timeout=60_000)
    wait_idle(page)
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    for name, value in best.items():
        knob = page.locator(f'[data-knob="{name}"]')
        if knob.count():
            assert re.search(rf"\n{re.escape(value)}\b", knob.inner_text()), (name, value)
    page.screenshot(path=str(ARTIFACTS / "studio_tune_apply.png"), full_page=True)
    assert page.js_errors == []


def test_layout_has_no_overflow_at_1500px(page, live_server):
    page.set_viewport_size({"width": 1500, "height": 1000})
    open_studio(page, live_server)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    page.click("#run-button")  # a second run: the history table and its diff
    expect(page.locator("#run-diff")).to_be_visible(timeout=120_000)
    wait_idle(page)
    page.wait_for_timeout(500)  # plotly's resize after the layout settles
    page.screenshot(path=str(ARTIFACTS / "studio_layout_1500.png"), full_page=True)
    overflowing = page.evaluate(OVERFLOW_JS)
    assert overflowing == [], overflowing


BF16_ODL = """op mm_bf16(A: bf16[M, K], B: bf16[K, N]) -> C: f32[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""


def test_typed_bf16_gemm_offers_its_units_and_runs_on_bf16_inputs(page, live_server):
    """A bf16 GEMM typed in the editor: the knobs are its template's (threads, bf16_isa), the
    units the host lacks are forbidden by name, and Run verifies on bf16 inputs; the widened
    f32 kernel, which every host runs, verifies too."""
    open_studio(page, live_server)
    page.fill("#odl-editor", BF16_ODL)
    wait_idle(page)
    set_sizes(page, "M=100,N=64,K=96")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    knobs = page.locator("[data-knob]")
    assert sorted(knobs.nth(i).get_attribute("data-knob") for i in range(knobs.count())) == \
        ["bf16_isa", "threads"]
    expect(page.locator("#kernel-source")).to_contain_text("bf16 GEMM generated by UOL")
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    # held to the peak of the bf16 units where the host has them, else to the f32 one
    from uol_core.hfl import load_target
    if "bf16" in load_target("host").peak_gflops:
        expect(page.locator("#run-result")).to_contain_text("GFLOP/s (bf16 peak)")
    else:
        expect(page.locator("#run-result")).not_to_contain_text("peak)")
    panel = page.locator("#run-verdict").locator("xpath=..")
    first_run = re.search(r"run #(\d+)", panel.inner_text()).group(1)
    page.locator('[data-knob="bf16_isa"]').locator(".dash-dropdown, [role=combobox]").first.click()
    page.get_by_role("option", name="f32", exact=True).click()
    wait_idle(page)
    expect(page.locator("#kernel-source")).to_contain_text("micro-kernel f32", timeout=60_000)
    page.click("#run-button")
    expect(panel).not_to_contain_text(f"run #{first_run} ", timeout=120_000)
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    assert page.js_errors == []


def test_run_pressed_right_after_new_sizes_runs_the_new_sizes(page, live_server):
    # Run runs the page's inputs: a new op picked, its sizes typed and Run pressed before the
    # compile lands ran the kernel before them (the default matmul at its old sizes)
    open_studio(page, live_server)
    pick_op(page, "depthwise_conv2d")
    expect(page.locator("#sizes-input")).to_have_value(re.compile(r"R=\d+"))  # its defaults
    set_sizes(page, "N=2,C=8,H=19,W=22,R=7,S=7")
    page.click("#run-button")  # at once, as an impatient user does
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    expect(page.locator("#run-history")).to_contain_text("depthwise_conv2d N=2,C=8,H=19,W=22")
    assert page.js_errors == []
