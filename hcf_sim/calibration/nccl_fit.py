"""Calibrate and validate from a user's own nccl-tests logs.

The model is NCCL's: for each protocol regime a line t = latency + S x bus factor / busbw, and
the run takes the fastest (the lower envelope), as NCCL's tuner picks the fastest protocol. Up to
three lines are fitted, on contiguous ranges of the held-in sizes (the split points are searched
exhaustively, least squares weighted by 1/t so that every size counts by its relative error).
Other collectives are predicted from the same regimes: NCCL's step count scales the latency and
the nccl-tests bus factor converts bus bandwidth, so no parameter is fitted on them.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hcf_sim.calibration.nccl_log import NcclRun, read_nccl_log
from hcf_sim.collectives.analytical import canonical_collective
from hcf_sim.errors import HcfError, check_name, human_bytes

BANDS = (("<= 64 KiB", 0, 64 << 10), ("64 KiB - 1 MiB", (64 << 10) + 1, (1 << 20) - 1),
         (">= 1 MiB", 1 << 20, 1 << 62))
_STEPS = {"allreduce": lambda p: 2 * (p - 1), "allgather": lambda p: p - 1,
          "reducescatter": lambda p: p - 1, "alltoall": lambda p: p - 1,
          "broadcast": lambda p: p, "reduce": lambda p: p}


def bus_factor(coll: str, p: int) -> float:
    """nccl-tests busbw/algbw for this collective."""
    if coll == "allreduce":
        return 2 * (p - 1) / p
    return (p - 1) / p if coll in ("allgather", "reducescatter", "alltoall") else 1.0


@dataclass
class Regime:
    """One fitted line: latency (us) and bus bandwidth (GB/s), fitted on sizes lo..hi."""

    latency_us: float
    busbw_gbps: float
    lo: int
    hi: int


@dataclass
class LogFit:
    """A cluster fitted from one collective's run: its regimes and what they were fitted on."""

    collective: str
    ranks: int
    regimes: list[Regime]
    fit_sizes: list[int]
    fit_error: float  # median relative error on the fitted sizes
    sources: list[str] = field(default_factory=list)

    def predict_us(self, collective: str, size: float) -> float:
        """Predicted time of `collective` at `size` bytes on the fitted cluster (us)."""
        coll = canonical_collective(collective)
        if coll not in _STEPS:
            raise HcfError(f"cannot predict {collective!r}; known: {', '.join(_STEPS)}")
        p = self.ranks
        steps = _STEPS[coll](p) / _STEPS[self.collective](p)
        bf = bus_factor(coll, p)
        return min(r.latency_us * steps + size * bf / (r.busbw_gbps * 1e3) for r in self.regimes)

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def _line(s: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    # weighted least squares of t = a + b S with weights 1/t; a >= 0 and b > 0 kept physical
    w = 1.0 / t
    (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(s), s], 1) * w[:, None], t * w, rcond=None)
    return max(float(a), 0.0), max(float(b), 1e-9 / 1e3)


def _envelope(lines: list[tuple[float, float]], s: np.ndarray) -> np.ndarray:
    return np.min([a + b * s for a, b in lines], axis=0)


def fit_envelope(sizes: list[int], times: list[float], max_lines: int = 3) -> tuple[list[tuple], float]:
    """Lines (a us, b us/B, lo, hi) whose lower envelope fits the points best; and its median error."""
    s, t = np.asarray(sizes, float), np.asarray(times, float)
    if len(s) < 2 or np.any(t <= 0):
        raise HcfError("need at least two sizes with positive times to fit a latency and a bandwidth")
    order = np.argsort(s)
    s, t = s[order], t[order]
    best: tuple[float, list[tuple]] | None = None
    for k in range(1, min(max_lines, len(s) // 2) + 1):
        for cuts in itertools.combinations(range(2, len(s) - 1), k - 1):
            edges = [0, *cuts, len(s)]
            if any(edges[i + 1] - edges[i] < 2 for i in range(k)):
                continue
            lines = [(*_line(s[a:b], t[a:b]), int(s[a]), int(s[b - 1]))
                     for a, b in itertools.pairwise(edges)]
            err = float(np.mean((np.abs(_envelope([ln[:2] for ln in lines], s) - t) / t) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, lines)
    assert best is not None
    lines = best[1]
    med = float(np.median(np.abs(_envelope([ln[:2] for ln in lines], s) - t) / t))
    return lines, med


def _runs(paths: list[str]) -> list[NcclRun]:
    if not paths:
        raise HcfError("give at least one nccl-tests output file with --from")
    out: list[NcclRun] = []
    for p in paths:
        out.extend(read_nccl_log(p))
    return out


def _pick(runs: list[NcclRun], collective: str | None, ranks: int | None) -> NcclRun:
    """The run to fit: the first of `collective` (or the first named one); --ranks fills in counts."""
    for r in runs:
        if ranks:
            r.ranks = ranks
    want = canonical_collective(collective) if collective else None
    if want and not any(r.collective for r in runs):
        runs[0].collective = collective  # an unnamed log: the user says what it measured
    for r in runs:
        if r.collective and (want is None or canonical_collective(r.collective) == want):
            if r.ranks < 2:
                raise HcfError(f"{r.source}: cannot tell the rank count (no 'Rank' lines); give --ranks")
            return r
    found = ", ".join(sorted({r.collective or "?" for r in runs}))
    raise HcfError(f"no {'run of ' + collective if collective else 'named collective'} in the logs "
                   f"(found: {found}); give --collective, e.g. all_reduce")


def fit_run(run: NcclRun, held_in: list[int] | None = None) -> LogFit:
    """Fit the regimes on `held_in` sizes of a run (all its sizes when None)."""
    rows = [r for r in run.rows if r.size > 0 and (held_in is None or r.size in held_in)]
    coll = canonical_collective(run.collective or "")
    if coll not in _STEPS:
        raise HcfError(f"{run.source}: cannot fit collective {run.collective!r}")
    lines, err = fit_envelope([r.size for r in rows], [r.time_us for r in rows])
    bf = bus_factor(coll, run.ranks)
    regimes = sorted((Regime(a, bf / (b * 1e3), lo, hi) for a, b, lo, hi in lines),
                     key=lambda g: g.lo)
    return LogFit(coll, run.ranks, regimes, [r.size for r in rows], err, [run.source])


def calibrate_from_logs(paths: list[str], collective: str | None = None,
                        ranks: int | None = None) -> LogFit:
    """Fit a cluster on every size of one collective's run in the logs."""
    return fit_run(_pick(_runs(paths), collective, ranks))


def _band(size: int) -> str:
    return next(name for name, lo, hi in BANDS if lo <= size <= hi)


def _summary(rows: list[dict]) -> dict:
    out = {}
    for name, _, _ in BANDS:
        errs = [r["error"] for r in rows if r["band"] == name]
        if errs:
            out[name] = {"n": len(errs), "median": statistics.median(errs),
                         "geomean": float(np.exp(np.mean(np.log(np.maximum(errs, 1e-12))))),
                         "max": max(errs)}
    return out


def validate_from_logs(paths: list[str], collective: str | None = None,
                       ranks: int | None = None) -> dict:
    """Fit on the held-in half of one run's sizes (every other one); errors on the held-out sizes,
    and on every other collective in the logs (same rank count), per size band."""
    runs = _runs(paths)
    run = _pick(runs, collective, ranks)
    sizes = sorted({r.size for r in run.rows if r.size > 0})
    if len(sizes) < 4:
        raise HcfError(f"{run.source}: {len(sizes)} sizes; give a log with at least 4 so that half "
                       "can fit the model and half can test it")
    fit = fit_run(run, sizes[::2])
    rows = []
    for other in runs:
        same = other is run
        if other.ranks != run.ranks or not other.collective:
            continue
        kind = "held-out size" if same else (
            "held-out collective" if canonical_collective(other.collective) != fit.collective
            else "other run")
        for r in other.rows:
            if r.size <= 0 or (same and r.size in fit.fit_sizes):
                continue
            pred = fit.predict_us(other.collective, r.size)
            rows.append({"kind": kind, "collective": other.collective, "size": r.size,
                         "band": _band(r.size), "measured_us": r.time_us, "predicted_us": pred,
                         "error": abs(pred - r.time_us) / r.time_us, "line": r.line,
                         "source": other.source})
    by_kind = {k: _summary([r for r in rows if r["kind"] == k])
               for k in ("held-out size", "held-out collective", "other run")
               if any(r["kind"] == k for r in rows)}
    return {"fit": fit.to_dict(), "rows": rows, "summary": by_kind,
            "method": "fit on every other size of the first run of the chosen collective; "
                      "errors on the sizes between and on the other collectives' runs"}


def preset_topology(fit: LogFit, name: str) -> dict:
    """The fitted cluster as a custom topology (GPUs on one switch) the IDE's comm page can load.

    On a star, the simulator's ring all-reduce is 2(p-1) steps of the link's step latency plus
    2(p-1)/p S over the link bandwidth: the step latency is the regime's latency / 2(p-1) and
    the link bandwidth its busbw, so the page reproduces each fitted regime exactly.
    """
    check_name("preset name", name)
    p = fit.ranks
    steps = _STEPS["allreduce"](p)
    # smallest-latency regime for LL, largest for Simple, the middle one (if any) for LL128
    regs = sorted(fit.regimes, key=lambda g: g.latency_us)
    by_proto = {"LL": regs[0], "LL128": regs[len(regs) // 2], "Simple": regs[-1]}
    scale = _STEPS["allreduce"](p) / _STEPS[fit.collective](p)
    step_us = {k: g.latency_us * scale / steps for k, g in by_proto.items()}
    nodes = [{"id": f"gpu{i}", "kind": "gpu"} for i in range(p)] + [{"id": "switch", "kind": "switch"}]
    links = [{"src": f"gpu{i}", "dst": "switch", "bandwidth_gbps": by_proto["Simple"].busbw_gbps,
              "latency_us": 0.0, "step_latency_us": step_us, "protocol": "calibrated"}
             for i in range(p)]
    return {"name": name, "group_size": p, "nodes": nodes, "links": links,
            "calibration": {"from": [Path(s).name for s in fit.sources],
                            "collective": fit.collective, "ranks": p,
                            "regimes": [asdict(g) for g in fit.regimes],
                            "fit_error": fit.fit_error,
                            "note": "link bandwidth = the Simple regime's busbw; step latency per "
                                    "protocol = regime latency / 2(p-1)"}}


def describe(fit: LogFit) -> list[str]:
    """One line per regime, for the CLI."""
    return [f"{human_bytes(g.lo)} - {human_bytes(g.hi)}: latency {g.latency_us:.2f} us, "
            f"busbw {g.busbw_gbps:.1f} GB/s" for g in fit.regimes]
