"""Where the C backend's erf constants come from: a rational fit erf(x) ~= x P(x^2) / Q(x^2).

`uol_erff` (uol_core/backends/c/text/vmath.py) clamps x to [-XMAX, XMAX] and evaluates P (degree 6
in x^2) and Q (degree 4) by Horner: 13 fused multiply-adds and one division, no exp and no
branch, so a GELU loop stays one vector stream. This script refits the constants: a linearised
least-squares fit of the relative error, reweighted towards its worst points (Lawson's
algorithm) until the error is near equal-ripple; it prints the fit's error in double
precision and in float32 arithmetic, and the C constants.

Usage: python benchmarks/erf_fit.py [--xmax 3.92] [--iterations 200]
XMAX: float32 erf rounds to 1 from about 3.85 on, so the clamp costs nothing beyond it.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.special import erf

P_DEGREE, Q_DEGREE = 6, 4


def fit(xmax: float, iterations: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients of P and Q (lowest first, Q[0] = 1) and the fit's largest relative error."""
    x = np.unique(np.concatenate([np.linspace(1e-4, xmax, 20000),
                                  xmax * (1 - np.cos(np.linspace(0, np.pi / 2, 4000)))]))
    x = x[x > 0]  # erf(x) / x is 2 / sqrt(pi) at 0, where the division cannot say so
    t, target = x * x, erf(x) / x
    # P(t) - target * (Q(t) - 1) = target, divided by target: relative residuals
    basis = np.stack([t ** i for i in range(P_DEGREE + 1)]
                     + [-target * t ** i for i in range(1, Q_DEGREE + 1)], 1) / target[:, None]
    weights = np.ones_like(x)
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(iterations):
        root = np.sqrt(weights)
        coef, *_ = np.linalg.lstsq(basis * root[:, None], root, rcond=None)
        p, q = coef[:P_DEGREE + 1], np.concatenate([[1.0], coef[P_DEGREE + 1:]])
        error = np.abs(np.polyval(p[::-1], t) / np.polyval(q[::-1], t) / target - 1)
        if best is None or error.max() < best[2]:
            best = (p, q, float(error.max()))
        weights = weights * error
        weights /= weights.max()
    assert best is not None
    return best


def float32_error(p: np.ndarray, q: np.ndarray, xmax: float) -> float:
    """Largest relative error of the float32 evaluation over [-9, 9] and tiny arguments."""
    x = np.concatenate([np.linspace(-9, 9, 2_000_001), np.logspace(-38, -1, 2000)])
    x32 = np.clip(x.astype(np.float32), -xmax, xmax)
    t = x32 * x32
    num, den = np.float32(p[-1]), np.float32(q[-1])
    for c in p[-2::-1]:
        num = num * t + np.float32(c)
    for c in q[-2::-1]:
        den = den * t + np.float32(c)
    got = (x32 * num / den).astype(np.float64)
    want = erf(x.astype(np.float32).astype(np.float64))
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xmax", type=float, default=3.92)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    p, q, error = fit(args.xmax, args.iterations)
    print(f"fit on [0, {args.xmax}]: largest relative error {error:.2e} (double), "
          f"{float32_error(p, q, args.xmax):.2e} (float32, no fma)")
    for name, coefficients in (("P", p), ("Q", q)):
        print(f"{name}:", ", ".join(_c_float(c) for c in coefficients))


def _c_float(value: float) -> str:
    """The shortest decimal that reads back as the same float32, as a C float literal."""
    return np.format_float_scientific(np.float32(value), unique=True, trim="-") + "f"


if __name__ == "__main__":
    main()
