"""The optimisation guide: cases built from the ACG and the HFL, legal for their targets, with
predictions labelled as such, cached per target, exported as offline HTML and JSON.

The default run builds every family on one CPU target (C backend, ARM) and one GPU target
(Triton); `UOL_LONG=1` builds the whole guide (every shipped target) and checks all of it.
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from uol_core.acg.config import resolve_target
from uol_core.backends import get_backend
from uol_core.guide.cases import MEASURED, PREDICTED, ROOFLINE_ONLY
from uol_core.guide.families import FAMILIES
from uol_core.guide.generate import _cache_path, generate, guide_key, shipped_targets
from uol_core.ops import list_ops, load_op

LONG = os.environ.get("UOL_LONG") == "1"
SAMPLE_TARGETS = ["graviton3", "h100-sxm"]


@pytest.fixture(scope="module")
def guide():
    return generate(shipped_targets() if LONG else SAMPLE_TARGETS)


def test_the_guide_spans_300_cases():
    assert len(shipped_targets()) >= 16
    assert len({f.name for f in FAMILIES}) >= 20 and len({f.op for f in FAMILIES}) >= 20
    assert all(f.op in list_ops() for f in FAMILIES)
    assert len(shipped_targets()) * len(FAMILIES) >= 300


def test_every_case_is_built(guide):
    assert not guide.errors, guide.errors
    assert len(guide.cases) == len(guide.targets) * len(FAMILIES)
    if LONG:
        assert len(guide.cases) >= 300


def test_every_config_is_legal_for_its_target(guide):
    for case in guide.cases:
        target = resolve_target(case.target)
        backend = get_backend(case.backend, target)
        assert backend.name == get_backend("auto", target).name
        space = backend.space(load_op(case.op), case.sizes, target)
        assert case.legal and not space.violated(case.config), (case.id, case.violated)
        assert space.configs, case.id


def test_predictions_are_labelled(guide):
    for case in guide.cases:
        assert case.predicted_s and case.predicted_s > 0, case.id
        assert case.prediction_label in (PREDICTED, ROOFLINE_ONLY), case.id
        assert case.prediction_label.startswith("model-predicted")
        if case.measured_s is not None:
            assert case.measured_label.startswith(MEASURED) and case.target == "host"
        for move in case.knob_changes:
            assert move["legal"] == ("predicted_s" in move), (case.id, move)
            if move["legal"]:
                assert move["label"] == PREDICTED and move["ratio"] > 0
            else:
                assert move["why"].startswith("breaks ")


def test_cases_say_where_they_sit_and_what_binds(guide):
    gemm = next(c for c in guide.cases if c.id == "graviton3/gemm")
    assert gemm.backend == "c" and gemm.pattern == "gemm" and gemm.roofline["bound"] == "compute"
    assert gemm.config["isa"] == "sve"  # graviton3 has SVE (256-bit): the length-agnostic GEMM
    assert gemm.binding and any(not m["legal"] for m in gemm.knob_changes)
    softmax = next(c for c in guide.cases if c.id == "graviton3/softmax")
    assert softmax.roofline["bound"] == "memory"
    assert softmax.roofline["intensity"] < softmax.roofline["ridge_intensity"]
    gpu = next(c for c in guide.cases if c.id == "h100-sxm/gemm")
    assert gpu.backend == "triton" and "BLOCK_M" in gpu.config
    for case in guide.cases:
        assert case.studio_link.startswith("/?op=" + case.op)
        assert f"target={case.target}" in case.studio_link


def test_each_target_is_cached_on_its_own(guide):
    key = guide_key([resolve_target("graviton3")], FAMILIES)
    cached = json.loads(_cache_path(key).read_text())
    assert [c["id"] for c in cached["cases"]] == [c.id for c in guide.cases
                                                  if c.target == "graviton3"]
    again = generate(["graviton3"])
    assert [c.to_dict() for c in again.cases] == [c.to_dict() for c in guide.cases
                                                  if c.target == "graviton3"]


def test_uol_guide_writes_offline_html_and_json(guide, tmp_path):
    from uol_cli.main import app

    out = tmp_path / "guide.html"
    runner = CliRunner()
    result = runner.invoke(app, ["guide", "--target", "graviton3", "--format", "html",
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script src" not in text
    assert "http" not in text.replace("http://127", "")  # offline: nothing to fetch
    assert text.count("<tr class='case'") == len(FAMILIES)
    assert "model-predicted" in text and "open in Studio" in text
    result = runner.invoke(app, ["guide", "--target", "graviton3", "--family", "softmax",
                                 "--format", "json", "-o", str(tmp_path / "g.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "g.json").read_text())
    assert [c["id"] for c in data["cases"]] == ["graviton3/softmax"]
    bad = runner.invoke(app, ["guide", "--family", "nonsense"])
    assert bad.exit_code == 2 and "no guide family" in bad.output
