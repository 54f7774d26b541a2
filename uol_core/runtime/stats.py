"""Timings a performance engineer can trust: a median with its bootstrap 95% confidence
interval, a comparison of two timings that says whether the difference is significant, and a
"noisy" flag from the run's spread and the machine's load.

The statistics are pure functions of the samples (seeded, so a report reads the same every
time it is rebuilt); only `load_snapshot` and `load_during` read the machine (/proc, loadavg).
A bare ratio of medians is never a verdict: two runs of one kernel on a busy machine differ by
30 % and more, which a confidence interval on the ratio shows and a ratio alone hides.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000  # bootstrap resamples: the 2.5 % and 97.5 % points move by < 1 % above this
KEEP_SAMPLES = 256  # samples stored with a run (evenly spaced order statistics beyond this)
# A run is "noisy" past any of these (each named with its value in the reason):
SPREAD_LIMIT = 0.10  # IQR over the median
LOAD_LIMIT = 1.0  # 1-minute load average per CPU core: more runnable threads than cores
STEAL_LIMIT = 0.05  # share of CPU time a hypervisor gave to other guests during the run
# A difference smaller than this is not called significant even when its CI leaves out 1:
# samples of one run miss the drift between runs (clock, cache and neighbours change), which
# moves two runs of one kernel by a few percent on a quiet machine too.
MIN_EFFECT = 0.03
NO_SAMPLES = "no samples stored: significance unknown"


@dataclass(frozen=True)
class Estimate:
    """A timing as it is shown: sample count, median and its 95% CI (seconds), spread."""

    n: int
    median_s: float
    ci_low_s: float
    ci_high_s: float
    spread: float  # IQR over the median

    @property
    def ci_half_s(self) -> float:
        """Half the CI's width: the "±" of the median."""
        return (self.ci_high_s - self.ci_low_s) / 2

    def to_dict(self) -> dict:
        return {**asdict(self), "ci_half_s": self.ci_half_s}


@dataclass(frozen=True)
class Verdict:
    """B against baseline A. `ratio` is A's median time over B's (> 1: B is faster); `low` and
    `high` bound it at 95% (None when no samples were stored, `significant` then None too)."""

    ratio: float
    low: float | None
    high: float | None
    significant: bool | None
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Noise:
    """Whether a run's time should be distrusted, why (thresholds and values), and the values."""

    noisy: bool
    reason: str
    values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def thin(samples: list[float], keep: int = KEEP_SAMPLES) -> list[float]:
    """At most `keep` samples: evenly spaced order statistics of the sorted samples, so a run of
    thousands of calls is stored small with its distribution (median, quartiles, tails) kept."""
    ordered = sorted(float(s) for s in samples)
    if len(ordered) <= keep:
        return ordered
    step = (len(ordered) - 1) / (keep - 1)
    return [ordered[round(i * step)] for i in range(keep)]


def _quartiles(ordered: list[float]) -> tuple[float, float]:
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
        return q1, q3
    return ordered[0], ordered[-1]


def _boot_medians(samples: list[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` resamples with replacement (vectorised: a Studio run or a tune
    measurement pays milliseconds for its CI, not a second)."""
    data = np.asarray(samples, dtype=float)
    return np.median(data[rng.integers(0, len(data), (resamples, len(data)))], axis=1)


def _interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of bootstrap statistics."""
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def estimate(samples: list[float], *, seed: int = 0, resamples: int = RESAMPLES) -> Estimate:
    """Median of `samples` (seconds) with its bootstrap 95% CI; ValueError without samples."""
    ordered = sorted(float(s) for s in samples)
    if not ordered:
        raise ValueError("no timing samples")
    median = statistics.median(ordered)
    q1, q3 = _quartiles(ordered)
    if len(ordered) == 1:
        return Estimate(1, median, median, median, 0.0)
    low, high = _interval(_boot_medians(ordered, np.random.default_rng(seed), resamples))
    return Estimate(len(ordered), median, low, high, (q3 - q1) / median if median > 0 else 0.0)


def speedup_text(ratio: float, low: float, high: float, b: str = "B", a: str = "A") -> str:
    """'B is 1.24x faster than A (95% CI 1.18-1.30)', the factor and bounds >= 1 either way."""
    if ratio >= 1:
        return f"{b} is {ratio:.2f}x faster than {a} (95% CI {low:.2f}-{high:.2f})"
    return (f"{b} is {1 / ratio:.2f}x slower than {a} "
            f"(95% CI {1 / high:.2f}-{1 / low:.2f})")


def compare(a: list[float] | None, b: list[float] | None, *, a_median: float | None = None,
            b_median: float | None = None, a_label: str = "A", b_label: str = "B",
            seed: int = 0, resamples: int = RESAMPLES) -> Verdict:
    """B against baseline A by a bootstrap of the ratio of medians (A over B): significant when
    the 95% CI of the ratio leaves out 1 and the ratio is MIN_EFFECT or more from 1. Without samples on either side (a run recorded before
    samples were stored) the medians give the ratio and the verdict says significance is
    unknown."""
    if not a or not b:
        ma = statistics.median(a) if a else a_median
        mb = statistics.median(b) if b else b_median
        if not ma or not mb:
            raise ValueError("a comparison needs a time on both sides")
        ratio = ma / mb
        word = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        return Verdict(ratio, None, None, None,
                       f"{b_label} is {word} than {a_label} by the medians ({NO_SAMPLES})")
    sa, sb = sorted(map(float, a)), sorted(map(float, b))
    rng = np.random.default_rng(seed)
    low, high = _interval(_boot_medians(sa, rng, resamples) / _boot_medians(sb, rng, resamples))
    ratio = statistics.median(sa) / statistics.median(sb)
    if low <= 1.0 <= high or abs(ratio - 1) < MIN_EFFECT:
        why = "" if low <= 1.0 <= high else f"; under the {MIN_EFFECT:.0%} runs drift by"
        return Verdict(ratio, low, high, False,
                       f"no significant difference between {b_label} and {a_label} "
                       f"(ratio {ratio:.2f}, 95% CI {low:.2f}-{high:.2f}; "
                       f"n={len(sa)} and {len(sb)}{why})")
    return Verdict(ratio, low, high, True, speedup_text(ratio, low, high, b_label, a_label))


def judge_noise(spread: float | None, load: dict | None = None) -> Noise:
    """Noisy when the spread (IQR / median), the load per core or the CPU steal passes its
    limit; the reason names each value against its threshold, the quiet ones too."""
    load = load or {}
    checks = []
    if spread is not None:
        checks.append(("IQR/median", spread, SPREAD_LIMIT, "{:.0%}"))
    if load.get("load_per_core") is not None:
        checks.append(("load per core", load["load_per_core"], LOAD_LIMIT, "{:.2f}"))
    if load.get("steal") is not None:
        checks.append(("CPU steal", load["steal"], STEAL_LIMIT, "{:.1%}"))
    over = [f"{name} {fmt.format(v)} > {fmt.format(limit)}" for name, v, limit, fmt in checks
            if v > limit]
    under = [f"{name} {fmt.format(v)} (limit {fmt.format(limit)})"
             for name, v, limit, fmt in checks if v <= limit]
    values = {"spread": spread, **{k: load.get(k) for k in ("load_per_core", "steal", "load1",
                                                             "cores") if k in load}}
    if over:
        return Noise(True, "noisy: " + "; ".join(over)
                     + (f" (within limits: {', '.join(under)})" if under else ""), values)
    return Noise(False, "quiet: " + (", ".join(under) or "nothing to judge"), values)


def summary(samples: list[float] | None, *, median_s: float | None = None,
            iqr_s: float | None = None, load: dict | None = None) -> dict:
    """What a run stores and shows beside its time: n, the CI, the noisy flag and its reason.
    Without samples (an older result) the IQR gives the spread and the CI is left out."""
    out: dict = {}
    spread = None
    if samples:
        est = estimate(samples)
        spread = est.spread
        out.update(n=est.n, ci_low_s=est.ci_low_s, ci_high_s=est.ci_high_s,
                   ci_half_s=est.ci_half_s)
    elif median_s and iqr_s is not None:
        spread = iqr_s / median_s
    noise = judge_noise(spread, load)
    out.update(noisy=noise.noisy, noise_reason=noise.reason)
    return out


# ---- the machine's load (the only part that reads the machine) ----

def load_snapshot() -> dict:
    """The CPU time counters (/proc/stat's first line, jiffies) and the wall clock now; {} off
    Linux. Two snapshots bracket a run: `load_during` turns them into the run's load."""

    try:  # read before the run: the run's own threads must not count as the machine's load
        out: dict = {"t": time.time(), "load1": os.getloadavg()[0]}
    except (OSError, AttributeError):  # no load average on this system
        out = {"t": time.time(), "load1": None}
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return out
    ticks = [int(x) for x in fields]
    return {**out, "total": sum(ticks[:8]), "steal": ticks[7] if len(ticks) > 7 else 0}


def load_during(before: dict, after: dict | None = None) -> dict:
    """The machine's load over a run: the 1-minute load average per core as the run started
    and the share of CPU time stolen by a hypervisor between two `load_snapshot`s (None where
    unknown)."""
    after = after or load_snapshot()
    cores = os.cpu_count() or 1
    load1 = before.get("load1")
    steal = None
    if "total" in before and "total" in after and after["total"] > before["total"]:
        steal = (after["steal"] - before["steal"]) / (after["total"] - before["total"])
    return {"load1": load1, "cores": cores,
            "load_per_core": load1 / cores if load1 is not None else None, "steal": steal}
