"""Calibrate alpha/beta/gamma on gloo (ping-pong, local add) and validate predicted vs measured all-reduce times."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from hcf_sim.collectives import AlphaBeta, analytical_cost
from hcf_sim.errors import HcfError
from hcf_sim.runtime import run_local


@dataclass(frozen=True)
class Calibration:
    """Fitted Hockney parameters and how well the fit explains its own points."""

    alpha: float
    beta: float
    gamma: float
    fit_error: float  # median relative error of the fit on its points
    source: str

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)

    def params(self) -> AlphaBeta:
        """As AlphaBeta for the cost formulas."""
        return AlphaBeta(self.alpha, self.beta, self.gamma)


def fit_alpha_beta(sizes: list[float], times: list[float]) -> tuple[float, float, float]:
    """Weighted least squares of t = alpha + S beta with weights 1/t (relative error); returns alpha, beta, median error."""
    s, t = np.asarray(sizes, float), np.asarray(times, float)
    if len(s) < 2 or np.any(t <= 0):
        raise HcfError("need at least two sizes with positive times to fit alpha and beta")
    w = 1.0 / t
    a = np.stack([np.ones_like(s), s], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, t * w, rcond=None)
    alpha, beta = max(float(alpha), 0.0), max(float(beta), 1e-15)
    err = float(np.median(np.abs(alpha + beta * s - t) / t))
    return alpha, beta, err


def measure_gamma(nbytes: int = 8 << 20, iters: int = 10) -> float:
    """Seconds per byte of a local fp32 add (the reduction cost gamma), one thread as in the gloo ranks."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a, b = torch.ones(nbytes // 4), torch.ones(nbytes // 4)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        a.add_(b)
        ts.append(time.perf_counter() - t0)
    torch.set_num_threads(threads)
    return statistics.median(ts) / nbytes


def calibrate(sizes: list[int] | None = None, iters: int = 20) -> Calibration:
    """Ping-pong between two gloo processes on 127.0.0.1, fit alpha and beta; gamma from a local add."""
    sizes = sizes or [1 << k for k in range(3, 25, 3)]
    res = run_local({"kind": "pingpong", "sizes": sizes, "iters": iters}, 2)
    a, b, err = fit_alpha_beta([r["size"] for r in res["rows"]], [r["median"] for r in res["rows"]])
    return Calibration(a, b, measure_gamma(), err, "gloo ping-pong (2 processes, 127.0.0.1)")


def _ring_pred(p: int, size: float, ab: AlphaBeta, cores: int) -> float:
    # more ranks than cores time-share the CPUs: the bandwidth term scales by the oversubscription factor
    c = analytical_cost("allreduce", "ring", p, size, ab)
    return c.latency + (c.bandwidth + c.reduction) * max(1.0, p / cores)


def validate(ranks: list[int], sizes: list[int], iters: int = 10) -> dict:
    """Fit (alpha, beta) on a 2-rank all-reduce at every other size; report errors on the held-out sizes and on other rank counts."""
    if not ranks or any(r < 2 for r in ranks):
        raise HcfError(f"validation needs rank counts >= 2, got {ranks}")
    if len(sizes) < 4:
        raise HcfError("give at least 4 sizes so that half can fit the model and half can test it")
    cores = os.cpu_count() or 1
    fit_sizes, test_sizes = sizes[::2], sizes[1::2]
    base = run_local({"kind": "allreduce", "sizes": sizes, "iters": iters}, 2)
    meas2 = {r["size"]: r["median"] for r in base["rows"]}
    # ring on 2 ranks: T = 2 alpha + S beta_eff (beta_eff folds in gamma / 2)
    a, b, fit_err = fit_alpha_beta(fit_sizes, [meas2[s] for s in fit_sizes])
    ab = AlphaBeta(a / 2, b)
    rows = []
    for p in ranks:
        meas = meas2 if p == 2 else {r["size"]: r["median"] for r in
                                    run_local({"kind": "allreduce", "sizes": sizes, "iters": iters}, p)["rows"]}
        pab, check = ab, (test_sizes if p == 2 else sizes)
        if p > cores:
            # one extra, explicit parameter: a per-step latency under time-sharing, fitted on the smallest size only
            c = analytical_cost("allreduce", "ring", p, sizes[0], ab)
            bw = (c.bandwidth + c.reduction) * p / cores
            pab = AlphaBeta(max(meas[sizes[0]] - bw, 0.0) / c.steps, ab.beta)
            check = sizes[1:]
        for s in check:
            pred = _ring_pred(p, s, pab, cores)
            rows.append({"ranks": p, "size": s, "measured": meas[s], "predicted": pred,
                         "error": abs(pred - meas[s]) / meas[s]})
    large = [r["error"] for r in rows if r["size"] >= 1 << 20]
    small = [r["error"] for r in rows if r["size"] < 64 << 10]
    return {"alpha": ab.alpha, "beta": ab.beta, "fit_error": fit_err, "cores": cores,
            "method": "fit on 2-rank all-reduce at every other size; errors on held-out sizes and other rank counts",
            "rows": rows, "median_error_large": statistics.median(large) if large else None,
            "median_error_small": statistics.median(small) if small else None,
            "torch": torch.__version__}
