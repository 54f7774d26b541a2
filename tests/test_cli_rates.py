"""`uol run` shows the measured time of every op it times, with the rate that matters for the
op's bound: GB/s against the memory roof for a row op, GFLOP/s against the compute roof for a
GEMM (the roofs are the target's HFL facts)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uol_cli.main import app


@pytest.mark.parametrize(("op", "shape", "bound"), [
    ("softmax", "R=64,C=256", "memory"),
    ("layernorm", "R=64,C=256", "memory"),
    ("matmul", "M=384,K=384,N=384", "compute"),
])
def test_run_reports_time_and_the_rate_of_its_bound(op, shape, bound):
    result = CliRunner().invoke(app, ["run", op, "--shape", shape, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ms"] > 0 and report["gflops"] > 0 and report["gbps"] > 0
    assert report["bound"] == bound and report["fraction_of_roof"] > 0
    roof = report["roof_gbps"] if bound == "memory" else report["roof_gflops"]
    rate = report["gbps"] if bound == "memory" else report["gflops"]
    assert report["fraction_of_roof"] == pytest.approx(rate / roof)

    text = CliRunner().invoke(app, ["run", op, "--shape", shape])
    assert text.exit_code == 0, text.output
    assert " ms (IQR " in text.output
    assert ("GB/s memory roof" if bound == "memory" else "GFLOP/s compute roof") in text.output


def test_run_json_carries_the_confidence_and_the_noise_flag():
    """`uol run --json`: the sample count, the median's 95% CI and the noisy flag with a reason
    naming each threshold; the text line says "noisy: ..." when the run is flagged."""
    result = CliRunner().invoke(app, ["run", "softmax", "--shape", "R=64,C=256", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n"] >= 3
    low, high = report["ci_ms"]
    assert low <= report["ms"] <= high
    assert isinstance(report["noisy"], bool)
    assert "IQR/median" in report["noise_reason"]
    assert report["noise_reason"].startswith("noisy: " if report["noisy"] else "quiet: ")
    text = CliRunner().invoke(app, ["run", "softmax", "--shape", "R=64,C=256"])
    assert "95% CI" in text.output
