"""Measured cases of the optimisation guide without remote workers: this host's cases are
timed in the sandboxed worker process up to a per-target limit, other targets keep their
labelled prediction, and `uol guide` says what it cannot do with its remote options."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from uol_core.guide.cases import MEASURED
from uol_core.guide.families import family
from uol_core.guide.generate import generate, measure_guide
from uol_core.guide.measure import host_only, local_measurer, measure_case

FAMILIES = [family("softmax"), family("elementwise-binary")]


@pytest.fixture(autouse=True)
def own_tuning_database(tmp_path, monkeypatch):
    """Measured cases are recorded in the tuning database, and a guide reads recorded times
    back: each test starts from an empty one of its own."""
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))


def test_host_cases_are_measured_up_to_the_limit_and_others_stay_predicted():
    guide = generate(["host", "graviton3"], FAMILIES)
    guide, reports = measure_guide(guide, host_only(), limit=1)
    first, second = (c for c in guide.cases if c.target == "host")
    assert first.measured_s > 0 and first.measured_label == MEASURED, first.note
    assert second.measured_s is None and "beyond the limit of 1 cases per target" in second.note
    for case in (c for c in guide.cases if c.target == "graviton3"):
        assert case.measured_s is None and case.prediction_label.startswith("model-predicted")
    host, graviton = reports
    assert (host.target, host.measured, host.skipped, host.where) == ("host", 1, 1, MEASURED)
    assert graviton.target == "graviton3" and not graviton.has_measurer


def test_a_case_its_measurer_cannot_run_keeps_its_prediction_and_says_why():
    (case,) = generate(["h100-sxm"], [family("softmax")]).cases
    assert case.backend == "triton"
    measurer = local_measurer()  # runs built C kernels only: no request runner
    why = measure_case(case, measurer)
    measurer.close()
    assert "the triton backend's kernels run only on a worker of their target" in why
    assert case.measured_s is None and why in case.note


def test_uol_guide_remote_options_say_what_is_missing(tmp_path):
    from uol_cli.main import app

    runner = CliRunner()
    no_measure = runner.invoke(app, ["guide", "--target", "host", "--broker",
                                     "redis://127.0.0.1:6379/0"])
    assert no_measure.exit_code == 2 and "add --measure" in no_measure.output
    not_redis = runner.invoke(app, ["guide", "--target", "host", "--measure", "--broker",
                                    "http://127.0.0.1:1"])
    assert not_redis.exit_code == 2 and "must be a Redis URL" in not_redis.output
    secret = tmp_path / "remote.secret"
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o600)
    from uol_remote.local_cluster import free_port

    down = runner.invoke(app, ["guide", "--target", "host", "--measure", "--broker",
                               f"redis://127.0.0.1:{free_port()}/0", "--secret-file",
                               str(secret)])
    assert down.exit_code == 2 and "cannot reach the broker" in down.output


def test_a_measured_case_is_recorded_where_the_tuners_and_the_next_guide_find_it():
    from uol_core.guide.measure import case_key
    from uol_core.runtime.tuningdb import TuningDB

    guide = generate(["host"], [family("softmax")])
    guide, _ = measure_guide(guide, host_only(), limit=1)
    measured = next(c for c in guide.cases if c.measured_s)
    db = TuningDB()
    row = db.lookup(*case_key(measured))
    db.close()
    assert row and row["status"] == "ok" and row["median_s"] == measured.measured_s
    # a fresh guide reads the time back from the database, labelled as such
    again = next(c for c in generate(["host"], [family("softmax")]).cases if c.id == measured.id)
    assert again.measured_s == measured.measured_s
    assert again.measured_label == f"{MEASURED} (tuning database)"
