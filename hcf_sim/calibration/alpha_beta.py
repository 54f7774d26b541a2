"""Calibrate alpha/beta/gamma on gloo (ping-pong, local add) and validate predicted vs measured all-reduce times."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from hcf_sim.collectives.analytical import AlphaBeta, analytical_cost
from hcf_sim.errors import HcfError
from hcf_sim.runtime.gloo import run_local
from hcf_sim.runtime.host_noise import HostNoise, HostProbe


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


def fit_cpu_cost(sizes: list[float], cpu_seconds: list[float], steps: int, share: float) -> tuple[float, float]:
    """CPU seconds per ring step (o) and per byte moved (c) from cpu = steps o + share S c (least squares)."""
    s, t = np.asarray(sizes, float), np.asarray(cpu_seconds, float)
    a = np.stack([np.full_like(s, steps), share * s], axis=1) / t[:, None]
    (o, c), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return max(float(o), 0.0), max(float(c), 0.0)


def ring_prediction(p: int, size: float, ab: AlphaBeta, cpu_step: float, cpu_byte: float, cores: int,
                    eta: tuple[float, float] = (1.0, 1.0)) -> float:
    """Predicted ring all-reduce seconds: the alpha-beta time, or, when ranks outnumber cores,
    the CPU work of all ranks spread over the cores: per-step and per-byte CPU costs, each times
    its oversubscription factor eta (1, 1 on idle cores: a step then also pays for a context
    switch, while bytes move with less spinning)."""
    c = analytical_cost("allreduce", "ring", p, size, ab)
    if p <= cores:
        return c.total
    share = p / cores
    return max(c.total, share * (eta[0] * c.steps * cpu_step
                                 + eta[1] * 2 * (p - 1) / p * size * cpu_byte))


def fit_eta(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least squares (relative) of m = eta_step L + eta_byte B over (measured m, step part L,
    byte part B)."""
    m, lat, byt = (np.asarray(x, float) for x in zip(*points))
    a = np.stack([lat / m, byt / m], axis=1)
    (e_step, e_byte), *_ = np.linalg.lstsq(a, np.ones_like(m), rcond=None)
    return max(float(e_step), 0.05), max(float(e_byte), 0.05)


def validate(ranks: list[int], sizes: list[int], iters: int = 10) -> dict:
    """Fit on held-in sizes (every other one), report errors on the held-out sizes only.

    From the 2-rank run: wall time gives alpha and beta (Hockney), the ranks' CPU time a CPU
    cost per ring step and per byte. Rank counts above the core count time-share the cores:
    their prediction is the CPU work of all ranks over the cores, with two explicit
    oversubscription factors (per step, per byte) fitted on the held-in sizes of every such
    rank count together; they are reported, never folded into alpha or beta. Each prediction
    has an interval: the larger of the model's misses and the calls' spread on the held-in
    sizes of its rank count, stretched by CPU steal and one late wake-up per ring step.
    """
    if not ranks or any(r < 2 for r in ranks):
        raise HcfError(f"validation needs rank counts >= 2, got {ranks}")
    if len(sizes) < 4:
        raise HcfError("give at least 4 sizes so that half can fit the model and half can test it")
    cores = os.cpu_count() or 1
    fit_sizes, test_sizes = sizes[::2], sizes[1::2]
    task = {"kind": "allreduce", "sizes": sizes, "iters": iters, "batch_seconds": 0.1}
    with HostProbe() as probe:
        runs = {p: {r["size"]: r for r in run_local(task, p)["rows"]} for p in sorted(set(ranks) | {2})}
    base = runs[2]
    # ring on 2 ranks: T = 2 alpha + S beta_eff (beta_eff folds in gamma / 2)
    a, b, fit_err = fit_alpha_beta(fit_sizes, [base[s]["median"] for s in fit_sizes])
    ab = AlphaBeta(a / 2, b)
    cpu_step, cpu_byte = fit_cpu_cost(fit_sizes, [base[s]["cpu_median"] for s in fit_sizes], 2, 1.0)
    points = []
    for p in (r for r in ranks if r > cores):
        steps = analytical_cost("allreduce", "ring", p, 1.0, ab).steps
        for s in fit_sizes:
            points.append((runs[p][s]["median"], p / cores * steps * cpu_step,
                           p / cores * 2 * (p - 1) / p * s * cpu_byte))
    eta = fit_eta(points) if len(points) >= 2 else (1.0, 1.0)
    rows = []
    for p in ranks:
        def predicted(s: float, p: int = p) -> float:
            return ring_prediction(p, s, ab, cpu_step, cpu_byte, cores, eta)

        low, high = spread(p, [(predicted(s), runs[p][s]) for s in fit_sizes], probe.noise)
        for s in test_sizes:
            pred, m = predicted(s), runs[p][s]["median"]
            steps = analytical_cost("allreduce", "ring", p, s, ab).steps
            band = [pred * (1 - low), pred * (1 + high) / (1 - min(probe.noise.steal_share, 0.5))
                    + steps * max(0.0, probe.noise.wake_p90_s - probe.noise.wake_median_s)]
            rows.append({"ranks": p, "size": s, "measured": m, "predicted": pred, "interval": band,
                         "inside_interval": band[0] <= m <= band[1],
                         "measured_cpu": runs[p][s]["cpu_median"], "error": abs(pred - m) / m})
    large = [r["error"] for r in rows if r["size"] >= 1 << 20]
    small = [r["error"] for r in rows if r["size"] < 64 << 10]
    return {"alpha": ab.alpha, "beta": ab.beta, "fit_error": fit_err, "cores": cores,
            "cpu_per_step": cpu_step, "cpu_per_byte": cpu_byte,
            "oversubscription_eta": {"per_step": eta[0], "per_byte": eta[1]},
            "method": "fit on held-in sizes (every other one): 2-rank wall (alpha, beta) and CPU (per "
                      "step, per byte); oversubscription factors (per step, per byte) for rank "
                      "counts above the core count; errors on the held-out sizes (nccl-tests style timing: "
                      "back-to-back calls, slowest rank)",
            "host_noise": probe.noise.to_dict(),
            "inside_interval": sum(r["inside_interval"] for r in rows) / len(rows) if rows else None,
            "rows": rows, "median_error_large": statistics.median(large) if large else None,
            "median_error_small": statistics.median(small) if small else None,
            "geomean_error_large": _geomean(large), "geomean_error_small": _geomean(small),
            "torch": torch.__version__}


def spread(p: int, held_in: list[tuple[float, dict]], noise: HostNoise) -> tuple[float, float]:
    """How far below and above a prediction for `p` ranks a measurement may land on this host:
    the larger of the model's own misses on the held-in sizes (never the held-out ones) and the
    run-to-run spread of their repeated calls (10th and 90th percentile against the median)."""
    below = [max(0.0, 1 - r["median"] / pred) for pred, r in held_in]
    above = [max(0.0, r["median"] / pred - 1) for pred, r in held_in]
    below += [1 - r["p10"] / r["median"] for _, r in held_in if r["median"] > 0]
    above += [r["p90"] / r["median"] - 1 for _, r in held_in if r["median"] > 0]
    return min(0.9, max(below, default=0.0)), max(above, default=0.0)


def _geomean(errors: list[float]) -> float | None:
    """Geometric mean of relative errors (as ASTRA-sim reports), None without any."""
    return float(np.exp(np.mean(np.log(np.maximum(errors, 1e-12))))) if errors else None
