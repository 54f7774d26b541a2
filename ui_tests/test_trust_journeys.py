"""Journeys of a performance engineer who checks what each page compares (issue 51, items 4, 6,
7 and 8), each acted at 1280 px and checked again at 1920 px: the Graph page's one baseline
per chart and its fused-group click, the peers beside a run, a layered graph whose labels do
not overlap as Chromium draws them, chart titles that are not cut, the DDP timeline's compute
said, the Guide on the host counting what it measured, the Training verdict's direction, and
the Debugger's library-op trace and C sanitizer on this server."""

from __future__ import annotations

import re

from conftest import check_layout_at_widths, pick, wait_idle
from playwright.sync_api import Page, expect
from test_pages_part2 import click_point, shot

NARROW, WIDE = 1280, 1920

# the label boxes of the graph drawing as the browser laid them out, and the pairs that overlap
LABEL_OVERLAPS_JS = """(sel) => {
    const boxes = Array.from(document.querySelectorAll(sel + ' .textpoint text'))
        .filter(t => t.textContent.trim() !== '')
        .map(t => ({name: t.textContent, r: t.getBoundingClientRect(),
                    px: parseFloat(getComputedStyle(t).fontSize)}));
    const clash = [];
    for (let i = 0; i < boxes.length; i++)
        for (let j = i + 1; j < boxes.length; j++) {
            const a = boxes[i].r, b = boxes[j].r;
            if (a.left < b.right - 0.5 && b.left < a.right - 0.5
                && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
                clash.push(boxes[i].name + ' / ' + boxes[j].name);
        }
    return {count: boxes.length, clash: clash, smallest: Math.min(...boxes.map(b => b.px))};
}"""
# every chart title on the page that runs past its chart's edge (plotly clips it there)
CUT_TITLES_JS = """() => {
    const cut = [];
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
        const svg = plot.querySelector('.main-svg');
        if (!svg) continue;
        const s = svg.getBoundingClientRect();
        if (s.width === 0) continue;
        for (const t of plot.querySelectorAll('.gtitle')) {
            const r = t.getBoundingClientRect();
            if (r.width && (r.left < s.left - 1 || r.right > s.right + 1 || r.top < s.top - 1))
                cut.push(`${plot.parentElement.id || plot.id}: ${t.textContent.slice(0, 60)}`);
        }
    }
    return cut;
}"""


def _at(page: Page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 1000})
    wait_idle(page)
    page.wait_for_timeout(500)  # plotly's resize after the layout settles


def _nodes(page: Page) -> int:
    """The node count the status line gives for the open graph."""
    return int(re.search(r": (\d+) nodes", page.locator("#graph-status").inner_text()).group(1))


def _no_cut_titles(page: Page) -> None:
    for width in (NARROW, WIDE):
        _at(page, width)
        assert page.evaluate(CUT_TITLES_JS) == [], width


def test_graph_charts_each_name_one_baseline_and_a_node_opens_its_fused_group(page, live_server):
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=120_000)
    # a traced torch model: the whole graph has a torch eager baseline to be timed against
    page.get_by_text("traced torch model", exact=True).click()
    expect(page.locator("#graph-status")).to_have_text(re.compile(r"^MLP: "), timeout=120_000)
    page.click("#graph-run-button")
    expect(page.locator("#graph-verdict")).to_contain_text("verified", timeout=240_000)
    headline = page.locator("#graph-headline")
    expect(headline).to_contain_text("baseline torch eager")
    expect(headline).to_have_text(re.compile(r"UOL is \d+\.\d\dx (faster|slower) than torch eager"))
    groups = page.locator("#graph-groups-baseline")
    expect(groups).to_contain_text("baseline the reference evaluator")
    expect(groups).to_contain_text("not torch eager")
    expect(page.locator("#graph-times .gtitle")).to_contain_text("reference evaluator")
    expect(page.locator("#graph-times .legendtext").first).to_have_text("UOL kernel, in the model")
    # beside it the same kernels repeated on their own: what the chain costs them, in a line too
    expect(page.locator("#graph-times .legendtext").nth(1)).to_have_text(
        "same kernel repeated, caches warm")
    expect(groups).to_contain_text("In the model's order the kernels take")
    expect(page.locator("#graph-times .legendtext").last).to_have_text(
        "reference evaluator (baseline)")
    # the peers beside a run: their panel is on the page, named, before any zoo run
    peers = page.locator("#graph-peers-view")
    peers.scroll_into_view_if_needed()
    expect(peers).to_be_visible()
    expect(page.get_by_role("heading", name="Beside the deployment runtimes")).to_be_visible()
    expect(page.locator("#graph-peers")).to_contain_text(
        "torch eager, torch.compile, ONNX Runtime, OpenVINO")
    _no_cut_titles(page)
    _at(page, NARROW)
    # the MLP sample: gelu ("act") runs inside fc1's kernel; its click opens that fused group
    page.get_by_text("sample graph", exact=True).click()
    expect(page.locator("#graph-status")).to_contain_text("mlp2", timeout=60_000)
    wait_idle(page)
    click_point(page, "graph-view", "act")
    expect(page).to_have_url(re.compile(r"/run/\d+$"), timeout=30_000)
    editor = page.locator("#odl-editor")
    expect(editor).to_have_value(re.compile(r"op fc1_act"), timeout=60_000)
    expect(editor).to_have_value(re.compile(r"gelu\("))
    expect(editor).to_have_value(re.compile(r"sum\[k\]"))
    assert page.js_errors == []


def test_the_graph_is_layered_with_labels_that_do_not_overlap(page, live_server):
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=120_000)
    pick(page, "graph-sample", "transformer_block.json")
    expect(page.locator("#graph-status")).to_contain_text("transformer_block", timeout=60_000)
    wait_idle(page)
    for width in (NARROW, WIDE):
        _at(page, width)
        found = page.evaluate(LABEL_OVERLAPS_JS, "#graph-view")
        # every node labelled, no two labels overlapping, none shrunk to fit
        assert found["count"] == _nodes(page) and found["clash"] == [], (width, found)
        assert found["smallest"] >= 11, found
    # a model of the zoo with 50-odd nodes: drawn at the same scale, it scrolls in its panel
    page.get_by_text("zoo model", exact=True).click()
    pick(page, "graph-zoo", "llama_block (UOL zoo)")
    expect(page.locator("#graph-status")).to_contain_text("llama_block_b1_small", timeout=180_000)
    wait_idle(page)
    for width in (NARROW, WIDE):
        _at(page, width)
        found = page.evaluate(LABEL_OVERLAPS_JS, "#graph-view")
        assert found["count"] == _nodes(page) >= 40 and found["clash"] == [], (width, found)
    page.locator("#graph-view").scroll_into_view_if_needed()
    shot(page, "graph_layered.png")
    check_layout_at_widths(page, "trust_graph_layout")
    assert page.js_errors == []


def test_the_ddp_timeline_says_its_compute_follows_the_link(page, live_server):
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/communication")
    expect(page.locator("#comm-result")).to_contain_text("busbw", timeout=60_000)
    expect(page.locator("#overlap-timeline .barlayer").first).to_be_attached(timeout=60_000)
    note = page.locator("#overlap-compute-note")
    expect(note).to_contain_text("0.8x")
    expect(note).to_contain_text("scales with the link speed")
    expect(page.locator("#overlap-timeline .gtitle")).to_contain_text("not a model's")
    _no_cut_titles(page)
    _at(page, NARROW)
    page.locator("#overlap-timeline").scroll_into_view_if_needed()
    shot(page, "communication_ddp.png")
    assert page.js_errors == []


def _measured(page: Page) -> int:
    text = page.locator("#guide-summary-text").inner_text()
    return int(re.search(r"(\d+) measured", text).group(1))


def test_the_guide_opens_on_the_host_and_counts_what_it_measured(page, live_server):
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/guide?families=softmax")
    expect(page.locator("#guide-targets")).to_contain_text("host")
    expect(page.locator("#guide-targets")).not_to_contain_text("graviton3")
    expect(page.locator("#guide-summary-text")).to_contain_text("(1 target)",
                                                                timeout=240_000)
    before = _measured(page)
    page.fill("#guide-measure-limit", "1")
    page.click("#guide-measure-button")
    expect(page.locator("#guide-measure-status")).to_contain_text("✓ host: 1", timeout=300_000)
    expect(page.locator("#guide-summary-text")).to_contain_text(f"{before + 1} measured")
    _no_cut_titles(page)
    _at(page, NARROW)
    shot(page, "guide_host_measured.png")
    assert page.js_errors == []


def test_the_training_result_says_which_way(page, live_server):
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/training")
    page.fill("#ktrain-steps", "12")
    page.click("#ktrain-start")
    expect(page.locator("#ktrain-status")).to_contain_text("finished", timeout=240_000)
    speed = page.locator("#ktrain-speed")
    expect(speed).to_have_text(re.compile(
        r"UOL is \d+\.\d\dx (faster|slower) than torch eager \(95% CI|no significant difference"
        r" between UOL and torch eager"))
    _no_cut_titles(page)
    assert page.js_errors == []


def test_the_debugger_traces_a_library_op_and_runs_the_c_sanitizer(page, live_server):
    # this server may be root with Python in a closed home: the trace runs in the sandbox all
    # the same (or says which path it cannot read and how to fix it)
    page.set_viewport_size({"width": NARROW, "height": 1000})
    page.goto(live_server + "/debugger")
    wait_idle(page)
    page.get_by_label("library operator (generated Triton)").check()
    page.click("#debug-run")
    expect(page.locator("#debug-status")).to_contain_text("loads/stores traced",
                                                          timeout=180_000)
    page.click("#debug-sanitize-button")
    expect(page.locator("#debug-sanitizer")).to_contain_text(
        re.compile("no finding from AddressSanitizer or UBSan|C line"), timeout=180_000)
    _no_cut_titles(page)
    shot(page, "debugger_trace_sanitizer.png")
    assert page.js_errors == []
