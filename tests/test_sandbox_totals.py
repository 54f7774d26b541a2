"""A sandboxed run's limits are totals over the whole run (issue 47, item 4), and the sandbox's
user can read the interpreter or the run is refused with one line saying why (item 7)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from uol_core.runtime.sandbox import Limits, run_sandboxed

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")


@pytest.fixture(autouse=True)
def private_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_JOB_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))


def payload(do: str, limits: Limits, confine: bool = True, **request) -> dict:
    """Run one of tests/sandbox_payloads.py's attackers in the real sandbox."""
    return run_sandboxed("sandbox_payloads", {"do": do, **request}, "@@PAYLOAD@@",
                         limits=limits, env={"PYTHONPATH": f"{REPO}:{TESTS}"},
                         confine_files=confine)


def _line(res: dict, start: str) -> str:
    return next((line for line in res["sandbox"]["isolation"] if line.startswith(start)), "")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# ------------------------------------------------------------------ memory


@pytest.mark.parametrize("means", ["cgroup", "watcher"])
def test_memfd_pages_count_against_the_memory_limit(monkeypatch, means):
    """4 x 128 MiB of memfd against a 256 MiB limit: RLIMIT_AS does not see these pages, the
    run's cgroup (or, without one, the sandbox's watcher) must."""
    if means == "watcher":
        monkeypatch.setenv("UOL_SANDBOX_CGROUP", "0")
    limits = Limits(cpu_s=60, memory_mb=256, file_mb=256, processes=16, wall_s=90)
    res = payload("memfd", limits, count=4, mib=128, hold_s=5)
    total = _line(res, "memory total")
    if means == "cgroup" and total.startswith("memory total: no cgroup"):
        pytest.skip(f"no cgroup memory total here: {total}")
    assert res["ok"] is False, "the run held 512 MiB of memfd pages under a 256 MiB limit"
    assert "memory limit of 256 MiB reached" in res["error"]
    assert "\n" not in res["error"]


# ------------------------------------------------------------------ processes


@pytest.mark.parametrize("confine", [True, False], ids=["confined", "compiler run"])
@pytest.mark.parametrize("means", ["cgroup", "no cgroup"])
def test_a_setsid_child_does_not_outlive_the_run(monkeypatch, confine, means):
    """A child in a session of its own (started past the audit hook) dies with the run."""
    if means == "no cgroup":
        monkeypatch.setenv("UOL_SANDBOX_CGROUP", "0")
    if not Path("/usr/bin/setsid").exists():
        pytest.skip("no /usr/bin/setsid on this host")
    limits = Limits(cpu_s=30, memory_mb=512, file_mb=64, processes=16, wall_s=30)
    done: dict = {}
    runner = threading.Thread(target=lambda: done.update(
        payload("setsid_child", limits, confine=confine)), daemon=True)
    runner.start()
    runner.join(60)  # the child holds the run's stdout: a parent that waits for EOF hangs
    assert not runner.is_alive(), "the run never ended: its setsid child kept its pipes open"
    res = done
    pid = res.get("pid")
    try:
        assert res["ok"], res.get("error")
        stop = _line(res, "stop:")
        if "session only" in stop:
            pytest.skip(f"this host gives the sandbox no way to find setsid children: {stop}")
        deadline = time.monotonic() + 3
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"the setsid child {pid} outlived the run ({stop})"
    finally:
        if pid and _alive(pid):
            os.kill(pid, 9)


# ------------------------------------------------------------------ disk


@pytest.mark.parametrize("means", ["tmpfs", "watcher"])
def test_the_private_folder_has_a_disk_quota(monkeypatch, means):
    """Six files of 32 MiB (each under the 64 MiB file limit) against a 64 MiB quota."""
    if means == "watcher":
        monkeypatch.setenv("UOL_SANDBOX_TMPFS", "0")
    limits = Limits(cpu_s=60, memory_mb=1024, file_mb=64, processes=16, wall_s=90, disk_mb=64)
    res = payload("fill_disk", limits, files=6, mib=32)
    disk = _line(res, "disk:")
    if means == "tmpfs" and "tmpfs" not in disk:
        pytest.skip(f"no tmpfs quota here: {disk}")
    assert res["ok"] is False, f"192 MiB written under a 64 MiB quota ({disk})"
    assert "disk quota of 64 MiB" in res["error"]
    assert "\n" not in res["error"]


# ------------------------------------------------------------------ the sandbox user's reach


@pytest.fixture
def open_dir():
    """A folder every user can reach (pytest's own tmp_path sits under a 0700 folder)."""
    from uol_core.runtime import sandbox_reach

    path = Path(tempfile.mkdtemp(prefix="uol-reach-"))
    path.chmod(0o755)
    stranger = os.getuid() + 4242
    if sandbox_reach.first_unreadable([path], stranger, [stranger]):
        shutil.rmtree(path)
        pytest.skip(f"the temporary folder {path.parent} is closed to other users")
    yield path
    shutil.rmtree(path)


def test_a_folder_closed_to_others_is_named_with_its_fix(open_dir):
    """The check works from the modes alone: as any user, for any user (here a uid that owns
    nothing), a Python under a 0700 home is unreadable, and the message says how to fix it."""
    from uol_core.runtime import sandbox_reach

    tmp_path = open_dir
    home = tmp_path / "home"
    python = home / ".pyenv" / "versions" / "3.11"
    (python / "lib").mkdir(parents=True)
    (python / "lib" / "os.py").write_text("")
    for folder in (tmp_path, home / ".pyenv", home / ".pyenv" / "versions", python,
                   python / "lib"):
        folder.chmod(0o755)
    home.chmod(0o700)
    stranger = os.getuid() + 4242
    blocked = sandbox_reach.first_unreadable([python], stranger, [stranger])
    assert blocked == (python, home, 0o700)
    message = sandbox_reach.unreadable_message("nobody", *blocked)
    assert "\n" not in message
    assert f"cannot read {python}" in message and f"chmod o+x {home}" in message
    home.chmod(0o755)
    assert sandbox_reach.first_unreadable([python, python / "lib" / "os.py"],
                                          stranger, [stranger]) is None
    (python / "lib" / "os.py").chmod(0o600)
    assert sandbox_reach.first_unreadable([python / "lib" / "os.py"], stranger,
                                          [stranger])[1] == python / "lib" / "os.py"


def test_the_owner_bits_apply_to_the_owner(open_dir):
    from uol_core.runtime import sandbox_reach

    folder = open_dir / "mine"
    folder.mkdir()
    folder.chmod(0o700)
    me = os.stat(folder).st_uid
    assert sandbox_reach.first_unreadable([folder], me, []) is None
    assert sandbox_reach.first_unreadable([folder], me + 1, [])[1] == folder


def test_a_run_its_user_cannot_read_is_refused_in_one_line(open_dir):
    """As root, an import path closed to other users (mode 0700, so no cover of the folder
    above helps) means the sandbox's user could not import from it: the run is refused before
    the request is read, with the reason and the fix, never a ModuleNotFoundError later."""
    if os.geteuid() != 0:
        pytest.skip("only a root server switches the sandbox to another user")
    closed = open_dir / "closed"
    closed.mkdir()
    closed.chmod(0o700)
    limits = Limits(cpu_s=30, memory_mb=512, file_mb=64, processes=16, wall_s=60)
    res = run_sandboxed("sandbox_payloads", {"do": "forge", "exit": False}, limits=limits,
                        env={"PYTHONPATH": f"{REPO}:{TESTS}:{closed}"})
    assert res["ok"] is False
    assert f"cannot read {closed} ({closed} is mode 0700)" in res["error"]
    assert "chmod -R o+rX" in res["error"] and "\n" not in res["error"]


@needs_triton
def test_the_library_op_trace_runs_as_the_sandbox_user():
    """The issue's failure: as root with Python under a 0700 home, tracing a library op died on
    `No module named 'importlib.readers'`. Now it traces (the sandbox exposes the interpreter
    to its user) or says in one line why it cannot."""
    from app.services import debugging

    res = debugging.trace_library_op("softmax", {"R": 4, "C": 8})
    assert "No module named" not in str(res.get("error"))
    if not res["ok"]:
        assert "cannot read" in res["error"] and "\n" not in res["error"], res["error"]
    else:
        assert res["summary"]["launches"]
