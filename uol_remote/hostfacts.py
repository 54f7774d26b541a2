"""What a worker's machine is, and whether it can run a target's kernels.

The facts travel in the worker's heartbeat and on every result, so each measurement in the
coordinator's database names the machine it came from.
"""

from __future__ import annotations

import os
import platform
import socket
from functools import lru_cache
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def _gpu_names() -> list[str]:
    """GPU model names from the NVIDIA driver's /proc entries (no CUDA context, no torch)."""
    names = []
    for info in sorted(NVIDIA_GPUS.glob("*/information")) if NVIDIA_GPUS.is_dir() else []:
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                names.append(line.split(":", 1)[1].strip())
    return names


@lru_cache(maxsize=1)
def host_facts() -> dict:
    """Host name, CPU model, ISA flags, cores, architecture, GPUs and the host fingerprint."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.hfl.sysinfo import host_info

    info = host_info()
    return {"host": socket.gethostname(), "cpu": info.model, "flags": info.flags,
            "cores": info.cores, "machine": platform.machine(), "gpus": _gpu_names(),
            "fingerprint": info.fingerprint(), "python": platform.python_version()}


def refusal(target, facts: dict) -> str | None:
    """Why this machine cannot run `target`'s kernels (None when it can), as an action."""
    if target.name == "host":
        return None
    if target.kind == "gpu":
        matches = [g for g in facts.get("gpus", [])
                   if any(m.lower() in g.lower() for m in target.match)]
        if matches:
            return None
        seen = ", ".join(facts.get("gpus", [])) or "no NVIDIA GPU"
        return (f"target {target.name} is a GPU ({target.description.split(';')[0]}) but this "
                f"machine has {seen}. Start the worker on a machine with that GPU, or serve the "
                f"GPU it has (`uol hw list` shows the GPU targets).")
    missing = [f for f in target.isa if f not in facts.get("flags", [])]
    if not missing:
        return None
    return (f"target {target.name} needs {', '.join(missing)}, which this CPU ({facts['cpu']}, "
            f"{facts['machine']}) lacks; it has {', '.join(facts['flags']) or 'no listed ISA'}. "
            "Serve a target this CPU can run (`uol hw list`; `host` always fits), or start "
            "the worker on a machine of that target.")


def job_refusal(isa: list[str], facts: dict) -> str | None:
    """Why a CPU job whose kernel was emitted for `isa` cannot run here (None when it can):
    the coordinator's 'host' is its own machine, which may differ from this one."""
    missing = [f for f in isa if f not in facts.get("flags", [])]
    if not missing:
        return None
    return (f"the kernel was emitted for {', '.join(isa)} but this worker's CPU lacks "
            f"{', '.join(missing)}: pick the worker's own HFL target instead of the "
            "coordinator's 'host'")


def worker_name(target: str) -> str:
    """The Celery node name of a worker: target, process and machine (unique per process)."""
    return f"{target}.{os.getpid()}@{socket.gethostname()}"


NATIVE, EMULATED, NOT_HERE = "native", "emulated", "not here"


def how_this_machine_runs(target, facts: dict | None = None) -> tuple[str, str]:
    """(mode, why) for `target`'s kernels on this machine when no worker serves it: NATIVE
    (built, verified and timed here), EMULATED (another CPU architecture, built by the cross
    toolchain and verified under its emulator, never timed) or NOT_HERE (compile and explain
    only: a GPU this machine lacks, ISA flags its CPU lacks, or a missing cross toolchain)."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.runtime.cross import (
        EMULATED_NOTE,
        needs_cross_build,
        target_arch,
        toolchain,
    )

    facts = host_facts() if facts is None else facts
    if needs_cross_build(target):
        try:
            tools = toolchain(target_arch(target))
        except ValueError as exc:  # an architecture with no cross toolchain known here
            return NOT_HERE, str(exc)
        gone = tools.missing()
        if gone:
            return NOT_HERE, (f"the {tools.arch} cross toolchain is missing "
                              f"(apt-get install {' '.join(tools.packages)})")
        return EMULATED, EMULATED_NOTE
    if refusal(target, facts) is None:
        return NATIVE, ""
    if target.kind == "gpu":
        return NOT_HERE, f"no {target.name} GPU on this machine"
    missing = [f for f in target.isa if f not in facts.get("flags", [])]
    return NOT_HERE, f"this CPU lacks {', '.join(missing)}"
