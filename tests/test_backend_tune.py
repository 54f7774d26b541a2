"""`uol tune --backend triton` and `uol_core.tune(..., backend="triton")`: the shared search over
the Triton backend's own space; without a GPU every config is verified under the interpreter and
recorded as such, never ranked by an interpreted time."""

from __future__ import annotations

import json
import os

import torch
from typer.testing import CliRunner

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import uol_core
from uol_cli.main import app
from uol_core.runtime.tuningdb import TuningDB


def test_cli_tunes_a_triton_kernel_over_its_own_space(tmp_path):
    db = tmp_path / "tune.db"
    # a 256-wide row launches BLOCK_C=256: 1, 2, 4 (and 8) warps are legal, enough for 3 trials
    result = CliRunner().invoke(app, ["tune", "softmax", "--backend", "triton", "--shape",
                                      "R=8,C=256", "--budget", "3", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert len(report["trials"]) == 3
    knobs = {k.split("=")[0] for t in report["trials"] for k in t["config"].split(",")}
    assert "num_warps" in knobs and "BLOCK_M" not in knobs  # the row kernel's knobs only
    if torch.cuda.is_available():
        assert report["best"] is not None
    else:
        assert {t["status"] for t in report["trials"]} == {"verified"}
        assert report["best"] is None and "not timed" in report["stopped"]


def test_api_tune_records_each_triton_config_at_once(tmp_path):
    db = TuningDB(str(tmp_path / "api.db"))
    result = uol_core.tune("layernorm", {"R": 4, "C": 256}, budget=2, db=db, backend="triton")
    assert result.measurements == 2
    again = uol_core.tune("layernorm", {"R": 4, "C": 256}, budget=2, db=db, backend="triton")
    assert all(t.from_db for t in again.trials)  # read back, not measured twice


def test_the_reference_evaluator_has_nothing_to_tune():
    result = CliRunner().invoke(app, ["tune", "softmax", "--backend", "reference", "--shape",
                                      "R=8,C=64"])
    assert result.exit_code != 0 and "no knobs to tune" in result.output
