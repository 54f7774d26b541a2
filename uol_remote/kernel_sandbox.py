"""A remote C kernel job, built, verified and timed inside the sandbox of `uol_core.runtime.sandbox`.

A kernel job carries C source, and the worker compiles and loads that text as it is: whoever
holds the shared secret chooses what runs. So each kernel job runs in a sandboxed process of
its own (`run_sandboxed`), with the layers a compiler and a loaded `.so` allow, as the Graph
page's runs (`confine_files=False`):

- network: a new, empty network namespace (where the OS allows one; the report says);
- environment: scrubbed: no broker URL, no secret or its file, no cache folder of the worker;
  HOME and TMPDIR in a private directory, which holds the build too and is removed after;
- limits: CPU seconds, address space, file size and processes, and a wall clock after which
  the whole session is killed;
- user: a worker running as root runs the job as `nobody`, when `nobody` can read the
  interpreter, its libraries and the code (else it stays root and the report says why).

Left out, because the job needs them: the read-only filesystem and the audit hook (gcc must
start processes, ctypes must load the built kernel). Timing is measured inside the job
process, after its start-up, so the sandbox's start costs the job time but not accuracy.
This module is also the sandboxed side: `python -m uol_core.runtime.sandbox
uol_remote.kernel_sandbox` runs `main()`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path

MARK = "@@UOL-REMOTE-KERNEL@@"
NOBODY = 65534
# imported by the launcher before its memory cap and before the switch to nobody: the
# runtime's own cost, and read while the files are certainly readable
PRELOAD = ("torch", "uol_core.api", "uol_core.odl", "uol_core.runtime.worker",
           "uol_core.runtime.build", "uol_core.runtime.native", "uol_core.runtime.measure",
           "uol_core.runtime.reference", "uol_core.runtime.verify", "uol_core.runtime.inputs")
STARTUP_ALLOWANCE_S = 30.0  # the job process's imports, on top of the job's own timeout
# the worker's settings a build and a measurement read; nothing else of its environment
PASSED_PREFIXES = ("UOL_CC", "UOL_BUILD_", "UOL_CROSS_", "UOL_QEMU_", "UOL_OUTPUT_POOL_MB",
                   "OMP_", "GOMP_")


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def kernel_limits(timeout: float):
    """The sandbox limits of one kernel job of `timeout` seconds on this machine: its kernel
    may use every core (OpenMP threads) and the memory budget of a local run."""
    from uol_core.api import memory_budget_bytes
    from uol_core.runtime.sandbox import Limits

    cores = _cores()
    wall = timeout + STARTUP_ALLOWANCE_S
    return Limits(cpu_s=math.ceil(wall * cores) + 10,
                  # the tensors and the reference (check_memory's budget), the compiler's
                  # own limit, and the address space each OpenMP thread reserves
                  memory_mb=2 * (memory_budget_bytes() >> 20) + 4096 + 128 * cores,
                  file_mb=256, processes=2 * cores + 64, wall_s=wall)


def kernel_env() -> dict[str, str]:
    """The job's environment beyond the sandbox's own: build and OpenMP settings, and as many
    OpenMP threads as a local run gets (the sandbox's default is one)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_PREFIXES)}
    env.setdefault("OMP_NUM_THREADS", str(_cores()))
    return env


def run_kernel(job: dict, timeout: float) -> dict:
    """The result of kernel job `job` (`uol_core.runtime.worker.make_job` or `make_race`),
    run in the sandbox; keys as `Worker.run`'s, plus `sandbox`: the isolation applied (one
    line per layer), the limits, and the limit that ended the run, if one did."""
    from uol_core.runtime.sandbox import run_sandboxed

    limits = kernel_limits(timeout)
    res = run_sandboxed(__name__, {"job": job, "processes": limits.processes}, MARK,
                        limits=limits, preload=PRELOAD, env=kernel_env(), confine_files=False)
    report = res.pop("sandbox", {})
    user = res.pop("sandbox_user", None)
    if user:
        report["isolation"] = [*report.get("isolation", []), user]
    if "status" not in res:  # no answer from the job: the sandbox stopped it, or it crashed
        hit = report.get("limit_hit") or ""
        if hit.startswith("wall"):
            res = {"status": "timeout",
                   "reason": f"no result within {timeout:.0f} s: the kernel hangs or is far "
                             f"too slow (the job's sandbox was stopped after {limits.wall_s:.0f}"
                             " s)"}
        else:
            res = {"status": "crash", "reason": f"the kernel job ended without a result: "
                                                f"{res.get('error', hit)}"}
    res["sandbox"] = report
    return res


# ------------------------------------------------------------------- the sandboxed side


def _unreadable_by_others(paths: list[str]) -> str | None:
    """The first of `paths` (or a folder above it) that other users cannot enter or read."""
    for path in paths:
        target = Path(path).resolve()
        if not target.exists():
            continue
        for folder in [*reversed(target.parents), target]:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH and stat.S_ISDIR(mode):
                return str(folder)
        if not target.stat().st_mode & stat.S_IROTH:
            return str(target)
    return None


def become_unprivileged(private: Path, processes: int) -> str:
    """As root, switch to nobody (file permissions and RLIMIT_NPROC then apply) when nobody
    can read the interpreter, every import path and the code; the line that says which user
    the job runs as, and why it stayed root if it did."""
    if os.getuid() != 0:
        return f"user: {os.getuid()} (the worker's own user, not root)"
    # the private directory (the working directory, on sys.path as '') becomes nobody's
    paths = [p for p in sys.path if p and Path(p).resolve() != private]
    blocked = _unreadable_by_others([os.path.realpath(sys.executable), *paths])
    if blocked:
        return (f"user: stays root ({blocked} cannot be read by other users, and nobody "
                "needs it to run the interpreter and import its libraries: install Python "
                "and the project where other users can read them, or run the worker as an "
                "unprivileged user)")
    from uol_core.runtime.sandbox_os import drop_privileges

    return drop_privileges(private, NOBODY, processes)


def main() -> None:
    """Run the job on stdin in this (sandboxed) process; answer one marked JSON line."""
    from uol_core.runtime.worker import run_one

    request = json.loads(sys.stdin.read())
    user = become_unprivileged(Path.cwd().resolve(), int(request["processes"]))
    result = run_one(request["job"])
    result["sandbox_user"] = user
    sys.stdout.write("\n" + MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
