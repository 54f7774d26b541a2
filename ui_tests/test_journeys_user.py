"""Journeys end to end as a new user walks them, each ending with its page checked at 1280, 1500
and 1920 px: (b) a typed op from compile to a verified Run, Tune and Apply; (e) runs compared
like with like, and the HTML and PDF exports checked against the run records; (g) the
Communication page's auto choice and a fault that can only slow the collective."""

from __future__ import annotations

import io
import re
from pathlib import Path

from conftest import check_layout_at_widths, pick, wait_idle
from playwright.sync_api import expect
from test_pages_part2 import click_point
from test_studio_journeys import open_studio, set_sizes

TYPED_RMS = """op rms_gain(X: f32[R, C], G: f32[C]) -> Y: f32[R, C]:
    ms[r] = mean[c](X[r, c] ** 2)
    Y[r, c] = X[r, c] * rsqrt(ms[r] + 1e-6) * G[c]
"""


def choose_knob(page, name: str, value: str) -> None:
    page.locator(f'[data-knob="{name}"]').locator(".dash-dropdown, [role=combobox]").first.click()
    page.get_by_role("option", name=value, exact=True).click()
    wait_idle(page)


def choose_another_value(page, name: str, current: str) -> str:
    """Pick the first option of a knob's dropdown that differs from `current` (a knob's
    options depend on the host: `threads` starts at 1, `isa` lists what the target has)."""
    page.locator(f'[data-knob="{name}"]').locator(".dash-dropdown, [role=combobox]").first.click()
    options = page.get_by_role("option")
    expect(options.first).to_be_visible()
    for label in options.all_inner_texts():
        if label.strip() and label.strip() != current:
            page.get_by_role("option", name=label.strip(), exact=True).click()
            wait_idle(page)
            return label.strip()
    raise AssertionError(f"knob {name} offers no value besides {current}")


def knob_shows(page, name: str) -> str:
    return page.locator(f'[data-knob="{name}"]').inner_text().split("\n")[1].strip()


def test_typed_op_compile_run_tune_apply(page, live_server):
    open_studio(page, live_server)
    page.fill("#odl-editor", TYPED_RMS)
    wait_idle(page)
    expect(page.locator("#op-select")).to_contain_text("(edited)")
    set_sizes(page, "R=64,C=256")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    page.fill("#tune-budget", "4")
    page.click("#tune-button")
    status = page.locator("#tune-status")
    expect(status).to_contain_text("best verified", timeout=300_000)
    text = status.inner_text()
    assert re.search(r"(\d+) measured of a budget of 4", text), text
    best = dict(re.findall(r"(\w+)=(\w+)", text.split(" with ", 1)[1]))
    assert best, text
    # a knob moved away from the tuned value, then Apply brings every tuned value back
    name, value = next(iter(best.items()))
    options = page.locator(f'[data-knob="{name}"]')
    assert options.count() == 1, name
    choose_another_value(page, name, value)
    assert knob_shows(page, name) != value
    page.click("#tune-apply")
    wait_idle(page)
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    for knob, tuned in best.items():
        if page.locator(f'[data-knob="{knob}"]').count():
            assert knob_shows(page, knob) == tuned, (knob, tuned)
    # the applied config runs and verifies, as the tuner measured it
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    check_layout_at_widths(page, "journey_b_typed_op")
    assert page.js_errors == []


def _runs_by_id() -> dict[int, dict]:
    """The run records the IDE wrote (its history database, as the server sees it)."""
    from app.services import history

    return {r["id"]: r for r in history.runs()}


def _select_rows(page, ids: list[int]) -> None:
    table = page.locator("#runs-table")
    for run_id in ids:  # an AG Grid row is identified by its run id
        table.locator(f'.ag-row[row-id="{run_id}"] input[type=checkbox]').first.check()
    wait_idle(page)


def _export(page, fmt: str, tmp_path: Path) -> Path:
    page.click("#export-format")
    page.get_by_role("option", name=fmt, exact=True).click()
    with page.expect_download() as dl:
        page.click("#export-button")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    return path


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    return " ".join(p.extract_text() for p in PdfReader(io.BytesIO(path.read_bytes())).pages)


def test_profile_compare_like_with_like_and_exports_match_records(page, live_server, tmp_path):
    before = set(_runs_by_id())
    open_studio(page, live_server)
    set_sizes(page, "M=64,K=64,N=64")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    choose_knob(page, "ku", "1" if knob_shows(page, "ku") != "1" else "2")
    page.click("#run-button")
    expect(page.locator("#run-diff")).to_be_visible(timeout=120_000)
    wait_idle(page)
    timed = sorted(set(_runs_by_id()) - before)
    assert len(timed) == 2, timed
    # a profile of the same op at other sizes: a profiled run, never compared as a timed one
    page.goto(live_server + "/profiler")
    wait_idle(page)
    page.click("#profile-run")
    expect(page.locator("#profile-status")).to_contain_text("verified", timeout=180_000)
    wait_idle(page)
    records = _runs_by_id()
    profiled = [i for i in sorted(set(records) - before) if records[i]["mode"] == "profiled"]
    assert profiled, "the profile left no profiled run record"
    # the newest run (profiled, 32^3) preselected against a timed 64^3 one: no timing ratio
    expect(page.locator("#compare-text")).not_to_be_empty(timeout=30_000)
    verdict = page.locator("#compare-text").inner_text()
    assert not re.search(r"[\d.]+x (faster|slower)", verdict) or "Ir" in verdict, verdict
    # the two timed runs of the same sizes: compared by time
    from app.services.history import describe

    pick(page, "compare-a", describe(records[timed[0]]))
    pick(page, "compare-b", describe(records[timed[1]]))
    wait_idle(page)
    expect(page.locator("#compare-text")).to_contain_text(
        re.compile(r"faster|slower|no significant difference"))
    check_layout_at_widths(page, "journey_e_profiler")
    # Reports: the two timed runs exported as a comparison, in HTML and PDF
    page.goto(live_server + "/reports")
    wait_idle(page)
    _select_rows(page, timed)
    html_text = _export(page, "HTML", tmp_path).read_text()
    pdf_text = _pdf_text(_export(page, "PDF", tmp_path))
    for run_id in timed:
        rec = records[run_id]
        median = f"{rec['median_s']:.4g}"
        gflops = f"{rec['gflops']:.4g}"
        assert f"run #{run_id}" in html_text and median in html_text and gflops in html_text, \
            (run_id, median, gflops)
        assert f"run #{run_id}" in pdf_text and median in pdf_text, (run_id, median)
    assert "M=64" in html_text or "'M': 64" in html_text
    check_layout_at_widths(page, "journey_e_reports")
    assert page.js_errors == []


def _result_time_us(page) -> float:
    """The headline time of the Result panel, in µs."""
    text = page.locator("#comm-result").inner_text()
    value, unit = re.search(r"time\s+([\d,.]+)\s*(µs|ms|s)\b", text).groups()
    return float(value.replace(",", "")) * {"µs": 1, "ms": 1e3, "s": 1e6}[unit]


def test_communication_auto_is_the_fastest_shown_and_a_fault_only_slows(page, live_server):
    page.goto(live_server + "/communication")
    expect(page.locator("#comm-result")).to_contain_text("busbw", timeout=60_000)
    wait_idle(page)
    text = page.locator("#comm-result").inner_text()
    shown = re.search(r"algorithm\s+(\w+)", text).group(1)
    fastest = re.search(r"(\w+): [\d,.]+ \S+ \(fastest\)", text).group(1)
    assert shown == fastest, text
    healthy = _result_time_us(page)
    listed = re.search(rf"{fastest}: ([\d,.]+) (µs|ms)", text).groups()
    assert abs(float(listed[0].replace(",", "")) * (1 if listed[1] == "µs" else 1e3)
               - healthy) < 0.01 * healthy, text
    # choosing each listed algorithm by hand is never faster than auto's choice
    for algo in re.findall(r"^(\w+): [\d,.]+ \S+", text, flags=re.M):
        pick(page, "algorithm-select", algo)
        wait_idle(page)
        assert _result_time_us(page) >= healthy * 0.999, algo
    pick(page, "algorithm-select", "auto")
    wait_idle(page)
    click_point(page, "link-heatmap", "core0")
    expect(page.locator("#fault-effect")).to_contain_text("x)", timeout=60_000)
    wait_idle(page)
    effect = page.locator("#fault-effect").inner_text()
    faulted = page.locator("#comm-result").inner_text()
    assert faulted != text, "the Result panel was not updated for the fault"
    if "fails" not in effect:
        assert _result_time_us(page) >= healthy * 0.999, (effect, faulted)
    check_layout_at_widths(page, "journey_g_communication")
    page.click("#fault-clear")
    wait_idle(page)
    assert abs(_result_time_us(page) - healthy) < 0.01 * healthy
    assert page.js_errors == []


def test_in_place_optimizer_op_compiles_runs_and_shows_its_aliases(page, live_server):
    """An op that writes over its inputs (AdamW's update): the editor marks `aliases`, the C
    source reads each input through its output, and Run verifies by value against the
    reference (the kernel copies inputs it is not given in place)."""
    open_studio(page, live_server)
    pick(page, "op-select", "adamw")
    wait_idle(page)
    expect(page.locator("#odl-highlight")).to_contain_text("aliases")
    set_sizes(page, "R=64,C=1024")
    expect(page.locator("#compile-status")).to_contain_text("compiled in", timeout=60_000)
    wait_idle(page)
    expect(page.locator("#kernel-source")).to_contain_text("P_next is written over P")
    page.click("#run-button")
    expect(page.locator("#run-verdict")).to_contain_text("correct", timeout=120_000)
    expect(page.locator("#run-result")).to_contain_text("measured in place (M, P, V written over)")
    check_layout_at_widths(page, "journey_in_place_adamw")
    assert page.js_errors == []
