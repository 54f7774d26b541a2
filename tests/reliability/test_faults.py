"""Planted faults: each gives its own message in the CLI and the IDE, and the next run works."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rel_helpers import REPO, post, response_text, run_body, studio_state, target_name

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


def test_cli_compiler_faults_and_huge_sizes(crash_cc):
    shape = ",".join(f"{k}={v}" for k, v in SIZES.items())
    cases = [({"UOL_CC": crash_cc}, shape, "crashed (SIGSEGV)"),
             ({"UOL_CC": "/nonexistent/gcc"}, shape, "not usable"),
             ({}, "M=100000,N=100000,K=100000", "over the budget")]
    for env, sizes, says in cases:
        res = _uol("run", "matmul", "--shape", sizes, "--target", target_name(), env=env)
        assert res.returncode == 2 and says in res.stderr, (env, res.stderr[-600:])
        assert "Traceback" not in res.stderr


def test_worker_survives_every_planted_kernel_fault():
    """What `uol run` and the tuner use: each fault is a result with its cause, then a good run."""
    import uol_core
    from uol_core.runtime.worker import Worker, make_job

    odl = op_text("matmul")
    k = uol_core.compile(uol_core.parse(odl), shapes=SIZES, target=target_name())
    with Worker(timeout_s=60) as worker:
        for fault, says in EXPECT.items():
            job = make_job(plant(k.kernel_source, fault), odl, "matmul.odl", SIZES,
                           min_seconds=0.01)
            res = worker.run(job, 4.0 if fault == "hang" else 60.0)
            assert res["status"] != "ok" and says in res["reason"], (fault, res)
            good = worker.run(make_job(k.kernel_source, odl, "matmul.odl", SIZES,
                                       min_seconds=0.01))
            assert good["status"] == "ok", (fault, good)


def _ide_run(base: str, state: dict) -> str:
    resp = post(base, run_body(state))
    assert resp.status_code == 200, resp.text[-500:]
    return response_text(resp)


def test_ide_reports_each_fault_and_keeps_serving(ide, monkeypatch, crash_cc):
    from app.services import kernels, runner

    state = studio_state(op_text("matmul"), SIZES)
    assert "✓" in _ide_run(ide, state) or "ok" in _ide_run(ide, state).lower()
    real_emit, real_worker = kernels.emit, runner._c_worker
    # a short timeout for the planted hang (the page's default is minutes)
    monkeypatch.setattr(runner, "_c_worker", lambda req, _t: real_worker(req, 5.0))
    for fault, says in EXPECT.items():
        def planted(*a, _fault=fault, **kw):
            op, sizes, src, knobs, text = real_emit(*a, **kw)
            return op, sizes, plant(src, _fault), knobs, text

        monkeypatch.setattr(kernels, "emit", planted)
        text = _ide_run(ide, state)
        assert says in text, (fault, text[:800])
        monkeypatch.setattr(kernels, "emit", real_emit)
        assert "wrong result" not in _ide_run(ide, state)  # the next run works
    for env, says in (({"UOL_CC": crash_cc}, "crashed (SIGSEGV)"),
                      ({"UOL_CC": "/nonexistent/gcc"}, "not usable")):
        _restart_worker(runner)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("UOL_CACHE_DIR", str(REPO / "tests" / "reliability" / ".cc-cache"))
        text = _ide_run(ide, state)
        assert says in text, (env, text[:800])
        monkeypatch.undo()
        monkeypatch.setattr(runner, "_c_worker", lambda req, _t: real_worker(req, 60.0))
        _restart_worker(runner)
    huge = dict(state, sizes={"M": 100000, "N": 100000, "K": 100000})
    assert "over the budget" in _ide_run(ide, huge)
    for fault, says in (("segfault", "SIGSEGV"), ("hang", "timeout")):  # run_child's hook
        monkeypatch.setenv("UOL_FAULT_INJECT", fault)
        monkeypatch.setattr(runner, "_worker", lambda req, _t, w=runner._worker: w(req, 20.0))
        assert says in _ide_run(ide, state), fault
        monkeypatch.undo()
    assert "wrong result" not in _ide_run(ide, state)


def _restart_worker(runner) -> None:
    """A fresh worker process reads UOL_CC and UOL_CACHE_DIR again (spawned, not forked)."""
    with runner._WORKER_LOCK:
        for w in runner._WORKER:
            w.close()
        runner._WORKER.clear()
