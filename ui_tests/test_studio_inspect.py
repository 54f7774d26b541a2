"""Inspecting a kernel as a user does: its assembly beside the C (rows tied to C and ODL lines),
a side-by-side diff against other knobs or another backend, Triton knobs that change nothing
left out with the reason, and a speedscope file imported into the Profiler's flame graph."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ARTIFACTS, pick, wait_idle
from playwright.sync_api import expect
from test_studio_journeys import OVERFLOW_JS, open_studio, pick_op

SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


def shot(page, name: str, docs: bool = False) -> None:
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if docs:
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def test_assembly_rows_link_to_c_and_odl_lines(page, live_server):
    open_studio(page, live_server)
    page.click("#asm-button")
    status = page.locator("#asm-status")
    expect(status).to_contain_text("instructions", timeout=60_000)
    expect(status).to_contain_text("-O3")  # the compiler and its flags are shown
    row = page.locator("#asm-source [data-cline][data-odl]").first
    cline, odl = row.get_attribute("data-cline"), row.get_attribute("data-odl")
    row.hover()
    # the C line it came from and the ODL line behind that light up
    expect(page.locator(f"#kernel-source #k-{cline}")).to_have_class(re.compile(r"\bhot-c\b"))
    expect(page.locator(f'#odl-highlight [data-odl="{odl}"]')).to_have_class(
        re.compile(r"\bhot\b"))
    # hovering a C line lights the instructions it produced
    page.locator(f"#kernel-source #k-{cline}").hover()
    expect(page.locator(f'#asm-source [data-cline="{cline}"]').first).to_have_class(
        re.compile(r"\bhot-c\b"))
    shot(page, "studio_assembly.png", docs=True)
    # a knob change recompiles: the listing follows the new kernel
    before = status.inner_text()
    # mr (the register tile's rows) shapes the micro-kernel on every GEMM path; ku does not
    # on the direct path, whose listing would rightly stay the same
    knob = page.locator('[data-knob="mr"]')
    current = re.search(r"\n(\d+)", knob.inner_text()).group(1)
    knob.locator(".dash-dropdown, [role=combobox]").first.click()
    legal = [o.inner_text().strip() for o in page.get_by_role("option").all()
             if o.get_attribute("aria-disabled") != "true" and "✕" not in o.inner_text()]
    other = next(v for v in legal if v != current)
    page.get_by_role("option", name=other, exact=True).click()
    expect(page.locator("#kernel-source")).to_contain_text(f"mr={other}", timeout=60_000)
    wait_idle(page)
    expect(status).not_to_have_text(before, timeout=60_000)
    assert page.js_errors == []


def test_kernel_diff_against_other_knobs_and_backend(page, live_server):
    open_studio(page, live_server)
    current = re.search(r"\n(\d+)", page.locator('[data-knob="ku"]').inner_text()).group(1)
    other = "1" if current != "1" else "2"
    page.fill("#diff-config", f"ku={other}")
    page.click("#diff-button")
    expect(page.locator("#diff-status")).to_contain_text(f"ku: {current} → {other}",
                                                         timeout=60_000)
    expect(page.locator("#diff-source table.side-diff td.chg").first).to_be_attached()
    shot(page, "studio_kernel_diff.png", docs=True)
    pick(page, "diff-backend", "Triton")
    page.fill("#diff-config", "")
    page.click("#diff-button")
    expect(page.locator("#diff-status")).to_contain_text("backend c → triton", timeout=60_000)
    expect(page.locator("#diff-source th").nth(1)).to_contain_text("triton")
    # a knob list that is not name=value says how to write it
    page.fill("#diff-config", "ku")
    page.click("#diff-button")
    expect(page.locator("#diff-status")).to_contain_text("name=value", timeout=30_000)
    assert page.js_errors == []


def test_triton_row_kernel_offers_only_knobs_that_change_it(page, live_server):
    open_studio(page, live_server)
    pick_op(page, "softmax")
    pick(page, "target-select", "h200-sxm")
    pick(page, "backend-select", "Triton")
    expect(page.locator("#kernel-source")).to_contain_text("triton.jit", timeout=60_000)
    wait_idle(page)
    # the row kernel sizes its tile from the row (BLOCK_C): no BLOCK knob, offered or hidden
    expect(page.locator('[data-knob="BLOCK"]')).to_have_count(0)
    expect(page.locator('[data-knob="num_warps"]')).to_be_visible()
    # the assembly view is for C kernels, and says so
    page.click("#asm-button")
    expect(page.locator("#asm-source")).to_contain_text("C kernels", timeout=30_000)
    assert page.js_errors == []


def _speedscope(path: Path) -> Path:
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json",
           "shared": {"frames": [{"name": "train_step"}, {"name": "forward"},
                                 {"name": "backward"}, {"name": "matmul_kernel"}]},
           "profiles": [{"type": "sampled", "name": "cpu samples", "unit": "milliseconds",
                         "startValue": 0, "endValue": 100,
                         "samples": [[0, 1, 3], [0, 1], [0, 2, 3], [0, 2]],
                         "weights": [30, 10, 45, 15]}],
           "name": "training", "activeProfileIndex": 0}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_profiler_imports_and_exports_speedscope(page, live_server, tmp_path):
    page.goto(live_server + "/profiler")
    wait_idle(page)
    upload = page.locator("#speedscope-upload input[type=file]")
    bad = tmp_path / "bad.json"
    bad.write_text('{"shared": {"frames": [{"name": "a"}]}, "profiles": '
                   '[{"type": "sampled", "samples": [[0, 9]]}]}', encoding="utf-8")
    upload.set_input_files(str(bad))
    expect(page.locator("#import-status")).to_contain_text(
        "profiles[0].samples[0][1]: 9 is not a frame index", timeout=30_000)
    upload.set_input_files(str(_speedscope(tmp_path / "training.speedscope.json")))
    expect(page.locator("#import-status")).to_contain_text("✓ imported", timeout=30_000)
    expect(page.locator("#flame-graph")).to_contain_text("(imported)", timeout=30_000)
    expect(page.locator("#flame-graph")).to_contain_text("matmul_kernel")
    page.get_by_label("left heavy").check()
    expect(page.locator("#flame-graph")).to_contain_text("left heavy", timeout=30_000)
    page.locator("#flame-graph").scroll_into_view_if_needed()
    shot(page, "profiler_speedscope_import.png", docs=True)
    with page.expect_download() as got:
        page.click("#speedscope-export")
    exported = json.loads(Path(got.value.path()).read_text(encoding="utf-8"))
    from profilers.speedscope import from_speedscope

    tree = from_speedscope(exported)
    assert round(tree.total) == 100 and round(tree.total_of("matmul_kernel")) == 75
    # the sandwich view: functions by self cost, cut at the heaviest one (its callers above,
    # its callees below); another function chosen in the dropdown re-cuts it
    page.get_by_label("sandwich").check()
    expect(page.locator("#flame-graph")).to_contain_text("sandwich of matmul_kernel",
                                                         timeout=30_000)
    expect(page.locator("#flame-function")).to_be_visible()
    kinds = page.evaluate("() => document.querySelector('#flame-graph .js-plotly-plot')"
                          ".data.map(t => t.type)")
    assert kinds == ["table", "icicle", "icicle"], kinds
    page.click("#flame-function")
    page.get_by_role("option", name="forward", exact=True).click()
    expect(page.locator("#flame-graph")).to_contain_text("sandwich of forward", timeout=30_000)
    shot(page, "profiler_sandwich.png", docs=True)
    overflowing = page.evaluate(OVERFLOW_JS)
    assert overflowing == [], overflowing
    assert page.js_errors == []
