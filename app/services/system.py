"""Live machine status for the status bar: CPU per core, memory, GPU (NVML) and running jobs.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import psutil


def _activity_dir() -> Path:
    """Running-job markers, in the private per-user cache (uol_core.runtime.usercache)."""
    from uol_core.runtime.usercache import private_dir

    return private_dir("ide_activity")


@contextmanager
def activity(what: str):
    """Mark `what` as running (seen by the status bar from any process) while the block runs."""
    marker = _activity_dir() / f"{os.getpid()}-{time.monotonic_ns()}.json"
    marker.write_text(json.dumps({"what": what, "pid": os.getpid(), "since": time.time()}))
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def running() -> list[str]:
    """What runs now (markers of dead processes are removed)."""
    out = []
    for marker in sorted(_activity_dir().glob("*.json")):
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(data.get("pid", -1)):
            marker.unlink(missing_ok=True)
            continue
        out.append(f"{data['what']} ({time.time() - data['since']:.0f} s)")
    return out


@lru_cache(maxsize=1)
def _nvml():
    """The NVML module, initialised, or None without a GPU / without pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml if pynvml.nvmlDeviceGetCount() > 0 else None
    except Exception:  # no driver, no library: the IDE runs on CPU-only machines too
        return None


def gpus() -> list[dict]:
    """Per GPU: name, utilisation %, memory used / total (GiB), via NVML."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        name = nv.nvmlDeviceGetName(h)
        out.append({"name": name.decode() if isinstance(name, bytes) else name,
                    "util": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                    "mem_used_gib": mem.used / 2**30, "mem_total_gib": mem.total / 2**30})
    return out


def snapshot() -> dict:
    """CPU % per core, memory, GPUs and running jobs, for one status-bar refresh."""
    mem = psutil.virtual_memory()
    return {"cpu": psutil.cpu_percent(percpu=True), "mem_used_gib": mem.used / 2**30,
            "mem_total_gib": mem.total / 2**30, "gpus": gpus(), "running": running()}
