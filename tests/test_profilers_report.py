"""Reports: self-contained HTML that opens offline, a valid PDF with its figures, Markdown, JSON."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from profilers.pdf import FLAGS, find_browser
from profilers.report import operator_report, scenario_report
from profilers.report_render import figures_for, to_html, to_markdown, write
from profilers.traces import from_rows

FIGURES = {"roofline", "flame", "comparison", "hotspots_odl", "hotspots_kernel"}


@pytest.fixture(scope="module")
def report():
    return operator_report("matmul", {"M": 32, "N": 32, "K": 32}, target="host", repeats=3)


def test_report_has_every_section(report):
    assert report["op"]["flops"] == 2 * 32 ** 3
    assert report["verification"]["ok"]
    assert report["config"] and report["explanation_text"]
    assert {m["backend"] for m in report["measurements"]} == {"c", "torch"}
    assert {p["label"].split()[0] for p in report["roofline"]["points"]} == {"C", "the"}
    assert report["comparison"]["a"]["label"] == "the reference evaluator (torch)"
    assert report["flame"]["total"] > 0
    if report["hotspots"] is not None:  # None only where valgrind is missing (said in notes)
        assert report["hotspots"]["odl_lines"]
    assert json.loads(json.dumps(report, default=str))["kind"] == "operator"


def test_html_is_self_contained(report, tmp_path):
    page = to_html(report)
    external = re.findall(r"<(?:script|link|img|iframe)[^>]+(?:src|href)=['\"]?(?:https?:)?//",
                          page, flags=re.I)
    assert external == []
    assert "@import" not in page
    assert page.count("<script") >= len(figures_for(report))
    assert "Plotly.newPlot" in page or "plotly" in page.lower()
    assert set(figures_for(report)) >= FIGURES - ({"hotspots_odl", "hotspots_kernel"}
                                                  if report["hotspots"] is None else set())


@pytest.mark.skipif(find_browser() is None, reason="no chromium binary")
def test_html_draws_its_figures_offline_in_chromium(report, tmp_path):
    html = tmp_path / "r.html"
    write(report, html)
    dom = subprocess.run([find_browser(), *FLAGS, "--dump-dom", html.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    drawn = len(re.findall(r'class="main-svg"', dom))
    assert drawn >= len(figures_for(report))  # each plotly figure drew at least one svg


@pytest.mark.skipif(find_browser() is None, reason="no chromium binary")
def test_pdf_is_valid_and_carries_the_figures(report, tmp_path):
    full = write(report, tmp_path / "r.pdf").read_bytes()
    bare = {k: v for k, v in report.items()
            if k not in ("roofline", "flame", "hotspots", "comparison")}
    plain = write(bare, tmp_path / "bare.pdf").read_bytes()
    assert full.startswith(b"%PDF-") and full.rstrip().endswith(b"%%EOF")
    pages = len(re.findall(rb"/Type\s*/Page\b", full))
    assert pages >= 3
    assert pages > len(re.findall(rb"/Type\s*/Page\b", plain))
    assert len(full) > 1.5 * len(plain)


def test_markdown_and_json(report, tmp_path):
    md = to_markdown(report)
    assert md.startswith("# Optimisation report: matmul")
    assert "## Roofline" in md and "```" in md and "sum[k]" in md
    data = json.loads(write(report, tmp_path / "r.json").read_text())
    assert data["op"]["name"] == "matmul"


def test_scenario_report_has_a_timeline_figure():
    tl = from_rows([(0, "allreduce", 0.0, 2e-3, "comm"), (1, "compute", 0.0, 1e-3, "comp")],
                   "ring allreduce")
    rep = scenario_report("HCF: ring", tl, {"time_s": 2e-3}, {"links": [{"link": "a-b"}]})
    assert "timeline" in figures_for(rep)
    assert "ring allreduce" in to_html(rep) and "| time_s |" in to_markdown(rep)


def test_a_point_above_the_roof_says_which_roof_and_why():
    from profilers.report import roof_point

    notes: list = []
    # 4 MiB moved in 1 us (4 TB/s) on a 576 GB/s socket: it stayed in a cache between calls
    assert roof_point("update", 1e6, 4 * 2 ** 20, 1e-6, "epyc-turin-9755", notes) is None
    assert "4.0 MiB stayed in a cache between the timed calls" in notes[-1]
    # above the compute roof (bf16: twice the fp32 one) only a wrong count or time gets
    assert roof_point("gemm", 1e12, 1e6, 1e-3, "epyc-turin-9755", notes, "bf16") is None
    assert "its time or FLOP count is wrong" in notes[-1]
    placed = roof_point("gemm", 1e12, 1e6, 0.04, "epyc-turin-9755", notes, "bf16")
    assert placed.dtype == "bf16" and placed.achieved_gflops == pytest.approx(25000)
