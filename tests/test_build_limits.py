"""Bounded compiler runs: a build past its time or memory limit is a one-line BuildError naming
the kernel's config and the limit, and leaves no compiler process (cc1) behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from uol_core.backends.base import KernelSource
from uol_core.runtime import build as build_module
from uol_core.runtime.build import BuildError, BuildLimits, build

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not Path("/proc").is_dir(),
                                reason="needs gcc and a /proc file system (Linux)")

# Full unrolling of a 4000-step loop with a divide grows cc1 past 100 MiB (the memory limit's
# test) and keeps it busy for 1.4-10 s at -O3 on 2-core cloud machines: a fast Zen 5 core ends
# near 1.5 s, so the time limit's test compiles 12000 steps (tens of seconds anywhere).
SLOW_C = """#include <stdint.h>
void uol_slow(void **args, const int64_t *strides)
{
    const float *restrict x = (const float *)args[0];
    float *restrict y = (float *)args[1];
    float s = 0.0f;
    #pragma GCC unroll 65534
    for (int i = 0; i < 4000; ++i)
        s += x[i] * x[i + 1] / (x[i + 2] + 1.0f);
    y[0] = s;
}
"""


def slow_source(steps: int = 4000) -> KernelSource:
    return KernelSource(SLOW_C.replace("4000", str(steps)), "c", "uol_slow", "slow",
                        {"mr": 4, "nr": 16}, {}, {"args": ["X", "Y"]})


def compilers_of(folder: Path) -> list[int]:
    """Pids of live compiler processes (cc1, as, ld, gcc) working on files under `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # the process ended while we looked
            continue
        if state != "Z" and any(str(folder).encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


class CompilerWatch:
    """Polls /proc during a build: did a compiler run on our files, and is any left after?"""

    def __init__(self, folder: Path) -> None:
        self.folder, self.seen, self._stop = folder, set(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.seen.update(compilers_of(self.folder))
            time.sleep(0.05)

    def __enter__(self) -> CompilerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def survivors(self, grace_s: float = 2.0) -> list[int]:
        """Compilers still alive after `grace_s` (a SIGKILLed process needs a moment to go)."""
        deadline = time.monotonic() + grace_s
        while (alive := compilers_of(self.folder)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in alive:  # do not leave them running if the test fails
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        return alive


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_build_past_its_time_limit_leaves_no_compiler_behind(cache):
    with CompilerWatch(cache) as watch, pytest.raises(BuildError) as caught:
        build(slow_source(12000), BuildLimits(timeout_s=1.5, memory_mb=0))
    message = str(caught.value)
    assert "time limit of 1.5 s" in message and "UOL_BUILD_TIMEOUT_S" in message
    assert "slow" in message and "config mr=4,nr=16" in message
    assert "\n" not in message
    assert watch.seen, "the compiler never ran on the test's files: the test proves nothing"
    assert watch.survivors() == []


def test_a_build_past_its_memory_limit_is_a_clear_error(cache):
    with CompilerWatch(cache) as watch, pytest.raises(BuildError) as caught:
        build(slow_source(), BuildLimits(timeout_s=120, memory_mb=100))
    message = str(caught.value)
    assert "memory limit of 100 MiB" in message and "UOL_BUILD_MEMORY_MB" in message
    assert "config mr=4,nr=16" in message and "\n" not in message
    assert watch.survivors() == []


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_a_build_whose_starter_dies_is_still_stopped_at_its_limit(cache):
    """A worker killed mid-build cannot stop its compiler: the `timeout` inside the compiler's
    group does, a few seconds after the limit (12000 steps compile for a minute or more)."""
    starter = subprocess.Popen([sys.executable, "-c", (
        "from tests.test_build_limits import slow_source\n"
        "from uol_core.runtime.build import BuildLimits, build\n"
        "build(slow_source(12000), BuildLimits(timeout_s=2.0, memory_mb=0))\n")],
        cwd=Path(__file__).resolve().parents[1], env=dict(os.environ, UOL_CACHE_DIR=str(cache)))
    deadline = time.monotonic() + 60
    while not [p for p in compilers_of(cache) if p != starter.pid]:
        assert time.monotonic() < deadline and starter.poll() is None, "the build never started"
        time.sleep(0.05)
    started = time.monotonic()
    starter.kill()
    starter.wait()
    watch = CompilerWatch(cache)
    left = watch.survivors(grace_s=2.0 + build_module.BACKSTOP_GRACE_S + 5.0)
    assert left == [] and time.monotonic() - started < 2.0 + build_module.BACKSTOP_GRACE_S + 5.0


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("UOL_BUILD_TIMEOUT_S", "12.5")
    monkeypatch.setenv("UOL_BUILD_MEMORY_MB", "0")
    assert BuildLimits.from_env() == BuildLimits(timeout_s=12.5, memory_mb=0)
    monkeypatch.delenv("UOL_BUILD_TIMEOUT_S")
    monkeypatch.delenv("UOL_BUILD_MEMORY_MB")
    assert BuildLimits.from_env() == BuildLimits()
    monkeypatch.setenv("UOL_BUILD_MEMORY_MB", "lots")
    with pytest.raises(BuildError, match="UOL_BUILD_MEMORY_MB"):
        BuildLimits.from_env()


def test_an_ordinary_kernel_builds_within_the_default_limits(cache):
    src = KernelSource(SLOW_C.replace("4000", "16"), "c", "uol_slow", "quick", {}, {},
                       {"args": ["X", "Y"]})
    assert build(src).is_file()


def test_the_cli_prints_one_line_naming_the_limit(cache, monkeypatch):
    """The config of the original report: cc1 grew to 3.7 GB and the CLI ended in a traceback."""
    from uol_cli.main import app

    monkeypatch.setenv("UOL_BUILD_TIMEOUT_S", "2")
    with CompilerWatch(cache) as watch:
        result = CliRunner().invoke(app, [
            "compile", "matmul", "--shape", "M=1024,N=1024,K=1024",
            "--config", "mr=128,mc=128,nr=1024,nc=1024,kc=64,ku=64"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "time limit of 2 s" in lines[0] and "mr=128" in lines[0] and "nr=1024" in lines[0]
    assert watch.survivors() == []
