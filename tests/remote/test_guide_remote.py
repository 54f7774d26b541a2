"""The optimisation guide's measured cases from live workers: cases of targets with a live
worker (host, avx2-desktop) are built, verified and timed on it and labelled with its node and
host facts; cases of a target without one (graviton3) keep the model prediction."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from uol_core.guide.cases import PREDICTED, ROOFLINE_ONLY
from uol_core.guide.families import family
from uol_core.guide.generate import generate, measure_guide
from uol_remote.guide_measure import guide_measurers

# memory-bound row and element-wise kernels: a verified timing takes well under a second
FAMILIES = [family("softmax"), family("elementwise-binary"), family("row-reduction")]
TARGETS = ["host", "avx2-desktop", "graviton3"]


def test_cases_of_targets_with_live_workers_are_measured_there(cluster):
    broker, secret, _, by_node = cluster
    guide = generate(TARGETS, FAMILIES)
    measurer_for, workers = guide_measurers(broker.url, secret, measure_host_here=False)
    assert {w["target"] for w in workers} == {"host", "avx2-desktop"}
    guide, reports = measure_guide(guide, measurer_for, limit=2)
    for target in ("host", "avx2-desktop"):
        cases = [c for c in guide.cases if c.target == target]
        measured, rest = cases[:2], cases[2:]
        for case in measured:
            assert case.measured_s and case.measured_s > 0, (case.id, case.note)
            assert case.measured_label.startswith(f"measured on worker {target}."), case.id
            node = case.measured_label.split()[3]
            assert node in by_node  # a live worker process of this test's cluster
            assert "cores" in case.measured_label and "host " in case.measured_label
            assert case.prediction_label in (PREDICTED, ROOFLINE_ONLY)  # kept beside it
        assert [c.measured_s for c in rest] == [None] * len(rest)
        assert all("beyond the limit of 2" in c.note for c in rest)
        report = next(r for r in reports if r.target == target)
        assert (report.measured, report.failed, report.skipped) == (2, [], len(rest))
    for case in (c for c in guide.cases if c.target == "graviton3"):
        assert case.measured_s is None and case.measured_label == ""
        assert case.prediction_label.startswith("model-predicted") and case.predicted_s > 0
    assert not next(r for r in reports if r.target == "graviton3").has_measurer


def test_uol_guide_measure_with_broker_labels_the_worker(cluster, tmp_path):
    from uol_cli.main import app

    broker, secret, _, _ = cluster
    out = tmp_path / "guide.json"
    result = CliRunner().invoke(app, [
        "guide", "--target", "avx2-desktop", "--target", "graviton3", "--family", "softmax",
        "--format", "json", "-o", str(out), "--measure", "--broker", broker.url,
        "--secret-file", str(secret), "--limit", "1"])
    assert result.exit_code == 0, result.output
    cases = {c["id"]: c for c in json.loads(out.read_text())["cases"]}
    avx2 = cases["avx2-desktop/softmax"]
    assert avx2["measured_s"] > 0
    assert avx2["measured_label"].startswith("measured on worker avx2-desktop.")
    assert cases["graviton3/softmax"]["measured_s"] is None
    assert "avx2-desktop: 1 measured on worker avx2-desktop." in result.output
    assert "model-predicted (no live worker): graviton3" in result.output
