"""The Graph page's zoo: a model picked by name, imported in the graph worker, its opaque
nodes listed with their reasons, and a run beside the deployment runtimes (torch eager,
torch.compile, ONNX Runtime, OpenVINO), with a screenshot for the user's guide."""

from __future__ import annotations

from conftest import check_layout_at_widths, pick, wait_idle
from playwright.sync_api import expect
from test_pages_part2 import shot

from uol_core.graph.hf_zoo import available

# a library model with its family's label when transformers is here, else a hand-built block
MODEL, LABEL = (("gpt2", "GPT-2 (transformers)") if available() is None
                else ("nanogpt_block", "nanogpt_block (UOL zoo)"))


def test_a_zoo_model_by_name_runs_beside_the_deployment_runtimes(page, live_server):
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=120_000)
    page.get_by_text("zoo model", exact=True).click()
    pick(page, "graph-zoo", LABEL)
    # imported in the worker at the small size, batch 1 (the defaults)
    expect(page.locator("#graph-status")).to_contain_text(f"{MODEL}_b1_small", timeout=180_000)
    expect(page.locator("#graph-status")).to_contain_text("opaque")
    opaque = page.locator("#graph-opaque-panel")
    expect(opaque).to_contain_text("opaque node")
    if page.locator(".graph-opaque").count():  # each opaque node with its aten op and reason
        expect(page.locator(".graph-opaque").first.locator("td")).to_have_count(3)
    else:
        expect(opaque).to_contain_text("the whole model runs in UOL kernels")
    page.locator("#graph-peers").get_by_text("compare with deployment runtimes").click()
    page.click("#graph-run-button")
    expect(page.locator("#graph-verdict")).to_contain_text("verified", timeout=420_000)
    view = page.locator("#graph-peers-view")
    expect(view).to_contain_text("torch eager (baseline)")
    expect(page.locator("#graph-peers-chart .barlayer").first).to_be_attached()
    # every contender has a row: a time, or why it has none (not installed, wrong answer)
    expect(page.locator(".graph-peer-row")).to_have_count(5)
    for name in ("UOL", "torch.compile", "ONNX Runtime", "OpenVINO"):
        expect(view).to_contain_text(name)
    expect(page.locator("#graph-peers-verdict")).to_contain_text("alternated rounds")
    wait_idle(page)
    page.locator("#graph-peers-view").scroll_into_view_if_needed()
    shot(page, "graph_zoo_peers.png")
    check_layout_at_widths(page, "graph_zoo_peers")
    assert page.js_errors == []


def test_a_bad_zoo_choice_is_one_line_in_the_status(page, live_server):
    # a client that sends a name off the list (a path) gets one line back, the page lives on
    page.goto(live_server + "/graph")
    expect(page.locator("#graph-status")).to_contain_text("kernels after fusion", timeout=120_000)
    page.get_by_text("zoo model", exact=True).click()
    expect(page.locator("#graph-status")).to_contain_text("_b1_small", timeout=180_000)
    page.evaluate("""() => window.dash_clientside.set_props('graph-zoo',
                                                           {value: '/etc/passwd'})""")
    expect(page.locator("#graph-status")).to_contain_text("✗ no zoo model '/etc/passwd'",
                                                          timeout=30_000)
    assert "\\n" not in page.locator("#graph-status").inner_text()
    assert page.js_errors == []
