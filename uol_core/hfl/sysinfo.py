"""What the OS says about the host CPU: model, ISA flags, cores, caches, clock (sysfs, /proc/cpuinfo)."""

from __future__ import annotations

import hashlib
import os
import platform
import re
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
    try:
        return cpuinfo_fields(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {}


def cpuinfo_fields(text: str) -> dict[str, str]:
    """First processor block of a /proc/cpuinfo text as key -> value."""
    info: dict[str, str] = {}
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


# cpufreq files (kHz) in the order they are trusted as the clock the probe is checked against:
# the nominal base first (what VMs and turbo-less parts run at), the maximum last.
CPUFREQ_FILES = ("base_frequency", "cpuinfo_max_freq", "scaling_max_freq")


@dataclass
class OsClock:
    """Frequencies the OS reports (GHz, by source) and the one the probe's clock is checked against."""

    readings: dict[str, float]
    reference_source: str = ""

    @property
    def reference_ghz(self) -> float | None:
        """The frequency measurements are compared to, or None when the OS reports none."""
        return self.readings.get(self.reference_source)

    def describe(self) -> str:
        """'2.6 GHz (/proc/cpuinfo cpu MHz)', or a sentence saying the OS reports nothing."""
        if self.reference_ghz is None:
            return "the OS reports no CPU frequency"
        return f"{self.reference_ghz:.3g} GHz ({self.reference_source})"


def os_clock_from(cpuinfo_text: str, cpufreq_khz: dict[str, int],
                  cpuid_mhz: tuple[int, int] | None = None) -> OsClock:
    """The OS's view of the clock from a /proc/cpuinfo text, cpufreq values and cpuid leaf 0x16.

    Reference order: the brand string's "@ x GHz" and cpufreq/cpuid base (nominal base clock);
    then "cpu MHz" only where cpufreq is absent (there it is the fixed clock a VM reports; with
    cpufreq it is the momentary, possibly idle, frequency); then the cpufreq maximum.
    """
    fields = cpuinfo_fields(cpuinfo_text)
    readings: dict[str, float] = {}
    brand = re.search(r"@\s*([0-9.]+)\s*GHz", fields.get("model name", ""))
    if brand:
        readings["/proc/cpuinfo model name"] = float(brand.group(1))
    for name in CPUFREQ_FILES:
        if cpufreq_khz.get(name, 0) > 0:
            readings[f"cpufreq {name}"] = cpufreq_khz[name] / 1e6
    if cpuid_mhz and cpuid_mhz[0] > 0:
        readings["cpuid 0x16 base"] = cpuid_mhz[0] / 1e3
    if cpuid_mhz and cpuid_mhz[1] > 0:
        readings["cpuid 0x16 max"] = cpuid_mhz[1] / 1e3
    try:
        mhz = float(fields.get("cpu MHz", "0"))
    except ValueError:
        mhz = 0.0
    if mhz > 0:
        readings["/proc/cpuinfo cpu MHz"] = mhz / 1e3
    order = ["/proc/cpuinfo model name", "cpufreq base_frequency", "cpuid 0x16 base"]
    if not cpufreq_khz:
        order.append("/proc/cpuinfo cpu MHz")
    order += ["cpufreq cpuinfo_max_freq", "cpufreq scaling_max_freq", "cpuid 0x16 max"]
    reference = next((name for name in order if name in readings), "")
    return OsClock({k: round(v, 4) for k, v in readings.items()}, reference)


def read_os_clock(cpuid_mhz: tuple[int, int] | None = None) -> OsClock:
    """This machine's OS-reported clock (cpuid leaf 0x16 values come from the probe program)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    cpufreq: dict[str, int] = {}
    for name in CPUFREQ_FILES:
        try:
            cpufreq[name] = int((CPU_SYSFS / "cpu0" / "cpufreq" / name).read_text())
        except (OSError, ValueError):
            continue
    return os_clock_from(text, cpufreq, cpuid_mhz)
