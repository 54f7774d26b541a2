"""Analytical alpha-beta-gamma costs of collectives (Thakur-Rabenseifner-Gropp forms) and nccl-tests algbw/busbw."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hcf_sim.errors import HcfError, check_ranks, check_size, require_nonnegative, require_positive

# Which algorithms exist for which collective; the selector and the CLI read this table.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "recursive_doubling", "rabenseifner", "hierarchical"),
    "allgather": ("ring", "recursive_doubling"),
    "reducescatter": ("ring", "recursive_halving"),
    "alltoall": ("pairwise", "bruck"),
    "broadcast": ("tree", "scatter_allgather"),
}


@dataclass(frozen=True)
class AlphaBeta:
    """Hockney parameters: alpha s per message, beta s per byte, gamma s per reduced byte."""

    alpha: float
    beta: float
    gamma: float = 0.0

    def __post_init__(self) -> None:
        require_nonnegative("alpha (latency)", self.alpha)
        require_positive("beta (s/byte; 1/bandwidth)", self.beta)
        require_nonnegative("gamma (reduction s/byte)", self.gamma)

    @classmethod
    def from_bandwidth(cls, latency_s: float, bandwidth_bps: float, gamma: float = 0.0) -> AlphaBeta:
        """Build from a latency (s) and a bandwidth (bytes/s), checking the bandwidth is positive."""
        require_positive("bandwidth", bandwidth_bps, "bytes/s")
        return cls(latency_s, 1.0 / bandwidth_bps, gamma)


@dataclass(frozen=True)
class CostTerms:
    """A cost split into its alpha (latency), beta (bandwidth) and gamma (reduction) terms, in seconds."""

    latency: float
    bandwidth: float
    reduction: float
    steps: int

    @property
    def total(self) -> float:
        """Total time in seconds."""
        return self.latency + self.bandwidth + self.reduction

    def __add__(self, o: CostTerms) -> CostTerms:
        return CostTerms(self.latency + o.latency, self.bandwidth + o.bandwidth,
                         self.reduction + o.reduction, self.steps + o.steps)


def _lg(p: int) -> int:
    return int(math.log2(p)) if p > 1 else 0


def _is_pow2(p: int) -> bool:
    return p & (p - 1) == 0


def _terms(steps: float, bw_bytes: float, red_bytes: float, ab: AlphaBeta) -> CostTerms:
    return CostTerms(steps * ab.alpha, bw_bytes * ab.beta, red_bytes * ab.gamma, int(steps))


# Each rule: (p, S, ab) -> CostTerms. S is the nccl-tests size: the buffer for all-reduce/broadcast,
# the whole gathered array for all-gather/reduce-scatter, the per-rank send buffer for all-to-all.
def _ar_ring(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    f = (p - 1) / p
    return _terms(2 * (p - 1), 2 * f * s, f * s, ab)


def _ar_rd(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    lg = _lg(p)
    if _is_pow2(p):
        return _terms(lg, lg * s, lg * s, ab)
    # non-power-of-two: fold the extra ranks in and out (one extra step each way)
    return _terms(lg + 2, (lg + 2) * s, (lg + 1) * s, ab)


def _ar_rabenseifner(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    if _is_pow2(p):
        f = (p - 1) / p
        return _terms(2 * _lg(p), 2 * f * s, f * s, ab)
    # MPICH non-power-of-two form: (2 floor(lgp) + 2) alpha + (2(p'-1)/p' + 2) n beta + (1 + (p'-1)/p') n gamma
    p2 = 1 << _lg(p)
    f = (p2 - 1) / p2
    return _terms(2 * _lg(p) + 2, (2 * f + 2) * s, (1 + f) * s, ab)


def _ar_tree(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    # binomial reduce then binomial broadcast, whole buffer per step
    lg = math.ceil(math.log2(p)) if p > 1 else 0
    return _terms(2 * lg, 2 * lg * s, lg * s, ab)


def _ag_ring(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    return _terms(p - 1, (p - 1) / p * s, 0.0, ab)


def _ag_rd(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    # recursive doubling for powers of two, Bruck (ceil lgp steps) otherwise: same volume
    return _terms(math.ceil(math.log2(p)) if p > 1 else 0, (p - 1) / p * s, 0.0, ab)


def _rs_ring(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    f = (p - 1) / p
    return _terms(p - 1, f * s, f * s, ab)


def _rs_rh(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    if _is_pow2(p):
        f = (p - 1) / p
        return _terms(_lg(p), f * s, f * s, ab)
    # fold the extra ranks in (one full-buffer step), halve among 2^floor(lgp), hand the extras their block
    p2 = 1 << _lg(p)
    f2 = (p2 - 1) / p2
    return _terms(_lg(p) + 2, f2 * s + s + s / p, f2 * s + s, ab)


def _a2a_pairwise(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    return _terms(p - 1, (p - 1) / p * s, 0.0, ab)


def _a2a_bruck(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    lg = math.ceil(math.log2(p)) if p > 1 else 0
    return _terms(lg, s / 2 * lg, 0.0, ab)


def _bc_tree(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    lg = math.ceil(math.log2(p)) if p > 1 else 0
    return _terms(lg, lg * s, 0.0, ab)


def _bc_scatter_ag(p: int, s: float, ab: AlphaBeta) -> CostTerms:
    # binomial scatter (lgp steps, (p-1)/p S) then ring all-gather ((p-1) steps, (p-1)/p S)
    lg = math.ceil(math.log2(p)) if p > 1 else 0
    f = (p - 1) / p
    return _terms(lg + p - 1, 2 * f * s, 0.0, ab)


RULES: dict[tuple[str, str], Callable[[int, float, AlphaBeta], CostTerms]] = {
    ("allreduce", "ring"): _ar_ring,
    ("allreduce", "recursive_doubling"): _ar_rd,
    ("allreduce", "rabenseifner"): _ar_rabenseifner,
    ("allreduce", "tree"): _ar_tree,
    ("allgather", "ring"): _ag_ring,
    ("allgather", "recursive_doubling"): _ag_rd,
    ("reducescatter", "ring"): _rs_ring,
    ("reducescatter", "recursive_halving"): _rs_rh,
    ("alltoall", "pairwise"): _a2a_pairwise,
    ("alltoall", "bruck"): _a2a_bruck,
    ("broadcast", "tree"): _bc_tree,
    ("broadcast", "scatter_allgather"): _bc_scatter_ag,
}


def canonical_collective(name: str) -> str:
    """'all-reduce', 'all_reduce', 'AllReduce' -> 'allreduce'."""
    return name.replace("-", "").replace("_", "").lower()


def check_collective(collective: str, algorithm: str | None = None) -> None:
    """Raise HcfError unless the collective (and algorithm, if given) exist."""
    collective = canonical_collective(collective)
    if collective not in ALGORITHMS:
        raise HcfError(f"unknown collective {collective!r}; choose one of {', '.join(ALGORITHMS)}")
    if algorithm is not None and algorithm not in ALGORITHMS[collective]:
        raise HcfError(f"{collective} has no algorithm {algorithm!r}; choose one of "
                       f"{', '.join(ALGORITHMS[collective])} (or 'auto')")


def hierarchical_allreduce(p: int, size: float, intra: AlphaBeta, inter: AlphaBeta, group: int) -> CostTerms:
    """2D all-reduce: ring reduce-scatter in each group of `group` GPUs, ring all-reduce of S/group across groups, ring all-gather."""
    if group < 1 or p % group:
        raise HcfError(f"hierarchical all-reduce needs ranks ({p}) divisible by the group size ({group})")
    n = p // group
    rs = _rs_ring(group, size, intra) if group > 1 else CostTerms(0, 0, 0, 0)
    ar = _ar_ring(n, size / group, inter) if n > 1 else CostTerms(0, 0, 0, 0)
    ag = _ag_ring(group, size, intra) if group > 1 else CostTerms(0, 0, 0, 0)
    return rs + ar + ag


def analytical_cost(collective: str, algorithm: str, p: int, size: float, ab: AlphaBeta,
                    inter: AlphaBeta | None = None, group: int = 1) -> CostTerms:
    """Cost terms of one collective with the named algorithm on p ranks and `size` bytes."""
    check_collective(collective, algorithm)
    check_ranks(p)
    check_size(size)
    if p == 1:
        return CostTerms(0.0, 0.0, 0.0, 0)
    if algorithm == "hierarchical":
        return hierarchical_allreduce(p, size, ab, inter or ab, group)
    return RULES[(collective, algorithm)](p, size, inter or ab)


def bus_factor(collective: str, p: int) -> float:
    """nccl-tests busbw/algbw factor: 2(p-1)/p all-reduce, (p-1)/p AG/RS/A2A, 1 broadcast."""
    check_collective(collective)
    if collective == "allreduce":
        return 2 * (p - 1) / p
    if collective == "broadcast":
        return 1.0
    return (p - 1) / p


def algbw(size: float, seconds: float) -> float:
    """nccl-tests algorithm bandwidth S/t in bytes/s."""
    return size / seconds if seconds > 0 else float("inf")


def busbw(collective: str, p: int, size: float, seconds: float) -> float:
    """nccl-tests bus bandwidth = algbw x bus factor, in bytes/s."""
    return algbw(size, seconds) * bus_factor(collective, p)
