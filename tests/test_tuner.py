"""Worker isolation, the tuning database, replay, and a tuner killed mid-run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from uol_core.acg import tuner
from uol_core.acg.config import TileConfig
from uol_core.acg.fixtures import runnable_target
from uol_core.acg.session import open_session
from uol_core.acg.tuner import Trial, TuneResult
from uol_core.backends.c import emit
from uol_core.backends.c.gemm.cost_model import GemmModel
from uol_core.ops import load_op, op_text
from uol_core.runtime.tuningdb import TuningDB
from uol_core.runtime.worker import Worker, make_job

TARGET = runnable_target()
SIZES = {"M": 48, "N": 40, "K": 32}


def _good_source():
    isa = "avx2" if "avx2" in TARGET.isa else "vecext"
    return emit(load_op("matmul"), TileConfig(isa=isa, mr=4, nr=16, kc=64, mc=48, nc=48,
                                               threads=1), TARGET, SIZES)


def _planted(body: str):
    good = _good_source()
    text = f"#include <stdint.h>\nvoid {good.entry}(void **args, const int64_t *s)\n{{\n{body}\n}}\n"
    return replace(good, text=text, line_map={})


def _job(src, **kw):
    return make_job(src, op_text("matmul"), "matmul.odl", SIZES, min_seconds=0.0, repeats=3, **kw)


def test_crash_hang_and_wrong_result_are_reported_and_the_worker_recovers():
    with Worker(timeout_s=20) as worker:
        crash = worker.run(_job(_planted("*(volatile int *)0 = 1;")))
        assert crash["status"] == "crash" and "SIGSEGV" in crash["reason"]
        hang = worker.run(_job(_planted("for (;;) { __asm__ volatile(\"\"); }")), timeout_s=3)
        assert hang["status"] == "timeout" and "hang" in hang["reason"]
        wrong = worker.run(_job(_planted(
            "float *c = (float *)args[2];\n"
            "for (int i = 0; i < 48 * 40; ++i) c[i] = 1.0f;")))
        assert wrong["status"] == "mismatch" and wrong["max_abs_err"] > 0
        assert "median_s" not in wrong and "gflops" not in wrong  # never reported as a timing
        good = worker.run(_job(_good_source()))
        assert good["status"] == "ok" and good["gflops"] > 0 and good["median_s"] > 0


def test_build_error_is_a_result_too():
    with Worker(timeout_s=60) as worker:
        res = worker.run(_job(_planted("this is not C;")))
    assert res["status"] == "build_error" and "generated" in res["reason"]


def test_tune_records_every_measurement_and_replays(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    op = load_op("matmul")
    session = open_session(op, SIZES, TARGET, db=db, min_seconds=0.0)
    try:
        result = session.tune(budget=4, top=2)
    finally:
        session.close()
    assert result.best is not None and result.best_gflops > 0
    rows = db.rows(session.key)
    raced = [r for r in rows if '"race"' in r["extra"]]
    assert len(rows) - len(raced) == result.measurements == 4
    assert len(raced) == len(result.confirmation)
    assert {r["status"] for r in rows} <= {"ok", "mismatch", "crash", "timeout", "build_error"}
    replay = open_session(op, SIZES, TARGET, db=db, replay=True)
    again = replay.tune(budget=4, top=2)
    assert [t.config for t in again.trials] == [t.config for t in result.trials]
    assert all(t.from_db for t in again.trials) and len(db.rows(session.key)) == len(rows)


def test_the_finalists_are_timed_in_turn_and_the_race_settles_the_pick(tmp_path, monkeypatch):
    """After the search, the best measured configs are timed again in turn in one process;
    the race's rows are recorded, its winner is the result, and the database's best follows
    the race rather than an earlier, luckier single measurement."""
    # every verified config is a finalist: at 48x40x32 one lucky measurement can be twice its
    # neighbours and leave none within CONFIRM_WITHIN (test_finalists_... covers that filter)
    monkeypatch.setattr(tuner, "CONFIRM_WITHIN", 1.0)
    db = TuningDB(tmp_path / "t.sqlite")
    session = open_session(load_op("matmul"), SIZES, TARGET, db=db, min_seconds=0.0)
    try:
        result = session.tune(budget=4, top=3)
    finally:
        session.close()
    raced = {c["config"]: c for c in result.confirmation}
    assert len(raced) >= 2 and all(c["status"] == "ok" for c in raced.values())
    winner = max(raced.values(), key=lambda c: c["race_gflops"])
    assert result.best.key() == winner["config"] and result.best_gflops == winner["race_gflops"]
    loser = min(raced.values(), key=lambda c: c["race_gflops"])["config"]
    db.record(session.key, loser, {"status": "ok", "gflops": 1e9, "median_s": 1e-9})
    assert db.best(session.key)["config"] == loser  # a row recorded after the race competes
    rows = db.rows(session.key)
    first_race = next(i for i, r in enumerate(rows) if '"race"' in r["extra"])
    with sqlite3.connect(db.path) as conn:  # a lucky row from before the race: settled
        conn.execute("UPDATE measurements SET gflops = 1e9 WHERE id = ?",
                     (rows[first_race - 1]["id"],))
        conn.execute("DELETE FROM measurements WHERE id = ?", (rows[-1]["id"],))
    assert db.best(session.key)["config"] == winner["config"]


def test_finalists_are_the_best_of_each_tile_within_reach_of_the_best():
    """The race takes the best config, then the best of each other register tile, then the
    next best, each within CONFIRM_WITHIN of the best; failures and far-off configs stay out."""
    def trial(mr, kc, gflops, status="ok"):
        cfg = TileConfig(isa="avx2", mr=mr, nr=16, kc=kc, mc=48, nc=48, threads=1)
        return Trial(cfg, 0.0, 0, {"status": status, "gflops": gflops})

    class Session:
        @staticmethod
        def family(cfg):
            return (cfg.mr, cfg.nr)

    trials = [trial(4, 64, 100.0), trial(4, 128, 90.0), trial(6, 64, 80.0),
              trial(8, 64, 45.0), trial(2, 64, 99.0, "mismatch"), trial(6, 128, 70.0)]
    out = TuneResult(trials[0].config, 100.0, trials=trials)
    picked = [(t.config.mr, t.config.kc) for t in tuner._finalists(Session(), out)]
    assert picked == [(4, 64), (6, 64), (4, 128), (6, 128)][:tuner.CONFIRM_FINALISTS]
    lone = TuneResult(trials[0].config, 100.0, trials=[trials[0], trials[3]])
    assert tuner._finalists(Session(), lone) == [trials[0]]  # nothing else within reach


def test_interleaved_timing_tells_a_slower_call_apart():
    from uol_core.runtime.measure import time_interleaved

    fast, slow = time_interleaved([lambda: time.sleep(0.001), lambda: time.sleep(0.006)],
                                  seconds=0.1, rounds=4)
    assert fast.repeats >= 4 and slow.repeats == fast.repeats
    assert slow.median_s > 2 * fast.median_s


def test_failures_are_never_retried(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    session = open_session(load_op("matmul"), SIZES, TARGET, db=db)
    cfg = session.ranked()[0][0]
    db.record(session.key, cfg.key(), {"status": "crash", "reason": "planted"})
    trial = session.measure(cfg)
    assert trial.from_db and trial.result["status"] == "crash" and session.worker is None


KILLED_TUNER = """
import sys
from uol_core.acg.fixtures import runnable_target
from uol_core.acg import tuner
from uol_core.acg.session import open_session
from uol_core.ops import load_op
from uol_core.runtime.tuningdb import TuningDB
s = open_session(load_op("matmul"), {"M": 40, "N": 40, "K": 40}, runnable_target(),
                 db=TuningDB(sys.argv[1]), min_seconds=0.3)
s.tune(budget=1000, top=1000, patience=1000)
"""


def test_killing_the_tuner_loses_no_measurement(tmp_path):
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_TUNER, str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        count = 0
        while time.time() < deadline and count < 2:
            time.sleep(0.5)
            if path.exists():
                try:
                    with sqlite3.connect(path, timeout=5) as conn:
                        count = conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
                except sqlite3.OperationalError:
                    count = 0
        assert count >= 2, proc.stderr.read().decode() if proc.poll() is not None else "slow"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = conn.execute("SELECT status, config, extra FROM measurements").fetchall()
    assert len(rows) >= count
    assert all(json.loads(extra) is not None for _, _, extra in rows)


@pytest.mark.parametrize("cmd", [["compile", "matmul", "--shape", "M=8,N=8,K=8", "--show"],
                                 ["explain", "matmul", "--shape", "M=64,N=64,K=64"]])
def test_cli_commands_run(cmd):
    from typer.testing import CliRunner

    from uol_cli.main import app
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 0, res.output
    assert "config" in res.output or "uol_micro" in res.output


def test_cli_run_json_and_user_errors(tmp_path):
    from typer.testing import CliRunner

    from uol_cli.main import app
    runner = CliRunner()
    res = runner.invoke(app, ["run", "linear_bias_relu", "--shape", "M=17,N=9,K=5", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] and data["gflops"] > 0 and data["ms"] > 0 and data["max_abs_err"] < 1e-4
    res = runner.invoke(app, ["run", "softmax", "--shape", "R=4,C=4", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["ok"]  # every pattern compiles now
    res = runner.invoke(app, ["run", "softmax", "--shape", "R=0,C=4"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(app, ["compile", "matmul", "--config", "bogus=1"])
    assert res.exit_code == 2 and "unknown config key" in res.output


def test_cli_run_reads_and_writes_tensor_files(tmp_path):
    import torch
    from typer.testing import CliRunner

    from uol_cli.main import app
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    torch.save({"A": a, "B": b}, tmp_path / "in.pt")
    res = CliRunner().invoke(app, ["run", "matmul", "--inputs", str(tmp_path / "in.pt"),
                                   "--out", str(tmp_path / "out.pt"), "--check", "--json"])
    assert res.exit_code == 0, res.output
    out = torch.load(tmp_path / "out.pt")
    assert torch.allclose(out["C"], a @ b, atol=1e-5)


def test_config_tuned_uses_the_best_recorded_config(tmp_path, monkeypatch):
    import uol_core
    from uol_core.acg.tuner import tuning_key
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))
    op = load_op("matmul")
    db = TuningDB()  # the default database, under UOL_CACHE_DIR
    cfg = TileConfig(isa="avx2" if "avx2" in TARGET.isa else "vecext", mr=3, nr=16, kc=64,
                     mc=48, nc=48, threads=1)
    key = tuning_key(op, SIZES, TARGET)
    db.record(key, cfg.key(), {"status": "ok", "gflops": 1e6, "median_s": 1e-6})
    db.record(key, cfg.replace(mr=2).key(), {"status": "mismatch", "gflops": None})
    k = uol_core.compile(op, shapes=SIZES, target=TARGET, config="tuned")
    assert k.config == cfg.to_dict()
    exp = k.explain()
    assert exp.measured["gflops"] == 1e6 and exp.measured["measured_rank"] == 1


def test_first_measurements_spread_over_register_tiles():
    from uol_core.acg.tuner import _first_per_family

    class Ranked:  # the model's order: one tile's variants first, as a flat model ranks them
        configs = [TileConfig(mr=8, nr=32, kc=256), TileConfig(mr=8, nr=32, kc=256, pf=8),
                   TileConfig(mr=8, nr=32, kc=192), TileConfig(mr=12, nr=32, kc=256),
                   TileConfig(mr=6, nr=64, kc=128), TileConfig(mr=12, nr=32, kc=128)]

        def ranked(self):
            return [(c, 100.0 - i) for i, c in enumerate(self.configs)]

    session = Ranked()
    session.family = GemmModel.family
    first = _first_per_family(session, 3)
    assert [(c.mr, c.nr, c.kc) for c in first] == [(8, 32, 256), (12, 32, 256), (6, 64, 128)]
    # fewer families than asked for: the rest in the model's order
    assert [(c.mr, c.pf) for c in _first_per_family(session, 4)] == [(8, 0), (12, 0), (6, 0), (8, 8)]
    del session.family  # a session without families: the model's top as it ranks them
    assert _first_per_family(session, 2) == session.configs[:2]
