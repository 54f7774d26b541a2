"""The Debugger's own-kernel mode runs the posted Python only in the sandbox: the payload's
writes outside it do not happen, refusals and limits are reported, the private folder goes."""

from __future__ import annotations

import glob
import importlib.util
import os
import tempfile

import pytest

from app.services import debugging
from uol_core.runtime.sandbox import Limits

# only the sandboxed child imports triton: importing it here, before the interpreter is
# switched on, would leave this process unable to run Triton kernels in later tests
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton is not installed")

CALL = debugging.EXAMPLE_CALL


@pytest.fixture(autouse=True)
def private_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_JOB_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))


def _sandbox_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "uol-sandbox-*")))


def test_example_kernel_still_traces_in_the_sandbox():
    res = debugging.trace_user_kernel(debugging.EXAMPLE_KERNEL, **CALL)
    assert res["ok"], res
    assert [f["line"] for f in res["summary"]["findings"]] == [8]
    assert "tl.load" in debugging.source_of(res["id"])
    assert any(line.startswith("network:") for line in res["sandbox"]["isolation"])


def test_os_system_payload_does_not_write_outside(tmp_path):
    target = tmp_path / "pwned"
    before = _sandbox_dirs()
    payload = f'import os\nos.system("id > {target}")\n' + debugging.EXAMPLE_KERNEL
    res = debugging.trace_user_kernel(payload, **CALL)
    assert not target.exists()
    assert res["ok"] is False
    assert "os.system" in res["error"] and "refused" in res["error"]
    assert any("os.system" in r for r in res["sandbox"]["refused"])
    assert _sandbox_dirs() <= before  # the private directory was removed


def test_write_past_the_audit_hook_meets_a_read_only_filesystem(tmp_path):
    """numpy's tofile writes through C stdio (no audit event): only the OS layer stops it."""
    target = tmp_path / "planted.bin"
    payload = (f"import numpy\nnumpy.arange(4).tofile({str(target)!r})\n"
               + debugging.EXAMPLE_KERNEL)
    res = debugging.trace_user_kernel(payload, **CALL)
    isolation = " ".join(res["sandbox"]["isolation"])
    if "read-only everywhere" not in isolation and "user: nobody" not in isolation:
        pytest.skip(f"this OS gave the sandbox no filesystem isolation: {isolation}")
    assert not target.exists()
    assert res["ok"] is False


def test_cpu_limit_is_hit_and_reported():
    payload = "while True:\n    pass\n" + debugging.EXAMPLE_KERNEL
    res = debugging.trace_user_kernel(payload, **CALL,
                                      limits=Limits(cpu_s=2, memory_mb=1024, wall_s=90))
    assert res["ok"] is False
    assert res["sandbox"]["limit_hit"].startswith("CPU time limit of 2 s")
    assert "CPU time limit" in res["error"]


def test_memory_limit_is_hit_and_reported():
    payload = "hog = bytearray(3 << 30)\n" + debugging.EXAMPLE_KERNEL
    res = debugging.trace_user_kernel(payload, **CALL,
                                      limits=Limits(cpu_s=60, memory_mb=512, wall_s=90))
    assert res["ok"] is False
    assert "memory limit of 512 MiB" in res["error"]


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("UOL_SECRET_PROBE", "s3cret")
    payload = ("import os\nassert 'UOL_SECRET_PROBE' not in os.environ, 'leaked'\n"
               "raise SystemExit('env ok ' + os.environ['HOME'])\n" + debugging.EXAMPLE_KERNEL)
    res = debugging.trace_user_kernel(payload, **CALL)
    assert "leaked" not in res["error"] and "uol-sandbox-" in res["error"], res["error"]
