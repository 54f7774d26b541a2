"""A control group per sandboxed run, where the kernel lets this process make one.

Limits that RLIMIT_* set are per process; a cgroup's are totals over every process of the
run, and its memory counts what RLIMIT_AS does not (memfd and tmpfs pages). Where it works:

- cgroup v2 with the memory and pids controllers: `memory.max`, `memory.swap.max = 0`,
  `memory.oom.group`, `pids.max`, and `cgroup.kill` (every process of the run, including one
  that called setsid: it cannot leave the cgroup);
- cgroup v1 (a hybrid host): the `memory` and `pids` hierarchies, and `cgroup.kill` of the
  unified (v2) hierarchy when it is mounted; without it, every process listed is killed until
  the group is empty.

It does not work where /sys/fs/cgroup is read-only or not delegated to this user (most
containers, an ordinary user on most hosts); `describe()` then says so and the sandbox
falls back to per-process limits and its watchers. UOL_SANDBOX_CGROUP=0 turns cgroups off.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root in the hierarchy, fs type, super options) of each cgroup mount."""
    rows = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            head, _, tail = line.partition(" - ")
            fields, extra = head.split(), tail.split()
            if len(fields) > 4 and len(extra) > 2 and extra[0] in ("cgroup", "cgroup2"):
                rows.append((fields[4], fields[3], extra[0], set(extra[2].split(","))))
    return rows


def _own_groups() -> dict[str, str]:
    """This process's cgroup per controller ('' = the v2 hierarchy), from /proc/self/cgroup."""
    groups = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                groups[name] = path
    return groups


def _located(mount: str, root: str, path: str) -> Path | None:
    """The directory of cgroup `path` under a mount whose root is `root` (None: not below)."""
    rel = os.path.relpath(path, root)
    return None if rel.startswith("..") else Path(mount) / rel


class RunCgroup:
    """The cgroup(s) of one run: made by `create`, joined by `add`, bounded by `set_limits`,
    emptied by `kill`, removed by `remove`."""

    def __init__(self) -> None:
        self.dirs: list[Path] = []
        self.memory: Path | None = None
        self.memory_v2 = False
        self.pids: Path | None = None
        self.killer: Path | None = None  # a v2 group with cgroup.kill
        self.problem = ""

    @classmethod
    def create(cls, name: str) -> RunCgroup:
        group = cls()
        if os.environ.get("UOL_SANDBOX_CGROUP", "1") == "0":
            group.problem = "turned off (UOL_SANDBOX_CGROUP=0)"
            return group
        own = _own_groups()
        for mount, root, kind, options in _mounts():
            if kind == "cgroup2" and "" in own:
                group._make_v2(_located(mount, root, own[""]), Path(mount), name)
            elif kind == "cgroup":
                for controller in ("memory", "pids"):
                    if controller in options and controller in own and \
                            getattr(group, controller) is None:
                        here = _located(mount, root, own[controller])
                        made = group._mkdir(here / name) if here else None
                        if made:
                            setattr(group, controller, made)
        if not group.dirs:
            group.problem = group.problem or "no cgroup hierarchy this process may write"
        return group

    def _mkdir(self, path: Path) -> Path | None:
        try:
            path.mkdir()
        except OSError as exc:
            self.problem = self.problem or f"cannot create {path.parent}/...: {exc.strerror}"
            return None
        self.dirs.append(path)
        return path

    def _make_v2(self, own: Path | None, top: Path, name: str) -> None:
        """Under our own group, else the hierarchy's top (a group with processes of its own
        may not hand controllers to children, the top may), with memory and pids if we can."""
        for parent in dict.fromkeys(p for p in (own, top) if p):
            try:
                wanted = {"memory", "pids"} & set(_read(parent / "cgroup.controllers").split())
                enabled = set(_read(parent / "cgroup.subtree_control").split())
            except OSError:
                continue
            for controller in sorted(wanted - enabled):
                if not _write(parent / "cgroup.subtree_control", f"+{controller}"):
                    wanted.discard(controller)
            if not wanted and self.killer is not None:
                continue
            made = self._mkdir(parent / name)
            if made is None:
                continue
            if self.killer is not None:  # a better place than the first one: keep this one
                with contextlib.suppress(OSError):
                    self.killer.rmdir()
                    self.dirs.remove(self.killer)
            self.killer = made if (made / "cgroup.kill").exists() else None
            if "memory" in wanted:
                self.memory, self.memory_v2 = made, True
            if "pids" in wanted:
                self.pids = made
            if wanted == {"memory", "pids"}:
                return

    def add(self, pid: int) -> None:
        """Move `pid` (the launcher, before it runs anything of the request) into the run."""
        for path in list(self.dirs):
            if not _write(path / "cgroup.procs", str(pid)):
                self.problem = self.problem or f"cannot move the run into {path}"
                self._forget(path)

    def _forget(self, path: Path) -> None:
        self.dirs.remove(path)
        with contextlib.suppress(OSError):
            path.rmdir()
        for attr in ("memory", "pids", "killer"):
            if getattr(self, attr) == path:
                setattr(self, attr, None)

    def set_limits(self, memory_mb: int, processes: int) -> tuple[str, str]:
        """memory.max / pids.max: what the run holds now (its runtime) plus the allowance.
        Returns the memory line and the process line for the isolation report."""
        memory = ""
        if self.memory is not None:
            usage = int(_read(self.memory / ("memory.current" if self.memory_v2
                                             else "memory.usage_in_bytes")))
            cap = usage + (memory_mb << 20)
            if self.memory_v2:
                ok = _write(self.memory / "memory.max", str(cap))
                _write(self.memory / "memory.swap.max", "0")
                _write(self.memory / "memory.oom.group", "1")
            else:
                ok = _write(self.memory / "memory.limit_in_bytes", str(cap))
                _write(self.memory / "memory.memsw.limit_in_bytes", str(cap))
            version = "v2 memory.max" if self.memory_v2 else "v1 memory.limit_in_bytes"
            memory = (f"memory total: {memory_mb} MiB beyond the runtime's own over every process "
                      f"of the run, memfd and tmpfs pages included (cgroup {version} "
                      f"{cap >> 20} MiB)") if ok else ""
        pids = ""
        if self.pids is not None:
            cap = int(_read(self.pids / "pids.current")) + processes
            if _write(self.pids / "pids.max", str(cap)):
                pids = f"processes total: {processes} more tasks (cgroup pids.max {cap})"
        return memory, pids

    def memory_hit(self) -> bool:
        """Did the kernel kill a process of the run for its memory limit?"""
        if self.memory is None:
            return False
        name = "memory.events" if self.memory_v2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in _read(self.memory / name).splitlines():
                key, _, count = line.partition(" ")
                if key == "oom_kill" and int(count) > 0:
                    return True
        return False

    def pids_hit(self) -> bool:
        if self.pids is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in _read(self.pids / "pids.events").splitlines():
                key, _, count = line.partition(" ")
                if key == "max" and int(count) > 0:
                    return True
        return False

    def kill(self) -> None:
        """Kill every process of the run (setsid or not) and wait until the groups are empty."""
        if self.killer is not None:
            _write(self.killer / "cgroup.kill", "1")
        kill_until_gone(lambda: {int(p) for path in self.dirs
                                 for p in _lines(path / "cgroup.procs") if p.isdigit()})

    def remove(self) -> None:
        for path in reversed(self.dirs):
            for _ in range(50):  # killed processes leave their group a moment later
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.dirs = []

    def finds_every_process(self) -> bool:
        return bool(self.dirs)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def kill_until_gone(find, rounds: int = 200) -> None:
    """SIGKILL every pid `find()` names (never this process) until it names none, or `rounds`
    tries have passed: a process may fork between a listing and its kill."""
    for _ in range(rounds):
        pids = [p for p in find() if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
