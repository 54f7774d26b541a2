"""Private caches: per-user folders (0700, ours), verified artefacts, job folders removed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (no GPU here)

from uol_core.runtime import usercache
from uol_core.runtime.usercache import UnsafeCacheError, private_dir, read_verified


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(usercache.CACHE_ENV, str(root))
    return root


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_default_root_follows_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv(usercache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert usercache.user_cache_root() == tmp_path / "xdg" / "uol"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert usercache.user_cache_root() == tmp_path / "home" / ".cache" / "uol"


def test_private_folders_are_created_0700(cache_root):
    folder = private_dir("triton")
    assert folder == cache_root / "triton"
    assert _mode(folder) == 0o700 and os.stat(folder).st_uid == os.geteuid()
    os.chmod(folder, 0o755)  # readable by others: tightened on the next use
    private_dir("triton")
    assert _mode(folder) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_group_or_world_writable_cache_is_refused(cache_root, mode):
    cache_root.mkdir()
    os.chmod(cache_root, mode)
    with pytest.raises(UnsafeCacheError, match="can be written by other users"):
        private_dir("triton")
    assert not (cache_root / "triton").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a folder to another user needs root")
def test_cache_owned_by_someone_else_is_refused(cache_root):
    cache_root.mkdir(mode=0o700)
    os.chown(cache_root, 65534, 65534)  # nobody
    with pytest.raises(UnsafeCacheError, match="not to you"):
        private_dir("profiles")


@pytest.mark.parametrize("part", ["..", "a/b", "", "x\0y"])
def test_cache_folder_names_are_plain(cache_root, part):
    with pytest.raises(ValueError):
        private_dir(part)


def test_read_verified_trusts_bytes_owner_and_mode_only(cache_root):
    folder = private_dir("t")
    good = folder / "a.py"
    usercache.write_atomic(good, b"x = 1\n")
    assert _mode(good) == 0o600 and read_verified(good, b"x = 1\n")
    assert not read_verified(good, b"x = 2\n")  # other bytes than the name promises
    assert not read_verified(good, b"x = 1")  # a prefix is not the artefact
    os.chmod(good, 0o666)
    assert not read_verified(good, b"x = 1\n")  # anybody could have changed it
    link = folder / "b.py"
    link.symlink_to(good)
    os.chmod(good, 0o600)
    assert not read_verified(link, b"x = 1\n")  # a link may point anywhere
    assert not read_verified(folder / "missing.py", b"")


def test_planted_triton_module_is_never_imported(cache_root, tmp_path):
    """Plant code at the exact path the runner computes: it must not run, the kernel must."""
    pytest.importorskip("triton")
    import hashlib

    from uol_core.backends.triton import emit
    from uol_core.backends.triton.expr import safe
    from uol_core.ops import load_op
    from uol_core.runtime import triton_runner

    op = load_op("axpy")
    source = emit(op, {})
    digest = hashlib.sha256(source.text.encode()).hexdigest()[:16]
    path = triton_runner.cache_dir() / f"{safe(source.op_name)}_{digest}.py"
    marker = tmp_path / "planted-code-ran"
    path.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n" + source.text)
    triton_runner._MODULES.clear()
    result = triton_runner.verify(source, op, triton_runner.random_inputs(op, {d: 9 for d in
                                                                             op.dims}))
    assert result.ok and not marker.exists()
    assert path.read_text() == source.text and _mode(path) == 0o600


def test_job_folders_of_dead_processes_are_swept(cache_root):
    root = private_dir("jobs")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = root / f"job-{dead.stdout.strip()}-abc"
    stale.mkdir()
    (stale / "cache.db").write_text("left by a killed server")
    alive = root / f"job-{os.getpid()}-xyz"
    alive.mkdir()
    assert usercache.sweep_stale_jobs(root) == [stale]
    assert not stale.exists() and alive.exists()


def test_job_folder_is_private_and_removed_at_exit(cache_root):
    script = ("from uol_core.runtime.usercache import job_dir\n"
              "import os, stat\n"
              "d = job_dir('jobs')\n"
              "(d / 'result.pickle').write_bytes(b'job output')\n"
              "print(d, oct(stat.S_IMODE(os.stat(d).st_mode)))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={**os.environ, usercache.CACHE_ENV: str(cache_root)})
    folder, mode = out.stdout.split()
    assert folder.startswith(str(cache_root / "jobs")) and mode == "0o700"
    assert not os.path.exists(folder)  # removed when the process exited
    assert list((cache_root / "jobs").iterdir()) == []


def test_profile_reports_live_in_the_private_cache(cache_root):
    from app.services import profiling

    root = profiling._root()
    assert root == cache_root / "profiles" and _mode(root) == 0o700
