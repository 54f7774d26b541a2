"""What the OS says about the host CPU: model, ISA flags, cores, caches (sysfs, /proc/cpuinfo)."""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ISA_FILE = Path(__file__).parent / "isa.toml"
CPU_SYSFS = Path("/sys/devices/system/cpu")


@dataclass
class HostInfo:
    """Static facts about the host, read without running anything."""

    model: str
    flags: list[str]
    cores: int
    caches: dict[str, dict[str, int]] = field(default_factory=dict)  # 'l1d' -> size, line, shared
    mem_available_bytes: int = 0

    def fingerprint(self) -> str:
        """Short hash of what makes a measurement valid: CPU model, flags, core count."""
        text = f"{self.model}|{' '.join(sorted(self.flags))}|{self.cores}|{platform.machine()}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def isa_table() -> dict:
    """The ISA facts file (vector widths, registers, reported features)."""
    return tomllib.loads(ISA_FILE.read_text(encoding="utf-8"))


def _cpuinfo() -> dict[str, str]:
    """First processor block of /proc/cpuinfo as key -> value (x86 and Arm spellings)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip() and info:
            break
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _cores() -> int:
    """CPUs this process may run on (affinity), which is what OpenMP will use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _size(text: str) -> int:
    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    text = text.strip()
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text or 0)


def _caches() -> dict[str, dict[str, int]]:
    """Data and unified caches of cpu0 from sysfs: size, line size, CPUs sharing it."""
    caches: dict[str, dict[str, int]] = {}
    for index in sorted((CPU_SYSFS / "cpu0" / "cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _size((index / "size").read_text())
            line = int((index / "coherency_line_size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        key = "l1d" if level == 1 else f"l{level}"
        caches[key] = {"bytes": size, "line_bytes": line, "shared_by": _count_cpus(shared)}
    if not caches:  # no sysfs (containers, macOS): glibc's view
        for key, name in (("l1d", "LEVEL1_DCACHE"), ("l2", "LEVEL2_CACHE"), ("l3", "LEVEL3_CACHE")):
            try:
                size = os.sysconf(f"SC_{name}_SIZE")
                line = os.sysconf(f"SC_{name}_LINESIZE")
            except (ValueError, OSError):
                continue
            if size > 0:
                caches[key] = {"bytes": size, "line_bytes": line, "shared_by": 1}
    return caches


def _count_cpus(cpu_list: str) -> int:
    count = 0
    for part in cpu_list.split(","):
        low, _, high = part.partition("-")
        if low:
            count += int(high or low) - int(low) + 1
    return max(count, 1)


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def host_info() -> HostInfo:
    """Read model, ISA flags, cores, caches and free memory of this machine."""
    info = _cpuinfo()
    model = info.get("model name") or info.get("Model") or info.get("CPU part") or platform.processor()
    raw = (info.get("flags") or info.get("Features") or "").split()
    table = isa_table()
    aliases = table.get("aliases", {})
    present = {aliases.get(f, f) for f in raw}
    flags = [f for f in table["features"] if f in present]
    # keep sse2 for the vector-ISA fallback even though it is not reported
    if "sse2" in present:
        flags.append("sse2")
    return HostInfo(model=model or "unknown CPU", flags=flags, cores=_cores(),
                    caches=_caches(), mem_available_bytes=_mem_available())


def widest_vector_isa(flags: list[str]) -> dict:
    """The first (widest) vector ISA of isa.toml the host has."""
    for entry in isa_table()["vector_isa"]:
        if entry["flag"] in flags:
            return entry
    raise RuntimeError(f"no known vector ISA among host flags {flags}; add one to {ISA_FILE.name}")
