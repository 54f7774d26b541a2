"""Planted faults: each gives its own message in the CLI and the IDE, and the next run works."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rel_helpers import LONG, REPO, post, response_text, run_body, studio_state, target_name

from uol_core.ops import op_text

SIZES = {"M": 16, "N": 16, "K": 16}
CRASH_CC = "#!/bin/sh\ncase \"$1\" in --version) echo crashcc 1.0; exit 0;; esac\nkill -SEGV $$\n"
# C bodies planted in place of the real entry (which stays as <entry>_orig)
PLANTS = {
    "segfault": "*(volatile int *)0 = 1;",
    "hang": "for (;;) {{ __asm__ volatile(\"\"); }}",
    "huge_alloc": "size_t n = (size_t)1 << 46; volatile char *p = malloc(n); if (!p) abort(); "
                  "for (size_t i = 0; i < n; i += 4096) p[i] = 1;",
    "wrong": "{entry}_orig(args, strides); ((float *)args[{out}])[0] += 1.0f;",
}
EXPECT = {"segfault": "SIGSEGV", "hang": "no result within", "huge_alloc": "crashed",
          "wrong": "wrong result"}


def plant(src, fault: str):
    """The same KernelSource with its entry replaced by a faulty one."""
    from dataclasses import replace

    out = src.meta["args"].index(src.meta["outputs"][0]) if "outputs" in src.meta else -1
    body = PLANTS[fault].format(entry=src.entry, out=out)
    text = src.text.replace(f" {src.entry}(", f" {src.entry}_orig(")
    text = ("#include <stdlib.h>\n#include <stdint.h>\n" + text +
            f"\nvoid {src.entry}(void **args, const int64_t *strides) {{ {body} }}\n")
    return replace(src, text=text)


def _uol(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "uol_cli.main", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def crash_cc(tmp_path_factory):
    path = tmp_path_factory.mktemp("cc") / "crashcc"
    path.write_text(CRASH_CC)
    path.chmod(0o755)
    return str(path)


LONG_ONLY = pytest.mark.skipif(not LONG, reason="UOL_LONG=1 runs every repetition")
# The default run keeps one real case of every fault kind (CLI, worker or IDE); UOL_LONG=1 runs
# every fault through every path.
CLI_CASES = [pytest.param("crash_cc", None, "crashed (SIGSEGV)", id="compiler-crash"),
             pytest.param("/nonexistent/gcc", None, "not usable", id="gcc-missing",
                          marks=LONG_ONLY),
             pytest.param(None, "M=100000,N=100000,K=100000", "over the budget",
                          id="huge-sizes", marks=LONG_ONLY)]


@pytest.mark.parametrize("cc, sizes, says", CLI_CASES)
def test_cli_compiler_faults_and_huge_sizes(crash_cc, cc, sizes, says):
    env = {"UOL_CC": crash_cc if cc == "crash_cc" else cc} if cc else {}
    sizes = sizes or ",".join(f"{k}={v}" for k, v in SIZES.items())
    res = _uol("run", "matmul", "--shape", sizes, "--target", target_name(), env=env)
    assert res.returncode == 2 and says in res.stderr, (env, res.stderr[-600:])
    assert "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def worker_kernel():
    import uol_core
    from uol_core.runtime.worker import Worker

    odl = op_text("matmul")
    k = uol_core.compile(uol_core.parse(odl), shapes=SIZES, target=target_name())
    with Worker(timeout_s=60) as worker:
        yield worker, k.kernel_source, odl


@pytest.mark.parametrize("fault", [
    pytest.param("segfault", marks=LONG_ONLY), "hang", "huge_alloc",
    pytest.param("wrong", marks=LONG_ONLY)])
def test_worker_survives_every_planted_kernel_fault(worker_kernel, fault):
    """What `uol run` and the tuner use: each fault is a result with its cause, then a good run."""
    from uol_core.runtime.worker import make_job

    worker, source, odl = worker_kernel
    job = make_job(plant(source, fault), odl, "matmul.odl", SIZES, min_seconds=0.01)
    res = worker.run(job, 4.0 if fault == "hang" else 60.0)
    assert res["status"] != "ok" and EXPECT[fault] in res["reason"], (fault, res)
    good = worker.run(make_job(source, odl, "matmul.odl", SIZES, min_seconds=0.01))
    assert good["status"] == "ok", (fault, good)


def _ide_run(base: str, state: dict) -> str:
    resp = post(base, run_body(state))
    assert resp.status_code == 200, resp.text[-500:]
    return response_text(resp)


def _ide_ok(base: str, state: dict) -> None:
    """The next normal Run works (no fault message, verified)."""
    text = _ide_run(base, state)
    assert "wrong result" not in text and "\\u2713 correct" in text, text[:800]


@pytest.fixture(scope="module")
def ide_state(ide):
    state = studio_state(op_text("matmul"), SIZES)
    _ide_ok(ide, state)
    return state


@pytest.mark.parametrize("fault", [
    "segfault", pytest.param("hang", marks=LONG_ONLY),
    pytest.param("huge_alloc", marks=LONG_ONLY), "wrong"])
def test_ide_reports_kernel_fault_and_keeps_serving(ide, ide_state, monkeypatch, fault):
    from app.services import kernels, runner

    real_emit, real_worker = kernels.emit, runner._c_worker
    # a short timeout for the planted hang only (the page's default is minutes)
    timeout = 5.0 if fault == "hang" else 60.0
    monkeypatch.setattr(runner, "_c_worker",
                        lambda req, _t, slot: real_worker(req, timeout, slot))

    def planted(*a, **kw):
        op, sizes, src, knobs, text = real_emit(*a, **kw)
        return op, sizes, plant(src, fault), knobs, text

    monkeypatch.setattr(kernels, "emit", planted)
    text = _ide_run(ide, ide_state)
    assert EXPECT[fault] in text, (fault, text[:800])
    monkeypatch.undo()
    _ide_ok(ide, ide_state)  # the next run works


@pytest.mark.parametrize("cc, says", [
    pytest.param("/nonexistent/gcc", "not usable", id="gcc-missing"),
    pytest.param("crash_cc", "crashed (SIGSEGV)", id="compiler-crash", marks=LONG_ONLY)])
def test_ide_reports_compiler_fault(ide, ide_state, monkeypatch, tmp_path, crash_cc, cc, says):
    from app.services import runner

    _restart_worker(runner)
    monkeypatch.setenv("UOL_CC", crash_cc if cc == "crash_cc" else cc)
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cc-cache"))  # nothing cached: gcc runs
    try:
        text = _ide_run(ide, ide_state)
        assert says in text, (cc, text[:800])
    finally:
        monkeypatch.undo()
        _restart_worker(runner)
    _ide_ok(ide, ide_state)


def test_ide_reports_huge_sizes(ide, ide_state):
    huge = dict(ide_state, sizes={"M": 100000, "N": 100000, "K": 100000})
    assert "over the budget" in _ide_run(ide, huge)


@pytest.mark.parametrize("fault, says", [
    ("segfault", "SIGSEGV"), pytest.param("hang", "timeout", marks=LONG_ONLY)])
def test_ide_run_child_fault_hook(ide, ide_state, monkeypatch, fault, says):
    from app.services import runner

    monkeypatch.setenv("UOL_FAULT_INJECT", fault)
    monkeypatch.setattr(runner, "_worker", lambda req, _t, w=runner._worker: w(req, 20.0))
    assert says in _ide_run(ide, ide_state), fault
    monkeypatch.undo()
    _ide_ok(ide, ide_state)


def _restart_worker(runner) -> None:
    """Fresh pool workers read UOL_CC and UOL_CACHE_DIR again (spawned, not forked); every
    slot is held while its worker closes, so no job of the IDE is using it."""
    from app.services.job_queue import pool_size, slot_held

    for slot in range(pool_size()):
        with slot_held(slot):
            worker = runner._WORKERS.pop(slot, None)
            if worker is not None:
                worker.close()
