"""Collective algorithms as phases of concurrent point-to-point flows, for the flow-level simulator and the gloo runtime."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hcf_sim.collectives.analytical import check_collective
from hcf_sim.errors import HcfError


@dataclass(frozen=True)
class Phase:
    """One algorithm step: flows src[i] -> dst[i] of nbytes[i] bytes, run `repeat` times in a row."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduce_bytes: float  # bytes each rank reduces after the step (gamma term)
    repeat: int = 1
    label: str = ""


def _phase(pairs: list[tuple[int, int]] | tuple[np.ndarray, np.ndarray], nbytes: float | np.ndarray,
           reduce_bytes: float = 0.0, repeat: int = 1, label: str = "") -> Phase:
    if isinstance(pairs, tuple):
        src, dst = pairs
    else:
        src = np.array([a for a, _ in pairs], dtype=np.int64)
        dst = np.array([b for _, b in pairs], dtype=np.int64)
    nb = np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape).copy()
    return Phase(src, dst, nb, float(reduce_bytes), repeat, label)


def _shift(p: int, k: int, ranks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r = np.arange(p) if ranks is None else ranks
    return r, r[(np.arange(len(r)) + k) % len(r)]


def _pow2_below(p: int) -> int:
    return 1 << int(math.log2(p))


def _fold(p: int, s: float, reduce: bool, back: bool) -> Phase:
    # non-power-of-two: the ranks past the largest power of two pair with the first ones
    p2 = _pow2_below(p)
    pairs = [(r, r - p2) for r in range(p2, p)] if not back else [(r - p2, r) for r in range(p2, p)]
    return _phase(pairs, s, s if reduce else 0.0, label="fold" if not back else "unfold")


def _ring_ar(p: int, s: float, ranks: np.ndarray | None = None, label: str = "") -> list[Phase]:
    pr = _shift(p, 1, ranks)
    return [_phase(pr, s / p, s / p, p - 1, f"{label}reduce-scatter"),
            _phase(pr, s / p, 0.0, p - 1, f"{label}all-gather")]


def _rd_ar(p: int, s: float) -> list[Phase]:
    p2 = _pow2_below(p)
    out = [_fold(p, s, True, False)] if p2 < p else []
    for k in range(int(math.log2(p2))):
        out.append(_phase([(i, i ^ (1 << k)) for i in range(p2)], s, s, label=f"exchange {k}"))
    return out + ([_fold(p, s, False, True)] if p2 < p else [])


def _rhd(p2: int, s: float, reduce_scatter: bool = True, all_gather: bool = True) -> list[Phase]:
    lg, out = int(math.log2(p2)), []
    if reduce_scatter:
        for k in range(lg):
            d = p2 >> (k + 1)
            out.append(_phase([(i, i ^ d) for i in range(p2)], s / (2 << k), s / (2 << k), label=f"halving {k}"))
    if all_gather:
        for k in reversed(range(lg)):
            d = p2 >> (k + 1)
            out.append(_phase([(i, i ^ d) for i in range(p2)], s / (2 << k), label=f"doubling {k}"))
    return out


def _rabenseifner(p: int, s: float) -> list[Phase]:
    p2 = _pow2_below(p)
    pre = [_fold(p, s, True, False)] if p2 < p else []
    return pre + _rhd(p2, s) + ([_fold(p, s, False, True)] if p2 < p else [])


def _binomial(p: int, s: float, reduce: bool) -> list[Phase]:
    lg = math.ceil(math.log2(p))
    steps = []
    for k in range(lg):  # broadcast order: rank i < 2^k sends to i + 2^k
        steps.append(_phase([(i, i + (1 << k)) for i in range(1 << k) if i + (1 << k) < p], s,
                            label=f"tree {k}"))
    if reduce:  # reduce is the broadcast reversed, with a reduction on arrival
        return [_phase((ph.dst, ph.src), s, s, label=f"reduce {i}") for i, ph in enumerate(reversed(steps))]
    return steps


def _hierarchical(p: int, s: float, group: int) -> list[Phase]:
    if group < 1 or p % group:
        raise HcfError(f"hierarchical all-reduce needs ranks ({p}) divisible by the group size ({group})")
    n, out = p // group, []
    ranks = np.arange(p).reshape(n, group)
    if group > 1:  # every server runs its ring at the same time
        src = ranks.ravel()
        dst = np.roll(ranks, -1, axis=1).ravel()
        out.append(_phase((src, dst), s / group, s / group, group - 1, "intra reduce-scatter"))
    if n > 1:  # local rank l of every server joins the ring of rail l
        src = ranks.T.ravel()
        dst = np.roll(ranks, -1, axis=0).T.ravel()
        out.append(_phase((src, dst), s / p, s / p, n - 1, "inter reduce-scatter"))
        out.append(_phase((src, dst), s / p, 0.0, n - 1, "inter all-gather"))
    if group > 1:
        out.append(_phase((ranks.ravel(), np.roll(ranks, -1, axis=1).ravel()), s / group, 0.0, group - 1,
                          "intra all-gather"))
    return out


def _ag_rd(p: int, s: float) -> list[Phase]:
    out, blk = [], s / p
    if p & (p - 1) == 0:
        for k in range(int(math.log2(p))):
            out.append(_phase([(i, i ^ (1 << k)) for i in range(p)], blk * (1 << k), label=f"doubling {k}"))
        return out
    for k in range(math.ceil(math.log2(p))):  # Bruck: send to i - 2^k
        out.append(_phase(_shift(p, -(1 << k)), blk * min(1 << k, p - (1 << k)), label=f"bruck {k}"))
    return out


def _rs_rh(p: int, s: float) -> list[Phase]:
    p2 = _pow2_below(p)
    if p2 == p:
        return _rhd(p, s, all_gather=False)
    return [_fold(p, s, True, False), *_rhd(p2, s, all_gather=False),
            _phase([(r - p2, r) for r in range(p2, p)], s / p, label="unfold")]


def _scatter_ag(p: int, s: float) -> list[Phase]:
    lg, out, blk = math.ceil(math.log2(p)), [], s / p
    for k in reversed(range(lg)):  # binomial scatter from rank 0, halves first
        pairs = [(i, i + (1 << k)) for i in range(0, p, 2 << k) if i + (1 << k) < p]
        sizes = [blk * min(1 << k, p - j) for _, j in pairs]
        out.append(_phase(pairs, np.array(sizes), label=f"scatter {k}"))
    return [*out, _phase(_shift(p, 1), blk, 0.0, p - 1, "all-gather")]


def phases(collective: str, algorithm: str, p: int, size: float, group: int = 1) -> list[Phase]:
    """The phases of `algorithm` for `collective` on p ranks and size bytes (nccl-tests size convention)."""
    check_collective(collective, algorithm)
    if p == 1:
        return []
    table = {
        ("allreduce", "ring"): lambda: _ring_ar(p, size),
        ("allreduce", "recursive_doubling"): lambda: _rd_ar(p, size),
        ("allreduce", "rabenseifner"): lambda: _rabenseifner(p, size),
        ("allreduce", "tree"): lambda: _binomial(p, size, True) + _binomial(p, size, False),
        ("allreduce", "hierarchical"): lambda: _hierarchical(p, size, group),
        ("allgather", "ring"): lambda: [_phase(_shift(p, 1), size / p, 0.0, p - 1, "ring")],
        ("allgather", "recursive_doubling"): lambda: _ag_rd(p, size),
        ("reducescatter", "ring"): lambda: [_phase(_shift(p, 1), size / p, size / p, p - 1, "ring")],
        ("reducescatter", "recursive_halving"): lambda: _rs_rh(p, size),
        ("alltoall", "pairwise"): lambda: [_phase(_shift(p, k), size / p, label=f"shift {k}") for k in range(1, p)],
        ("alltoall", "bruck"): lambda: [_phase(_shift(p, 1 << k), size / 2, label=f"bruck {k}")
                                        for k in range(math.ceil(math.log2(p)))],
        ("broadcast", "tree"): lambda: _binomial(p, size, False),
        ("broadcast", "scatter_allgather"): lambda: _scatter_ag(p, size),
    }
    return table[(collective, algorithm)]()
