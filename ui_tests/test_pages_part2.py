"""One real flow per part-2 page (Graph, Debugger, Profiler, Communication), with screenshots."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ARTIFACTS, check_layout_at_widths, pick, wait_idle
from playwright.sync_api import expect

SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
# screen position of a plotly marker, found by its text
POINT_JS = """([sel, key]) => {
    const gd = document.querySelector(sel + ' .js-plotly-plot');
    for (const tr of gd._fullData) {
        const i = Array.from(tr.text || []).indexOf(key);
        if (i < 0 || !tr.x) { continue; }
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.l2p(tr.x[i]), box.top + ya._offset + ya.l2p(tr.y[i])];
    }
    return null;
}"""


def shot(page, name: str) -> None:
    """Screenshot into ui_tests/artifacts and docs/screenshots (the README shows those)."""
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def click_point(page, graph_id: str, key: str) -> None:
    """Click a plotly marker (hover first: plotly picks the point under the mouse), scrolled
    into view first as a user would (a taller page below may have scrolled it away)."""
    page.locator(f"#{graph_id}").scroll_into_view_if_needed()
    page.wait_for_timeout(200)
    xy = page.evaluate(POINT_JS, [f"#{graph_id}", key])
    assert xy, f"no point {key} in #{graph_id}"
    page.mouse.move(xy[0], xy[1])
    page.wait_for_timeout(200)
    page.mouse.click(xy[0], xy[1])


def test_debugger_finds_missing_mask_in_user_kernel(page, live_server):
    page.goto(live_server + "/debugger")
    wait_idle(page)
    page.get_by_label("your Triton kernel file").check()
    page.click("#debug-example")
    expect(page.locator("#debug-kernel-text")).to_have_value(re.compile("tl.load"))
    page.click("#debug-run")
    expect(page.locator("#debug-status")).to_contain_text("1 out-of-bounds", timeout=120_000)
    expect(page.locator("#debug-findings")).to_contain_text("load of x at line 8")
    # the finding's line is outlined in the kernel source
    expect(page.locator("#debug-source #dbg-8.marked-line")).to_be_attached()
    expect(page.locator("#debug-heatmap .heatmaplayer").first).to_be_attached()
    # x is 1-D: one row per panel, and the out-of-bounds load is marked among the loads
    drawn = page.evaluate("""() => document.querySelector('#debug-heatmap .js-plotly-plot').data
        .map(t => [t.type, t.xaxis, t.z ? String(t.z.shape || t.z.length) : null])""")
    assert [d[:2] for d in drawn] == [["heatmap", "x"], ["heatmap", "x2"], ["scatter", "x"]], drawn
    assert [d[2].replace(" ", "") for d in drawn[:2]] == ["1,60", "1,60"], drawn
    # one program: the last one, whose lanes run past the end of x
    pick(page, "debug-program", "(3, 0, 0)")
    expect(page.locator("#debug-heatmap .gtitle")).to_contain_text("program (3, 0, 0)")
    shot(page, "debugger.png")
    check_layout_at_widths(page, "journey_f_debugger")
    assert page.js_errors == []


def test_profiler_profiles_matmul_and_compares(page, live_server):
    page.goto(live_server + "/profiler")
    wait_idle(page)
    page.click("#profile-run")
    expect(page.locator("#profile-status")).to_contain_text("verified", timeout=180_000)
    expect(page.locator("#flame-graph .icicletrace, #flame-graph g.trace").first).to_be_attached()
    expect(page.locator("#line-hotspots .heat-line").first).to_be_attached()
    expect(page.locator("#odl-hotspots .heat-line").first).to_be_attached()
    page.fill("#flame-search", "compile")
    page.press("#flame-search", "Enter")
    expect(page.locator("#flame-matches")).to_contain_text("match")
    expect(page.locator("#profile-roofline .scatterlayer .trace").first).to_be_attached()
    expect(page.locator("#compare-text")).not_to_be_empty()
    shot(page, "profiler.png")
    assert page.js_errors == []


def test_communication_simulate_fail_link_and_measure(page, live_server):
    page.goto(live_server + "/communication")
    expect(page.locator("#comm-result")).to_contain_text("busbw", timeout=60_000)
    page.fill("#nodes-input", "16")
    pick(page, "collective-select", "allreduce")
    page.click("#simulate-button")
    expect(page.locator("#comm-busbw")).to_contain_text("GB/s")
    expect(page.locator("#overlap-timeline .barlayer").first).to_be_attached()
    pick(page, "overlap-kind", "pipeline 1F1B")
    expect(page.locator("#overlap-summary")).to_contain_text("1f1b")
    wait_idle(page)
    click_point(page, "link-heatmap", "core0")
    expect(page.locator("#fault-effect")).to_contain_text("x)", timeout=60_000)
    page.click("#comm-measure")
    expect(page.locator("#comm-measure-status")).to_contain_text("measured", timeout=180_000)
    shot(page, "communication.png")
    assert page.js_errors == []


def test_graph_runs_and_opens_a_node_in_the_studio(page, live_server):
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=60_000)
    page.click("#graph-run-button")
    expect(page.locator("#graph-verdict")).to_contain_text("verified", timeout=180_000)
    expect(page.locator("#graph-times .barlayer").first).to_be_attached()
    shot(page, "graph.png")
    assert page.js_errors == []
    # gelu ("act") runs inside fc1's kernel: its click opens that fused group
    click_point(page, "graph-view", "act")
    expect(page).to_have_url(re.compile(r"/run/\d+$"), timeout=30_000)
    expect(page.locator("#odl-editor")).to_have_value(re.compile("op fc1_act"), timeout=60_000)
    expect(page.locator("#sizes-input")).to_have_value(re.compile("1024"))


def test_graph_opens_a_zoo_model_and_runs_it_whole(page, live_server):
    # the model zoo at its benchmark sizes: convnext's block (a 7x7 depthwise convolution, a
    # layer norm over channels, an inverted MLP) imported with torch.export and run on C kernels
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=60_000)
    page.get_by_text("zoo model", exact=True).click()
    pick(page, "graph-zoo", "convnext_block (UOL zoo)")
    page.locator("#graph-zoo-size").get_by_text("bench").click()
    expect(page.locator("#graph-status")).to_contain_text("convnext_block_b1 ", timeout=180_000)
    expect(page.locator("#graph-status")).to_contain_text("with torch.export")
    expect(page.locator("#graph-status")).not_to_contain_text("failed")
    page.click("#graph-run-button")
    expect(page.locator("#graph-verdict")).to_contain_text("verified", timeout=240_000)
    expect(page.locator("#graph-times .barlayer").first).to_be_attached()
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / "graph_zoo_convnext.png"), full_page=True)
    assert page.js_errors == []
