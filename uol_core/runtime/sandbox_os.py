"""The operating-system layers of the sandbox (Linux): namespaces, read-only mounts, resource
limits, dropping root, and the audit hook. Each function returns a line saying what it applied
(or why the OS did not allow it), so the user sees the isolation their code actually ran under.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME = 16384, 1 << 18, 1 << 21
NOBODY = 65534
MOUNT_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                      "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME,
                      "relatime": MS_RELATIME}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> int:
    """0 on success, else the errno (os.unshare exists from Python 3.12; libc before)."""
    if hasattr(os, "unshare"):
        try:
            os.unshare(flags)
            return 0
        except OSError as exc:
            return exc.errno or errno.EPERM
    libc = _libc()
    return 0 if libc.unshare(flags) == 0 else ctypes.get_errno()


def _mount(source: str | None, target: str, flags: int, fstype: str | None = None,
           data: str | None = None) -> int:
    """mount(2): 0 on success, else the errno."""
    libc = _libc()
    ok = libc.mount(source.encode() if source else None, target.encode(),
                    fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                    data.encode() if data else None) == 0
    return 0 if ok else ctypes.get_errno()


def mount_tmpfs(path: Path, size_mb: int, inodes: int, mode: str = "700") -> int:
    """A tmpfs of fixed size (and number of files) on `path`: 0, or the errno that refused it."""
    return _mount("uol-sandbox", str(path), MS_NOSUID | MS_NODEV, "tmpfs",
                  f"size={size_mb}m,nr_inodes={inodes},mode={mode}")


def bind(source: str, target: Path) -> int:
    """Bind `source` (and the mounts below it) on `target`: 0, or the errno."""
    return _mount(source, str(target), MS_BIND | MS_REC)


def unmount(path: Path) -> None:
    """Detach the mount on `path` (MNT_DETACH: it goes once nothing uses it)."""
    _libc().umount2(str(path).encode(), 2)


def isolate_namespaces(private: Path, read_only: bool = True,
                       prepare: Callable[[], str] | None = None) -> list[str]:
    """A new network namespace and (`read_only`) a read-only view of every mount but `private`.
    `prepare` runs in the new mount namespace, once its mounts are private to it and before
    they are made read-only (it may mount there); its line joins the report."""
    uid, gid = os.getuid(), os.getgid()
    err = _unshare(CLONE_NEWNET | CLONE_NEWNS)
    if err == errno.EPERM and uid != 0:  # unprivileged: inside a user namespace of our own
        err = _unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS)
        if not err:
            _map_ids(uid, gid)
    if err:
        hook = "; the audit hook refuses {}" if read_only else ""
        return [f"network: not isolated (unshare refused: {os.strerror(err)}"
                + hook.format("sockets") + ")",
                f"filesystem: not read-only (no mount namespace: {os.strerror(err)}"
                + hook.format("writes outside the private directory") + ")"]
    applied = ["network: own empty network namespace (no interfaces up, no route out)"]
    # prepare's mounts must stay in this namespace: on a host whose mounts are shared
    # (systemd's default) they would otherwise propagate back to every other process
    if prepare and not _mount(None, "/", MS_REC | MS_PRIVATE) and (line := prepare()):
        applied.append(line)
    applied.append(_read_only_except(private) if read_only else
                   "filesystem: writable (this worker runs no client code; it runs the compiler)")
    return applied


def _map_ids(uid: int, gid: int) -> None:
    """Map our ids to themselves in the new user namespace, so files we create have an owner."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mounts() -> list[tuple[str, set[str]]]:
    """(mount point, options) of every mount this process sees, parents before children."""
    rows = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")  # octal escapes such as \040
        rows.append((point, set(fields[5].split(","))))
    return sorted(rows, key=lambda r: r[0].count("/"))


def _read_only_except(private: Path) -> str:
    """Remount everything read-only in this mount namespace; `private` stays writable."""
    if _mount(None, "/", MS_REC | MS_PRIVATE):  # changes stay inside this namespace
        return "filesystem: not read-only (mounts could not be made private)"
    if _mount(str(private), str(private), MS_BIND):
        return "filesystem: not read-only (the private directory could not be bound)"
    failed = []
    for point, options in _mounts():
        if point == str(private) or "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        flags |= sum(bit for name, bit in MOUNT_OPTION_FLAGS.items() if name in options)
        if _mount(None, point, flags):
            failed.append(point)
    os.chdir(private)  # the old working directory still points below the read-only mount
    if "/" in failed:
        return "filesystem: not read-only (the root mount refused a read-only remount)"
    note = f" ({len(failed)} mounts kept their mode: {', '.join(failed[:3])})" if failed else ""
    return f"filesystem: read-only everywhere except the private directory{note}"


def _tasks_of(uid: int) -> int:
    """Processes and threads that `uid` owns now (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


def set_limits(cpu_s: int, file_mb: int, processes: int) -> None:
    """CPU seconds, file size, process count (on top of what this user runs now), no cores."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # root is not bound by it; drop_privileges sets it for nobody
        total = _tasks_of(os.getuid()) + processes
        resource.setrlimit(resource.RLIMIT_NPROC, (total, total))


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def cap_memory(memory_mb: int) -> str:
    """RLIMIT_AS: what the interpreter maps now (its imports) plus `memory_mb`."""
    cap = _vm_bytes() + (memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return f"memory: {memory_mb} MiB beyond the runtime's own (RLIMIT_AS {cap >> 20} MiB)"


def drop_privileges(private: Path, uid: int, processes: int) -> str:
    """As root, become `uid` (a per-run uid, or nobody): file permissions and RLIMIT_NPROC then
    apply. The caller has checked that `uid` can read what the run needs."""
    if os.getuid() != 0:
        return f"user: {os.getuid()} (not root), RLIMIT_NPROC +{processes} over its tasks"
    os.chown(private, uid, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    who = "nobody" if uid == NOBODY else "a uid of its own"
    return f"user: {who} (uid {uid}) instead of root; RLIMIT_NPROC {processes}"


# Audit events refused outright: new processes, network, loading native code, signals.
REFUSED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "gc.get_referrers", "gc.get_objects", "sys._current_frames",
})
# Events whose first argument is a path: refused unless the path is in the private directory.
PATH_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod",
                         "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime",
                         "shutil.rmtree", "shutil.copyfile", "shutil.move"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def install_audit_hook(private: Path, report: Callable[[str], None]) -> None:
    """Refuse (PermissionError) process creation, sockets, native loads and writes outside
    `private`; the first refusals are also passed to `report` for the parent's report."""
    root = str(private) + os.sep
    refused, path_events, write_flags = REFUSED_EVENTS, PATH_EVENTS, WRITE_FLAGS
    reported = [0]

    def outside(path) -> bool:
        if isinstance(path, int) or path is None:
            return False  # an already open descriptor
        text = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
        return not (os.path.realpath(text) + os.sep).startswith(root)

    def refuse(event: str, detail: str) -> None:
        if reported[0] < 20:
            reported[0] += 1
            report(f"{event} {detail}")
        raise PermissionError(f"the sandbox refuses {event} {detail}".strip())

    def hook(event: str, args: tuple) -> None:
        if event in refused:
            refuse(event, repr(args[:2])[:200])
        elif event == "open" and args:
            mode, flags = (args[1] or ""), (args[2] if len(args) > 2 else 0) or 0
            writes = any(c in str(mode) for c in "wax+") or bool(flags & write_flags)
            if writes and outside(args[0]):
                refuse("open for writing", repr(args[0])[:200])
        elif event in path_events and args and (outside(args[0])
                                                or (len(args) > 1 and isinstance(
                                                    args[1], (str, bytes)) and outside(args[1]))):
            refuse(event, repr(args[:2])[:200])

    sys.addaudithook(hook)
