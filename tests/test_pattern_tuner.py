"""Tuning the non-GEMM C kernels: measured, recorded at once, never retried, replayable."""

import torch

import uol_core
from uol_core import load_op
from uol_core.acg import tuner
from uol_core.acg.session import open_session
from uol_core.runtime.tuningdb import TuningDB

SIZES = {"R": 64, "C": 96}


def test_tune_softmax_records_every_measurement_and_replays(tmp_path, monkeypatch):
    # every verified config races, however far a noisy first measurement put it from the best
    monkeypatch.setattr(tuner, "CONFIRM_WITHIN", 1.0)
    db = TuningDB(tmp_path / "tune.sqlite")
    session = open_session(load_op("softmax"), SIZES, db=db, min_seconds=0.02)
    try:
        result = session.tune(budget=3)
    finally:
        session.close()
    assert result.best is not None and result.best_gflops > 0
    rows = db.rows(session.key)
    raced = [r for r in rows if '"race"' in r["extra"]]
    assert len(rows) - len(raced) == len(result.trials) == 3
    # the confirmation round timed the finalists in turn, rated by the op's own work
    assert len(raced) == len(result.confirmation) >= 2
    assert all(r["status"] == "ok" and r["gflops"] > 0 for r in raced)
    assert db.best(session.key)["config"] == result.best.key()
    assert all(t.result["status"] == "ok" for t in result.trials)  # verified before timing
    replay = open_session(load_op("softmax"), SIZES, db=db, replay=True)
    again = replay.tune(budget=3)
    assert [t.config.key() for t in again.trials] == [t.config.key() for t in result.trials]
    assert all(t.from_db for t in again.trials)
    assert replay.model.parse(result.best.key()) == result.best


def test_compile_tuned_uses_the_pattern_tuner(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))
    k = uol_core.compile("softmax", shapes=SIZES, config="tuned")
    x = torch.randn(64, 96)
    torch.testing.assert_close(k(X=x), torch.softmax(x, dim=1))
    assert set(k.config) >= {"threads", "chunk", "vec", "fuse"}
