"""Pick the fastest collective algorithm per message size from the analytical model, and say why (terms, crossovers)."""

from __future__ import annotations

from dataclasses import dataclass

from hcf_sim.collectives.analytical import (
    ALGORITHMS,
    AlphaBeta,
    CostTerms,
    analytical_cost,
    check_collective,
)
from hcf_sim.errors import check_ranks, check_size, human_bytes


@dataclass(frozen=True)
class Crossover:
    """Above `size` bytes, `to` beats `frm`."""

    size: float
    frm: str
    to: str


@dataclass(frozen=True)
class Selection:
    """The chosen algorithm, every candidate's cost terms, the reason in words and the crossover points."""

    best: str
    costs: dict[str, CostTerms]
    reason: str
    crossovers: list[Crossover]


def candidates(collective: str, p: int, group: int) -> list[str]:
    """Algorithms that make sense here (hierarchical only with >1 GPU per server and whole servers)."""
    check_collective(collective)
    out = list(ALGORITHMS[collective])
    if "hierarchical" in out and (group <= 1 or p % group or p == group):
        out.remove("hierarchical")
    return out


def _line(collective: str, algo: str, p: int, intra: AlphaBeta, inter: AlphaBeta, group: int) -> tuple[float, float]:
    # every formula is affine in S, so two evaluations give intercept and slope exactly
    c1 = analytical_cost(collective, algo, p, 1.0, intra, inter, group)
    c2 = analytical_cost(collective, algo, p, 2.0, intra, inter, group)
    slope = c2.total - c1.total
    return c1.total - slope, slope


def crossovers(collective: str, p: int, intra: AlphaBeta, inter: AlphaBeta, group: int,
               lo: float = 1.0, hi: float = float(1 << 40)) -> list[Crossover]:
    """Sizes in [lo, hi] where the fastest algorithm changes (lower envelope of the cost lines)."""
    lines = {a: _line(collective, a, p, intra, inter, group) for a in candidates(collective, p, group)}
    return envelope_crossovers(lines, lo, hi)


def envelope_crossovers(lines: dict[str, tuple[float, float]], lo: float, hi: float) -> list[Crossover]:
    """Where the lowest of several time lines (name -> (intercept s, slope s/byte)) changes, in [lo, hi]."""
    cur = min(lines, key=lambda a: (lines[a][0] + lines[a][1] * lo, lines[a][1]))
    s, out = lo, []
    while True:
        a0, b0 = lines[cur]
        nxt = None
        for a, (a1, b1) in lines.items():
            if b1 < b0 - 1e-30:
                x = (a1 - a0) / (b0 - b1)
                if x > s and (nxt is None or x < nxt[0]):
                    nxt = (x, a)
        if nxt is None or nxt[0] > hi:
            return out
        out.append(Crossover(nxt[0], cur, nxt[1]))
        s, cur = nxt


def select(collective: str, p: int, size: float, intra: AlphaBeta, inter: AlphaBeta | None = None,
           group: int = 1) -> Selection:
    """Rank the candidate algorithms by analytical time and explain the winner."""
    check_ranks(p)
    check_size(size)
    inter = inter or intra
    costs = {a: analytical_cost(collective, a, p, size, intra, inter, group)
             for a in candidates(collective, p, group)}
    order = sorted(costs, key=lambda a: costs[a].total)
    best, c = order[0], costs[order[0]]
    share = c.latency / c.total if c.total else 0.0
    bound = "latency-bound" if share > 0.5 else "bandwidth-bound"
    reason = (f"{best} is fastest for {human_bytes(size)} on {p} ranks: {c.total * 1e6:.2f} us = "
              f"{c.latency * 1e6:.2f} us latency ({c.steps} steps) + {c.bandwidth * 1e6:.2f} us bandwidth"
              + (f" + {c.reduction * 1e6:.2f} us reduction" if c.reduction else "")
              + f"; the message is {bound} ({share:.0%} of the time is latency)")
    if len(order) > 1:
        r = costs[order[1]]
        reason += f"; runner-up {order[1]} takes {r.total / c.total:.2f}x as long"
    return Selection(best, costs, reason, crossovers(collective, p, intra, inter, group))
