"""Fixed HFL targets for ACG tests and golden files: they must not depend on the host probe."""

from uol_core.hfl.schema import validate


def _entry(value, prov="assumed", source="test fixture"):
    return {"value": value, "prov": prov, "source": source}


def fixed_target(name="test-avx2", isa=("avx2", "fma", "avx"), vector_bits=256, registers=16,
                 cores=2, fork_join_cycles=None):
    """A CPU target with every field set to a plausible, fixed value (the fork and join cost:
    isa.toml's assumed one unless given)."""
    data = {"name": name, "kind": "cpu", "isa": _entry(list(isa)), "cores": _entry(cores),
            "clock_ghz": _entry(3.0), "vector_bits": _entry(vector_bits),
            "vector_registers": _entry(registers), "fma_units": _entry(2),
            "fma_latency_cycles": _entry(4), "l1d_bytes": _entry(32768),
            "l2_bytes": _entry(1048576), "l3_bytes": _entry(33554432), "line_bytes": _entry(64),
            "peak_gflops": {"fp32": _entry(200.0)}, "mem_bandwidth_gbps": _entry(20.0)}
    if fork_join_cycles is not None:
        data["fork_join_cycles"] = _entry(fork_join_cycles)
    return validate(data, f"{name}.toml")


def host_isa_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def runnable_target():
    """A fixed target whose ISA this machine can run (avx2+fma if present, else portable)."""
    flags = host_isa_flags()
    if {"avx2", "fma"} <= flags:
        return fixed_target()
    return fixed_target("test-portable", isa=("sse2",), vector_bits=128)
