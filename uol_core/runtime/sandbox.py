"""Run Python that a client sent (a pasted Triton kernel, a graph's factory calls) in a sandbox.

The parent (`run_sandboxed`) makes a private working directory, a scrubbed environment and a
new session, and starts `python -m uol_core.runtime.sandbox TARGET`. This launcher then
closes the process in, before TARGET (a module whose `main()` reads the request on stdin)
sees the request, strongest layer first; each layer says whether the OS allowed it:

- network: a new, empty network namespace (unshare(CLONE_NEWNET); as non-root inside a new
  user namespace);
- filesystem: a new mount namespace in which every mount is read-only except the private
  directory (so even code that bypasses Python, e.g. C extensions, cannot write elsewhere);
- user: when the server runs as root, the sandbox drops to `nobody` (RLIMIT_NPROC does not
  bind root, and root ignores file permissions);
- limits: RLIMIT_CPU, RLIMIT_AS (beyond what the interpreter holds after its imports),
  RLIMIT_FSIZE, RLIMIT_NPROC, no core files;
- an audit hook (PEP 578) that refuses process creation, sockets, native library loading and
  file writes outside the private directory; a second layer, reported per refusal.

The parent kills the whole session on its wall-clock limit, copies back only the regular files
the caller asked for, removes the directory, and reports which limit ended the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from uol_core.runtime import sandbox_os

ISOLATION_MARK = "@@SANDBOX@@"  # the launcher's report line on stderr (before user code runs)
REFUSAL_MARK = "@@REFUSED@@"  # one stderr line per refused action
MAX_KEPT_FILE_BYTES = 64 << 20
NOBODY = 65534


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    cpu_s: int = 60  # CPU seconds (RLIMIT_CPU: SIGXCPU, then SIGKILL one second later)
    memory_mb: int = 2048  # address space beyond the interpreter's own after its imports
    file_mb: int = 64  # largest file the run may write (RLIMIT_FSIZE)
    processes: int = 64  # processes and threads of the sandbox's user (RLIMIT_NPROC)
    wall_s: float = 120.0  # the parent stops the whole session after this long

    def describe(self) -> str:
        return (f"CPU {self.cpu_s} s, memory {self.memory_mb} MiB, files {self.file_mb} MiB, "
                f"{self.processes} processes, wall {self.wall_s:.0f} s")


# Variables a sandboxed interpreter may inherit; everything else of the server's is dropped.
PASSED_ENV = ("LANG", "LC_ALL", "UOL_MEM_BUDGET_MB")


def sandbox_env(private: Path, extra: dict | None) -> dict[str, str]:
    """The child's whole environment: a minimal PATH, HOME/TMPDIR in the private directory,
    one thread per library, the code's import path, and the caller's explicit extras."""
    code_root = Path(__file__).resolve().parents[2]
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(PATH="/usr/bin:/bin", HOME=str(private), TMPDIR=str(private), USER="sandbox",
               PYTHONPATH=str(code_root), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               TRITON_CACHE_DIR=str(private / ".triton"), MPLCONFIGDIR=str(private))
    env.update(extra or {})
    return env


def run_sandboxed(target: str, request: dict, mark: str, *, limits: Limits = Limits(),
                  preload: tuple[str, ...] = (), env: dict | None = None,
                  keep: dict[str, Path] | None = None, timed_out: str = "",
                  confine_files: bool = True) -> dict:
    """Run module `target`'s main() in the sandbox on `request`; the JSON it prints after `mark`.

    `keep` maps file names the child writes in its directory to where they are copied after
    the run (regular files only, never links). The result carries `sandbox`: the isolation
    applied, the limits, refused actions and `limit_hit` when a limit ended the run.
    `confine_files=False` is for workers that run no client Python but need a compiler (a
    graph run): network, limits, environment and working directory stay confined, while the
    read-only filesystem, the switch to nobody and the audit hook are left out.
    """
    private = Path(tempfile.mkdtemp(prefix="uol-sandbox-"))
    argv = [sys.executable, "-m", "uol_core.runtime.sandbox",
            "--limits", json.dumps(asdict(limits)), "--preload", ",".join(preload),
            "--confine-files", "1" if confine_files else "0", target]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=private,
                                env=sandbox_env(private, env), start_new_session=True)
        try:
            out, err = proc.communicate(json.dumps(request), timeout=limits.wall_s)
            wall_hit = False
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            out, err = proc.communicate()
            wall_hit = True
        report = _report(proc.returncode, out, err, limits, wall_hit)
        if mark in out and not wall_hit:
            try:
                result = json.loads(out.rsplit(mark, 1)[1].splitlines()[0])
            except (json.JSONDecodeError, IndexError):
                result = {"ok": False, "error": "the sandboxed worker's result was unreadable"}
        else:
            result = {"ok": False, "error": _failure(report, timed_out, err)}
        if report["limit_hit"] and result.get("ok") is False and report["limit_hit"] not in \
                result.get("error", ""):
            result["error"] = f"{result.get('error', '')} [{report['limit_hit']}]".strip()
        if result.get("ok"):
            _copy_back(private, keep or {})
        result["sandbox"] = report
        return result
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # the child and anything it started


def _report(code: int, out: str, err: str, limits: Limits, wall_hit: bool) -> dict:
    isolation = []
    for line in err.splitlines():
        if line.startswith(ISOLATION_MARK):
            isolation = json.loads(line[len(ISOLATION_MARK):])
            break  # the first one: printed before user code could print its own
    refused = [line[len(REFUSAL_MARK):] for line in err.splitlines()
               if line.startswith(REFUSAL_MARK)][:20]
    hit = None
    if wall_hit:
        hit = f"wall-clock limit of {limits.wall_s:.0f} s reached: the sandbox was stopped"
    elif code in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in err:
        hit = f"CPU time limit of {limits.cpu_s} s reached (RLIMIT_CPU)"
    elif code == -signal.SIGXFSZ:
        hit = f"file size limit of {limits.file_mb} MiB reached (RLIMIT_FSIZE)"
    elif "MemoryError" in err or "MemoryError" in out or "std::bad_alloc" in err:
        hit = f"memory limit of {limits.memory_mb} MiB reached (RLIMIT_AS)"
    elif "Resource temporarily unavailable" in err or "can't start new thread" in err:
        hit = f"process limit of {limits.processes} reached (RLIMIT_NPROC)"
    return {"isolation": isolation, "limits": asdict(limits), "refused": refused,
            "limit_hit": hit, "exit_status": code}


def _failure(report: dict, timed_out: str, err: str) -> str:
    if report["limit_hit"]:
        lead = timed_out.format(timeout=report["limits"]["wall_s"]) if (
            timed_out and report["limit_hit"].startswith("wall")) else report["limit_hit"]
        return lead
    code = report["exit_status"]
    status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    tail = "\n".join(line for line in err.splitlines()
                     if not line.startswith((ISOLATION_MARK, REFUSAL_MARK)))[-600:]
    return f"the sandboxed worker ended with {status} and no result: {tail}".strip()


def _copy_back(private: Path, keep: dict[str, Path]) -> None:
    """Copy the named regular files out; a link or an oversized file is skipped, never followed."""
    for name, dest in keep.items():
        try:
            fd = os.open(private / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as src:
            info = os.fstat(src.fileno())
            if not (info.st_mode & 0o170000 == 0o100000 and info.st_size <= MAX_KEPT_FILE_BYTES):
                continue
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                shutil.copyfileobj(src, out)


# ------------------------------------------------------------------ the launcher (child side)


def _launch(argv: list[str]) -> None:
    """`--limits JSON --preload a,b TARGET`: isolate this process, then run TARGET.main()."""
    import importlib

    limits = Limits(**json.loads(argv[argv.index("--limits") + 1]))
    preload = [m for m in argv[argv.index("--preload") + 1].split(",") if m]
    confine = argv[argv.index("--confine-files") + 1] == "1"
    target = argv[-1]
    private = Path.cwd().resolve()
    applied = sandbox_os.isolate_namespaces(private, read_only=confine)
    sandbox_os.set_limits(limits.cpu_s, limits.file_mb, limits.processes)
    for name in preload:  # before the memory cap and the user switch: the runtime's own cost
        importlib.import_module(name)
    module = importlib.import_module(target)
    applied.append(sandbox_os.cap_memory(limits.memory_mb))
    if confine:
        applied.append(sandbox_os.drop_privileges(private, NOBODY, limits.processes))
    sys.stderr.write(ISOLATION_MARK + json.dumps(applied) + "\n")
    sys.stderr.flush()
    if confine:
        sandbox_os.install_audit_hook(private, REFUSAL_MARK)
    module.main()


if __name__ == "__main__":
    _launch(sys.argv[1:])
