"""What bounds and stops one sandboxed run as a whole (the parent's side), strongest first:

- a cgroup (`sandbox_cgroup`): total memory (memfd and tmpfs pages too), total tasks, and a
  kill that finds every process of the run;
- a per-run uid when the server is root: instead of the `nobody` every run shares, a uid no
  other process has, so RLIMIT_NPROC counts this run alone, runs cannot signal or trace each
  other, and the kill can find every process of the run by its uid (setsid does not change it);
- the process session (`killpg`), which a child can leave with setsid: the last resort;
- a disk quota on the private folder: a tmpfs of fixed size mounted on it (root; writes past it
  fail with ENOSPC), else a watcher that sums the folder while the run goes on and once more
  after it, and fails the run past the quota;
- without a cgroup's memory total: a watcher that sums the memfd pages of the run's processes.

Each says in the run's report which of them applied. UOL_SANDBOX_CGROUP=0 and
UOL_SANDBOX_TMPFS=0 turn the kernel's totals off, so that the fallbacks can be tested.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

from uol_core.runtime import sandbox_os
from uol_core.runtime.sandbox_cgroup import RunCgroup, kill_until_gone

RUN_UID_BASE = 0x7F000000  # per-run uids: far above any account, system or dynamic user
RUN_UID_SPAN = 1 << 20
MAX_FILES = 100_000  # entries the private folder may hold (the watcher's walk stays short)


def _mapped(path: str) -> bool:
    """Is the whole per-run range mapped in this user namespace (setuid would fail if not)?"""
    try:
        rows = [line.split() for line in Path(path).read_text().splitlines()]
    except OSError:
        return False
    end = RUN_UID_BASE + RUN_UID_SPAN
    return any(int(first) <= RUN_UID_BASE and int(first) + int(count) >= end
               for first, _, count in rows)


def _proc_ids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def processes_of_uid(uid: int) -> list[int]:
    """Processes with `uid` as any of their real, effective, saved or file-system uids."""
    found = []
    for pid in _proc_ids():
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:]:
                            found.append(pid)
                        break
        except OSError:
            continue
    return found


def processes_of_session(sid: int) -> list[int]:
    found = []
    for pid in _proc_ids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            found.append(pid)
    return found


def pick_run_uid() -> int | None:
    """A uid no process has, for this run alone (root only; None: use nobody)."""
    if os.geteuid() != 0 or not (_mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")):
        return None
    for _ in range(8):
        uid = RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN)
        if not processes_of_uid(uid):
            return uid
    return None


def memfd_bytes(pids: list[int]) -> int:
    """Pages held by the memfd files the processes have open (RLIMIT_AS does not count them)."""
    seen, total = set(), 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(path).startswith("/memfd:"):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def folder_bytes(root: Path) -> int | None:
    """Bytes the folder's files take on disk; None when it holds more than MAX_FILES entries."""
    total, entries, pending = 0, 0, [root]
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    entries += 1
                    if entries > MAX_FILES:
                        return None
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
        except OSError:
            continue
    return total


class SandboxRun:
    """The totals of one run: make it, `start(pid)`, `ready()` once the launcher reported,
    `watch()` while it runs, `kill_all()` when it ends (always), then `close()`."""

    def __init__(self, private: Path, memory_mb: int, disk_mb: int, processes: int,
                 confine: bool) -> None:
        self.private, self.memory_mb, self.disk_mb = private, memory_mb, disk_mb
        self.processes = processes
        self.cgroup = RunCgroup.create(f"uol-sandbox-{secrets.token_hex(6)}")
        self.run_uid = pick_run_uid() if confine else None
        self.tmpfs = (os.geteuid() == 0 and os.environ.get("UOL_SANDBOX_TMPFS", "1") != "0"
                      and not sandbox_os.mount_tmpfs(private, disk_mb, MAX_FILES))
        self.pid: int | None = None
        self.limit_lines: tuple[str, str] = ("", "")

    def start(self, pid: int) -> None:
        self.pid = pid
        self.cgroup.add(pid)

    def ready(self) -> None:
        """The runtime is loaded: the totals are its usage now plus the run's allowance."""
        self.limit_lines = self.cgroup.set_limits(self.memory_mb, self.processes)

    def lines(self) -> list[str]:
        """What applied, for the run's isolation report."""
        memory, pids = self.limit_lines
        why = self.cgroup.problem or "no memory controller"
        lines = [memory or (f"memory total: no cgroup ({why}); RLIMIT_AS per process, and the "
                            f"memfd pages of the run's processes are summed every 0.2 s (the "
                            f"run is stopped past {self.memory_mb} MiB)")]
        if pids:
            lines.append(pids)
        if self.cgroup.killer or self.cgroup.dirs:
            lines.append("stop: the run's cgroup is killed as a whole (setsid children too)")
        elif self.run_uid is not None:
            lines.append(f"stop: every process of the run's own uid {self.run_uid} is killed "
                         f"(setsid children too)")
        else:
            lines.append(f"stop: the process session only (no cgroup: {why}; no uid of its "
                         f"own for this run): a child that calls setsid can outlive the run")
        lines.append(f"disk: the private folder is a tmpfs of {self.disk_mb} MiB (writes past "
                     f"it fail: no space left on device)" if self.tmpfs else
                     f"disk: the private folder is summed every 0.2 s and the run is stopped "
                     f"past {self.disk_mb} MiB (no tmpfs: not root or mount refused)")
        return lines

    def run_processes(self) -> list[int]:
        if self.cgroup.dirs:
            return sorted({int(p) for d in self.cgroup.dirs
                           for p in _read_ids(d / "cgroup.procs")})
        if self.run_uid is not None:
            return processes_of_uid(self.run_uid)
        return processes_of_session(self.pid) if self.pid else []

    def disk_over(self) -> str | None:
        """Without the tmpfs: is the private folder over its quota (or its number of files)?"""
        if self.tmpfs:
            return None
        used = folder_bytes(self.private)
        if used is None:
            return f"file limit of {MAX_FILES} entries in the private folder reached"
        if used > self.disk_mb << 20:
            return f"disk quota of {self.disk_mb} MiB for the private folder reached"
        return None

    def watch(self) -> str | None:
        """A reason to stop the run now, from the watchers that stand in for kernel limits."""
        if over := self.disk_over():
            return over
        if self.cgroup.memory is None and \
                memfd_bytes(self.run_processes()) > self.memory_mb << 20:
            return (f"memory limit of {self.memory_mb} MiB reached (memfd pages, counted by "
                    f"the sandbox's watcher)")
        return None

    def hit(self) -> str | None:
        """A total the kernel enforced during the run, named for the error."""
        if self.cgroup.memory_hit():
            return f"memory limit of {self.memory_mb} MiB reached (cgroup memory total)"
        if self.cgroup.pids_hit():
            return f"process limit of {self.processes} reached (cgroup pids.max)"
        return None

    def kill_all(self) -> None:
        """Kill every process of the run that the available means can find."""
        self.cgroup.kill()
        if self.run_uid is not None:
            kill_until_gone(lambda: processes_of_uid(self.run_uid))
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            kill_until_gone(lambda: processes_of_session(self.pid), rounds=20)

    def close(self) -> None:
        self.cgroup.remove()
        if self.tmpfs:
            sandbox_os.unmount(self.private)


def _read_ids(path: Path) -> list[str]:
    try:
        return [p for p in path.read_text().split() if p.isdigit()]
    except OSError:
        return []
