"""Run Python that a client sent (a pasted Triton kernel, a graph's factory calls) in a sandbox.

The parent (`run_sandboxed`) makes a private working directory, a scrubbed environment, a new
session and the run's totals (`sandbox_session`: a cgroup, a per-run uid, a disk quota, where
the OS allows), and starts `python -m uol_core.runtime.sandbox TARGET`. This launcher then
closes the process in, before TARGET (a module whose `main()` reads the request on stdin)
sees the request, strongest layer first; each layer says whether the OS allowed it:

- network: a new, empty network namespace (unshare(CLONE_NEWNET); as non-root inside a new
  user namespace);
- filesystem: a new mount namespace in which every mount is read-only except the private
  directory (so even code that bypasses Python, e.g. C extensions, cannot write elsewhere);
- user: when the server runs as root, the sandbox drops to a uid of its own (or `nobody`),
  after checking that this user can read the interpreter and the project (`sandbox_reach`);
- limits: RLIMIT_CPU, RLIMIT_AS (beyond what the interpreter holds after its imports),
  RLIMIT_FSIZE, RLIMIT_NPROC, no core files; the cgroup's totals on top;
- an audit hook (PEP 578) that refuses process creation, sockets, native library loading and
  file writes outside the private directory; a second layer, reported per refusal.

Everything the run sends back is untrusted data (`sandbox_io`): capped stdout/stderr, one
result over a channel of its own (`sandbox_channel`), validated; files copied back only when
regular and small. When the run ends, the parent kills every process of it it can find (the
cgroup, the per-run uid, the session), removes the directory, and reports which limit ended it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from uol_core.runtime import sandbox_channel, sandbox_io, sandbox_os, sandbox_reach
from uol_core.runtime.sandbox_session import SandboxRun

ISOLATION_MARK = "@@SANDBOX@@"  # kept for callers; the isolation report now comes on the channel
REFUSAL_MARK = "@@REFUSED@@"  # kept for callers; refusals now come on the channel
MAX_KEPT_FILE_BYTES = 64 << 20
NOBODY = sandbox_os.NOBODY


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    cpu_s: int = 60  # CPU seconds (RLIMIT_CPU: SIGXCPU, then SIGKILL one second later)
    memory_mb: int = 2048  # memory beyond the runtime's own (RLIMIT_AS; the cgroup's total)
    file_mb: int = 64  # largest file the run may write (RLIMIT_FSIZE)
    processes: int = 64  # processes and threads (RLIMIT_NPROC; the cgroup's pids.max)
    wall_s: float = 120.0  # the parent stops the whole run after this long
    disk_mb: int = 512  # all files of the private folder together

    def describe(self) -> str:
        return (f"CPU {self.cpu_s} s, memory {self.memory_mb} MiB, files {self.file_mb} MiB, "
                f"disk {self.disk_mb} MiB, {self.processes} processes, "
                f"wall {self.wall_s:.0f} s")


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


def run_sandboxed(target: str, request: dict, mark: str = "", *, limits: Limits = Limits(),
                  preload: tuple[str, ...] = (), env: dict | None = None,
                  keep: dict[str, Path] | None = None, timed_out: str = "",
                  confine_files: bool = True, schema: object | None = None,
                  switch_user: bool | None = None) -> dict:
    """Run module `target`'s main() in the sandbox on `request`; the one result it sent.

    The result comes only from the sandbox's channel (`serve_one` and
    `sandbox_channel.send_result` write there); `mark` is kept for callers and no longer read.
    `schema` (see `sandbox_io.check`) is what an ok result must look like. `keep` maps file
    names the child writes in its directory to where they are copied after the run (regular
    files of one link only, never links or FIFOs, at most 64 MiB each). The result carries
    `sandbox`: the isolation applied, the limits, refused actions, files not copied back and
    `limit_hit` when a limit ended the run. `confine_files=False` is for workers that run no
    client Python but need a compiler (a graph run): network, limits, totals, environment and
    working directory stay confined; the read-only filesystem, the switch of user and the
    audit hook are left out. `switch_user` (default: as `confine_files`) keeps the switch of
    user on its own: a root caller's run as a uid of its own, with a writable filesystem and
    no audit hook (a remote worker's C kernel job: gcc and the kernel it loads).
    """
    switch = confine_files if switch_user is None else switch_user
    private = Path(tempfile.mkdtemp(prefix="uol-sandbox-"))
    session = SandboxRun(private, limits.memory_mb, limits.disk_mb, limits.processes, switch)
    channel_read, channel_write = os.pipe()
    argv = [sys.executable, "-m", "uol_core.runtime.sandbox",
            "--limits", json.dumps(asdict(limits)), "--preload", ",".join(preload),
            "--confine-files", "1" if confine_files else "0", "--switch-user",
            "1" if switch else "0", "--channel", str(channel_write),
            "--uid", str(session.run_uid or NOBODY), target]
    proc = None
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0, cwd=private,
                                pass_fds=(channel_write,), env=sandbox_env(private, env),
                                start_new_session=True)
        os.close(channel_write)
        channel_write = -1
        session.start(proc.pid)
        deadline = time.monotonic() + limits.wall_s
        out = sandbox_io.pump(proc, json.dumps(request).encode(), channel_read, deadline,
                              session.ready, session.watch)
        session.kill_all()  # always: whatever the run started is stopped with it
        out.stopped = out.stopped or session.disk_over()  # a quick run between two looks
        sandbox_io.drain(proc, channel_read, out)
        proc.wait()
        result, problem = sandbox_io.accept_result(out.channel, schema)
        report = _report(proc.returncode, out, limits, session,
                         str((result or {}).get("error", "")))
        if result is None or out.wall_hit or out.stopped:  # a run that was stopped failed
            result = {"ok": False, "error": problem or (result or {}).get("error")
                      or _failure(report, timed_out, out.stderr.text())}
        if report["limit_hit"] and not result["ok"] and report["limit_hit"] not in \
                result["error"]:
            result["error"] = f"{result['error']} [{report['limit_hit']}]"
        if result.get("ok"):
            report["not_copied"] = sandbox_io.copy_back(private, keep or {},
                                                        MAX_KEPT_FILE_BYTES)
        result["sandbox"] = report
        return result
    finally:
        _clean_up(proc, session, private, channel_read, channel_write)


def _clean_up(proc: subprocess.Popen | None, session: SandboxRun, private: Path,
              *fds: int) -> None:
    if proc is not None:
        session.kill_all()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        proc.wait()
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    session.close()
    shutil.rmtree(private, ignore_errors=True)


def _report(code: int, out: sandbox_io.Outcome, limits: Limits, session: SandboxRun,
            result_error: str) -> dict:
    isolation = out.channel.isolation() or []
    err, text = out.stderr.text(), out.stdout.text() + result_error
    hit = session.hit()
    if out.wall_hit:
        hit = f"wall-clock limit of {limits.wall_s:.0f} s reached: the sandbox was stopped"
    elif out.stopped:
        hit = out.stopped
    elif hit:
        pass
    elif code in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in err:
        hit = f"CPU time limit of {limits.cpu_s} s reached (RLIMIT_CPU)"
    elif code == -signal.SIGXFSZ:
        hit = f"file size limit of {limits.file_mb} MiB reached (RLIMIT_FSIZE)"
    elif "No space left on device" in err + text:
        hit = f"disk quota of {limits.disk_mb} MiB for the private folder reached (tmpfs)"
    elif "MemoryError" in err or "MemoryError" in text or "std::bad_alloc" in err:
        hit = f"memory limit of {limits.memory_mb} MiB reached (RLIMIT_AS)"
    elif "Resource temporarily unavailable" in err or "can't start new thread" in err:
        hit = f"process limit of {limits.processes} reached (RLIMIT_NPROC)"
    return {"isolation": isolation + session.lines(), "limits": asdict(limits),
            "refused": out.channel.refused(), "limit_hit": hit, "exit_status": code,
            "output_dropped": out.stdout.dropped + out.stderr.dropped}


def _failure(report: dict, timed_out: str, err: str) -> str:
    if report["limit_hit"]:
        return timed_out.format(timeout=report["limits"]["wall_s"]) if (
            timed_out and report["limit_hit"].startswith("wall")) else report["limit_hit"]
    code = report["exit_status"]
    status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    tail = " | ".join(line for line in err.splitlines()[-8:] if line.strip())[-600:]
    return f"the sandboxed worker ended with {status} and no result: {tail}".strip()


# ------------------------------------------------------------------ the launcher (child side)


def _launch(argv: list[str]) -> None:
    """`--limits JSON --preload a,b --confine-files 0|1 --channel FD --uid UID TARGET`:
    isolate this process, then run TARGET.main()."""

    def arg(name: str) -> str:
        return argv[argv.index(name) + 1]

    sandbox_channel.attach(int(arg("--channel")))
    limits = Limits(**json.loads(arg("--limits")))
    preload = [m for m in arg("--preload").split(",") if m]
    confine, uid, target = arg("--confine-files") == "1", int(arg("--uid")), argv[-1]
    private = Path.cwd().resolve()
    switch_user = arg("--switch-user") == "1" and os.getuid() == 0
    needed = sandbox_reach.needed_paths(private) if switch_user else []
    applied = sandbox_os.isolate_namespaces(
        private, read_only=confine,
        prepare=(lambda: sandbox_reach.expose(needed, uid, [uid])) if switch_user else None)
    sandbox_os.set_limits(limits.cpu_s, min(limits.file_mb, limits.disk_mb), limits.processes)
    for name in preload:  # before the memory cap and the user switch: the runtime's own cost
        importlib.import_module(name)
    module = importlib.import_module(target)
    applied.append(sandbox_os.cap_memory(limits.memory_mb))
    if switch_user:
        blocked = sandbox_reach.first_unreadable(  # the private folder is chowned to uid
            [p for p in needed if p != private] + sandbox_reach.sentinel_files(), uid, [uid]
        ) or sandbox_reach.blocked_on_the_way(private, uid, [uid])
        if blocked:  # never run the request as root, never fail later on a lazy import
            who = "nobody" if uid == NOBODY else f"uid {uid}"
            sandbox_channel.send("isolation", [*applied, f"user: the run is refused ({who} "
                                                         f"cannot read {blocked[0]})"])
            sandbox_channel.send_result(
                {"ok": False, "error": sandbox_reach.unreadable_message(who, *blocked)})
            return
    if switch_user:
        applied.append(sandbox_os.drop_privileges(private, uid, limits.processes))
    sandbox_channel.send("isolation", applied)  # the first message, before user code runs
    if confine:
        sandbox_os.install_audit_hook(private, lambda what: sandbox_channel.send("refused", what))
    module.main()


if __name__ == "__main__":
    _launch(sys.argv[1:])
