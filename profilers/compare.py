"""Compare two runs (a knob change, two backends, two targets): time, GFLOP/s, config, line costs.

Only like is compared with like: two timed runs of the same op at the same sizes compare by
time; timed runs of different sizes (or ops) compare by GFLOP/s, and the verdict says so; a
profiled or interpreted run has no time to compare, only its per-line costs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from profilers.runs import Run

TIME, FLOP_RATE, NO_TIMING = "time", "flop rate", "none"


@dataclass
class LineDelta:
    """Change of one ODL line's share of the kernel's instructions between two runs."""

    odl_line: int
    text: str
    share_a: float
    share_b: float
    cost_a: int
    cost_b: int

    @property
    def change(self) -> float:
        """Share in B minus share in A (percentage points / 100)."""
        return self.share_b - self.share_a


@dataclass
class Comparison:
    """The diff of run B against run A (A is the baseline)."""

    a: Run
    b: Run
    speedup: float | None  # A's time over B's: > 1 means B is faster
    time_change: float | None  # (B - A) / A
    gflops_a: float | None
    gflops_b: float | None
    config_changes: dict[str, tuple] = field(default_factory=dict)
    context_changes: dict[str, tuple] = field(default_factory=dict)  # target, backend, sizes
    lines: list[LineDelta] = field(default_factory=list)
    event: str = "Ir"
    basis: str = TIME  # what `speedup` is a ratio of: TIME, FLOP_RATE, or NO_TIMING
    why: str = ""  # why the basis is not plain time
    # the bootstrap of the ratio (uol_core.runtime.stats.Verdict.to_dict()): its 95% CI and
    # whether it leaves out 1; None without a timing comparison
    significance: dict | None = None

    @property
    def verdict(self) -> str:
        """One sentence a user reads first; it names the basis when it is not plain time."""
        if self.speedup is None:
            return f"no timing comparison: {self.why or 'no timing in one of the runs'}"
        if self.significance is not None:  # never a bare ratio: its CI, or why there is none
            text = self.significance["text"]
            return f"normalised by FLOPs ({self.why}): {text}" if self.basis == FLOP_RATE \
                else text
        if self.basis == FLOP_RATE:
            ratio = self.speedup
            rel = "the same GFLOP/s as" if abs(ratio - 1) < 0.03 else \
                f"{ratio:.2f}x the GFLOP/s of" if ratio > 1 else f"{1 / ratio:.2f}x fewer GFLOP/s than"
            return (f"normalised by FLOPs ({self.why}): {self.b.label} achieves {rel} "
                    f"{self.a.label}")
        if abs(self.speedup - 1) < 0.03:
            return f"{self.b.label} is as fast as {self.a.label} (within 3 %)"
        word = "faster" if self.speedup > 1 else "slower"
        factor = self.speedup if self.speedup > 1 else 1 / self.speedup
        return f"{self.b.label} is {factor:.2f}x {word} than {self.a.label}"

    def to_dict(self) -> dict:
        """JSON-ready diff."""
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "speedup": self.speedup,
                "time_change": self.time_change, "gflops_a": self.gflops_a,
                "gflops_b": self.gflops_b, "verdict": self.verdict,
                "config_changes": {k: list(v) for k, v in self.config_changes.items()},
                "context_changes": {k: list(v) for k, v in self.context_changes.items()},
                "lines": [{**asdict(d), "change": d.change} for d in self.lines],
                "event": self.event, "basis": self.basis, "why": self.why,
                "significance": self.significance}


def _untimed_reason(run: Run) -> str | None:
    """Why `run`'s time cannot stand in a timing comparison, or None when it can."""
    if run.mode == "profiled":
        return (f"{run.label} is a profiled run (callgrind or cycle counters), not a timed one; "
                "per-line costs are compared instead")
    if run.mode != "timed":
        return f"{run.label} is {run.mode}, with no time to compare"
    if not run.median_s:
        return f"{run.label} has no time"
    return None


def timing_basis(a: Run, b: Run) -> tuple[str, str]:
    """(basis, why) for comparing B with A: TIME for two timed runs of one op at one size,
    FLOP_RATE when the work differs but both know their FLOPs, else NO_TIMING."""
    for run in (a, b):
        reason = _untimed_reason(run)
        if reason:
            return NO_TIMING, reason
    if a.op == b.op and dict(a.sizes) == dict(b.sizes):
        return TIME, ""
    what = "ops differ" if a.op != b.op else \
        f"sizes differ: {_sizes(a.sizes)} vs {_sizes(b.sizes)}"
    if a.flops and b.flops:
        return FLOP_RATE, what
    return NO_TIMING, f"{what} and the FLOPs of one run are unknown"


def compare(a: Run, b: Run, event: str = "Ir") -> Comparison:
    """Diff run B against baseline A, like with like (see `timing_basis`)."""
    basis, why = timing_basis(a, b)
    speedup = time_change = None
    if basis == TIME:
        speedup = a.median_s / b.median_s
        time_change = (b.median_s - a.median_s) / a.median_s
    elif basis == FLOP_RATE:
        speedup = b.gflops / a.gflops
    timed = basis != NO_TIMING
    significance = _significance(a, b, basis) if timed else None
    keys = sorted(set(a.config) | set(b.config))
    config = {k: (a.config.get(k), b.config.get(k)) for k in keys
              if a.config.get(k) != b.config.get(k)}
    context = {k: (getattr(a, k), getattr(b, k))
               for k in ("op", "target", "backend", "sizes", "mode", "machine")
               if getattr(a, k) != getattr(b, k)}
    return Comparison(a, b, speedup, time_change, a.gflops if timed else None,
                      b.gflops if timed else None, config, context,
                      line_deltas(a.hotspots, b.hotspots, event), event, basis, why,
                      significance)


def _significance(a: Run, b: Run, basis: str) -> dict:
    """The bootstrap verdict of B against A on their samples (by the medians, significance
    unknown, where a run stored none). By FLOP rate the time ratio is scaled by the work."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.runtime import stats

    scale = b.flops / a.flops if basis == FLOP_RATE else 1.0
    a_s = [t / scale for t in a.samples] if a.samples else None
    verdict = stats.compare(a_s, b.samples, a_median=a.median_s / scale,
                            b_median=b.median_s, a_label=a.label, b_label=b.label)
    if basis == FLOP_RATE:  # the ratio is B's GFLOP/s over A's: say so, not "faster"
        if verdict.significant is False:
            text = (f"no significant difference in GFLOP/s between {b.label} and {a.label} "
                    f"(ratio {verdict.ratio:.2f}, 95% CI {verdict.low:.2f}-{verdict.high:.2f})")
        else:
            ci = (f" (95% CI {verdict.low:.2f}-{verdict.high:.2f})" if verdict.low is not None
                  else f" ({stats.NO_SAMPLES})")
            text = f"{b.label} achieves {verdict.ratio:.2f}x the GFLOP/s of {a.label}{ci}"
        return {**verdict.to_dict(), "text": text}
    return verdict.to_dict()


def _sizes(sizes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items()) or "-"


def line_deltas(ha: dict | None, hb: dict | None, event: str = "Ir") -> list[LineDelta]:
    """Per-ODL-line share change between two hotspot reports (kernel lines differ, ODL lines do not)."""
    if not ha or not hb:
        return []

    def shares(h: dict) -> dict[int, tuple[float, int, str]]:
        total = h["total"].get(event) or 1
        return {r["line"]: (r["costs"].get(event, 0) / total, r["costs"].get(event, 0), r["text"])
                for r in h["odl_lines"]}
    sa, sb = shares(ha), shares(hb)
    rows = []
    for line in sorted(set(sa) | set(sb)):
        share_a, cost_a, text_a = sa.get(line, (0.0, 0, ""))
        share_b, cost_b, text_b = sb.get(line, (0.0, 0, ""))
        rows.append(LineDelta(line, text_a or text_b, share_a, share_b, cost_a, cost_b))
    return rows


def render_text(c: Comparison) -> str:
    """Plain-text diff for the terminal."""
    def fmt(v: float | None, scale: float = 1.0, unit: str = "") -> str:
        return "-" if v is None else f"{v * scale:.3f}{unit}"
    # a profiled or interpreted run's time is no timing: it is not printed beside a timed one
    ma, mb = (c.a.median_s, c.b.median_s) if c.basis != NO_TIMING else (None, None)
    out = [c.verdict, "",
           f"{'':14}{'A: ' + c.a.label:>28}{'B: ' + c.b.label:>28}",
           f"{'median':14}{fmt(ma, 1e3, ' ms'):>28}{fmt(mb, 1e3, ' ms'):>28}",
           f"{'GFLOP/s':14}{fmt(c.gflops_a):>28}{fmt(c.gflops_b):>28}"]
    for k, (va, vb) in {**c.context_changes, **c.config_changes}.items():
        out.append(f"{k:14}{va!s:>28}{vb!s:>28}")
    if c.lines:
        out += ["", f"per ODL line, share of {c.event}:"]
        for d in c.lines:
            out.append(f"  line {d.odl_line:3}  {d.share_a * 100:6.1f}% -> {d.share_b * 100:6.1f}%"
                       f"  ({d.change * 100:+.1f} pt)  {d.text.strip()[:60]}")
    return "\n".join(out)
