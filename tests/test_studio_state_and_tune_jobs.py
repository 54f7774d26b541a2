"""The Studio's state as data and its tune jobs, without a browser: a tune job's record is read
back by its own client only, a job whose process died reads as ended, a stop request is seen;
the Studio reopens typed ODL and knobs from its URL query; a GPU target asks for a GPU backend;
Apply best belongs to the op, sizes, backend and target its tune measured."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))
    from app.services import tune_jobs

    return tune_jobs


INPUTS = {"op": "matmul", "backend": "c", "target": "host", "sizes": {"M": 32, "K": 32, "N": 32}}


def test_a_tune_job_is_read_back_by_its_client_with_progress_and_result(jobs):
    job = jobs.start("browser-a", INPUTS, 4)
    assert jobs.read(job, "browser-a")["state"] == jobs.RUNNING
    assert jobs.read(job, "browser-b") is None  # another browser's id leads nowhere
    trail = [{"i": 1, "config": {"ku": 1}, "gflops": 2.0, "ok": True}]
    jobs.progress(job, 1, "1/4 measured", trail)
    record = jobs.read(job, "browser-a")
    assert (record["done"], record["status"], record["trail"]) == (1, "1/4 measured", trail)
    tuned = {**INPUTS, "config": {"ku": 1}, "gflops": 2.0}
    jobs.finish(job, "✓ 1 measured", trail, tuned)
    record = jobs.read(job, "browser-a")
    assert record["state"] == jobs.DONE and record["tuned"] == tuned
    assert not jobs.request_stop(job, "browser-a")  # an ended job has nothing to stop


def test_a_job_whose_process_is_gone_reads_as_ended_and_a_stop_is_seen(jobs, monkeypatch):
    job = jobs.start("browser-a", INPUTS, 4)
    assert jobs.request_stop(job, "browser-a") and jobs.stop_requested(job)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    record = jobs._load(job)
    jobs._write(job, {**record, "pid": int(dead)})
    ended = jobs.read(job, "browser-a")
    assert ended["state"] == jobs.ENDED and "stopped at the user's request" in ended["status"]


@pytest.mark.parametrize("bad", ["../../etc/passwd", "ABC", None, 3, "0" * 31])
def test_a_job_id_from_a_client_is_checked(jobs, bad):
    assert jobs.read(bad, "browser-a") is None


def test_the_studio_reopens_typed_odl_sizes_and_knobs_from_its_query(live_ide):
    from app.pages.studio import _initial  # a page module imports once the app exists

    odl = "op rms_kept(X: f32[R, C]) -> Y: f32[R, C]:\n    Y[r, c] = X[r, c] * 2.0\n"
    init = _initial(None, {"odl": odl, "backend": "c", "target": "host", "sizes": "R=8,C=64",
                           "config": "vec=16,chunk=4"})
    assert init["odl"] == odl and init["op"] == "rms_kept"
    assert init["sizes"] == {"R": 8, "C": 64} and init["config"] == {"vec": 16, "chunk": 4}
    broken = _initial(None, {"odl": "op broken(", "backend": "c", "target": "host"})
    assert broken["odl"] == "op broken(" and broken["sizes"] == {}  # opens; the compile says why


def test_a_gpu_target_asks_for_a_gpu_backend():
    from app.callbacks.studio_state import gpu_backend_for

    switch, why = gpu_backend_for("h100-sxm", "c")
    assert switch == "triton" and "GPU target" in why and "CPU kernels only" in why
    assert gpu_backend_for("h100-sxm", "triton") == (None, "")
    assert gpu_backend_for("graviton3", "c") == (None, "")


def test_apply_best_belongs_to_the_tuned_inputs():
    from app.callbacks.studio_state import tuned_for

    state = {"ok": True, "op": "matmul", "backend": "c", "target": "host",
             "sizes": {"M": 32, "K": 32, "N": 32}, "config": {"ku": 1}}
    tuned = {**INPUTS, "config": {"ku": 1}}
    assert tuned_for(tuned, state)
    assert not tuned_for(tuned, {**state, "target": "graviton3"})
    assert not tuned_for(tuned, {**state, "ok": False})
    assert not tuned_for(None, state)


def test_an_emulated_run_is_recorded_as_verified_not_timed():
    from app.services.history import EMULATED, TIMED, run_mode
    from uol_core.runtime.cross import EMULATED_NOTE

    assert run_mode("run", {"mode": EMULATED_NOTE, "ok": True}) == EMULATED
    assert EMULATED == EMULATED_NOTE  # one wording wherever the mode is shown
    assert run_mode("run", {"mode": "measured", "median_s": 1e-4}) == TIMED
