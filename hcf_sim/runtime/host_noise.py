"""The host's run-to-run spread around a real run: how late a waiting process wakes up, how much
CPU the hypervisor steals, the load. Predictions of real runs on this host (the pipeline step,
the gloo all-reduce) widen their intervals by it."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass

WAKE_SAMPLES = 100  # sleeps per probe: 100 x ~0.5 ms keeps a probe under 0.2 s on a busy host
WAKE_SLEEP_S = 0.0005


@dataclass
class HostNoise:
    """The host's run-to-run spread around one run (times in seconds)."""

    wake_median_s: float  # how late a 0.5 ms sleep returns, median
    wake_p90_s: float  # ... its 90th percentile
    steal_share: float  # CPU time stolen by the hypervisor over the run / all CPU time (0 off Linux)
    loadavg: float  # 1-minute load average after the run
    cores: int

    def to_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)


def probe_wakeups(samples: int = WAKE_SAMPLES, sleep_s: float = WAKE_SLEEP_S) -> list[float]:
    """How late each of `samples` sleeps of `sleep_s` returned."""
    late = []
    for _ in range(samples):
        t0 = time.perf_counter()
        time.sleep(sleep_s)
        late.append(max(0.0, time.perf_counter() - t0 - sleep_s))
    return late


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) CPU ticks of the whole host since boot, None where /proc/stat is missing."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


class HostProbe:
    """Measures the host around a run: `with HostProbe() as probe: run()`, then `probe.noise`."""

    def __enter__(self) -> HostProbe:
        self._late = probe_wakeups()
        self._ticks = cpu_ticks()
        return self

    def __exit__(self, *exc) -> None:
        after = cpu_ticks()
        self._late += probe_wakeups()
        steal = 0.0
        if self._ticks and after and after[1] > self._ticks[1]:
            steal = (after[0] - self._ticks[0]) / (after[1] - self._ticks[1])
        self.noise = HostNoise(statistics.median(self._late), quantile(self._late, 0.9), steal,
                               os.getloadavg()[0], os.cpu_count() or 1)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
