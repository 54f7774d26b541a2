"""A remote C kernel job, built, verified and timed inside the sandbox of `uol_core.runtime.sandbox`.

A kernel job carries C source, and the worker compiles and loads that text as it is: whoever
holds the shared secret chooses what runs. So each kernel job runs in a sandboxed process of
its own (`run_sandboxed`), with every layer a compiler and a loaded `.so` allow:

- network: a new, empty network namespace (where the OS allows one; the report says);
- environment: scrubbed: no broker URL, no secret or its file, no cache folder of the worker;
  HOME and TMPDIR in a private directory, which holds the build too and is removed after;
- user: a worker running as root runs the job as a uid of its own (else `nobody`), after
  making the interpreter and the project reachable for it (a folder above them that other
  users cannot enter, such as a 0700 home, is hidden behind a view of just those trees);
- limits and totals: CPU seconds, address space, file size, processes, the run's cgroup
  (memory and tasks in total) and a disk quota on the private directory, where the OS gives
  them; a wall clock after which every process of the run is killed.

Left out, because the job needs them: the read-only filesystem and the audit hook (gcc must
start processes, ctypes must load the built kernel). A worker that is not root runs its jobs
as its own user. Timing is measured inside the job process, after its start-up, so the
sandbox's start costs the job time but not accuracy. This module is also the sandboxed
side: `python -m uol_core.runtime.sandbox uol_remote.kernel_sandbox` runs `main()`.

Deferred imports: a worker process loads only the engine its job kind needs (compiler,
profilers, gloo), so a worker starts fast and a job's process holds no more than it runs.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uol_core.runtime.sandbox import Limits

# imported by the launcher before its memory cap and before the switch of user: the
# runtime's own cost
PRELOAD = ("torch", "uol_core.api", "uol_core.odl", "uol_core.runtime.worker",
           "uol_core.runtime.build", "uol_core.runtime.native", "uol_core.runtime.measure",
           "uol_core.runtime.reference", "uol_core.runtime.verify", "uol_core.runtime.inputs")
# the sandbox's own line for this layer speaks of the Graph page's runs
FILESYSTEM = ("filesystem: not read-only (gcc writes its output and the job loads it); the "
              "build is in the job's private directory, removed after the job")
STARTUP_ALLOWANCE_S = 30.0  # the job process's imports, on top of the job's own timeout
# the worker's settings a build and a measurement read; nothing else of its environment
PASSED_PREFIXES = ("UOL_CC", "UOL_BUILD_", "UOL_CROSS_", "UOL_QEMU_", "UOL_OUTPUT_POOL_MB",
                   "OMP_", "GOMP_")


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def kernel_limits(timeout: float) -> Limits:
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
    from uol_core.runtime.sandbox_io import ANY

    limits = kernel_limits(timeout)
    # what a job's answer must look like (the sandbox checks it: data from the job process)
    schema = {"ok": bool, "status": str, "reason?": str, "median_s?": float, "iqr_s?": float,
              "results?": [dict], "*": ANY}
    res = run_sandboxed(__name__, {"job": job, "worker": os.getpid()}, limits=limits,
                        preload=PRELOAD, env=kernel_env(), confine_files=False,
                        schema=schema, switch_user=True)
    if "status" in res:  # the job's own answer: as Worker.run gives it
        res.pop("ok", None)
        if res.get("error") == res.get("reason", res["status"]):
            res.pop("error", None)
    report = res.pop("sandbox", {})
    report["isolation"] = [FILESYSTEM if line.startswith("filesystem: writable") else line
                           for line in report.get("isolation", [])]
    if os.getuid() != 0 and not any(line.startswith("user:") for line in report["isolation"]):
        report["isolation"].append(f"user: {os.getuid()}, the worker's own (not root: no "
                                   "other user to switch to)")
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


def _end_with_worker(worker_pid: int) -> None:
    """Die with the worker: its wall clock is what stops a hung job, and a worker killed with
    kill -9 cannot apply it (set here, after the launcher's switch of user, which clears it)."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != worker_pid:  # the worker was gone before the call
        os._exit(1)


def main() -> None:
    """Run the job on stdin in this (sandboxed) process; its result goes to the sandbox's
    result channel."""
    from uol_core.runtime.sandbox_channel import send_result
    from uol_core.runtime.worker import run_one

    request = json.loads(sys.stdin.read())
    _end_with_worker(int(request["worker"]))
    result = run_one(request["job"])
    result["ok"] = result.get("status") == "ok"  # the sandbox's result envelope
    if not result["ok"]:
        result["error"] = str(result.get("reason", result.get("status")))
    send_result(result)
