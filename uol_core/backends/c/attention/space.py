"""Search space of the C flash-attention kernels (backends/c/attention/forward.py forward,
c/attention/backward.py backward): the knobs their templates read, as named constraints over the
HFL target.

Knobs: bq (queries a task or block covers), bk (keys a block covers) and threads. A block is
whole register tiles of the target's ISA (block_units: QT queries x MR keys on AVX-512 and
AVX2, the SVE tiles elsewhere) within the padded sequence lengths, so every legal value is
what the kernel runs, never rounded again. A backward task's buffers stay within half of L2,
the bound its emitter keeps; the forward's per-thread tiles (Q^T, scores, O^T) within L2.

The model rates a config by the scores its blocks compute, at the FMA peak (HFL) on its
threads: whole query blocks (the last one padded) and, under a causal mask (j <= i + c), only
the blocks that reach the unmasked triangle: the forward skips the key blocks past a query
block's last query, the backward the query blocks before a key block's first key. Finer
blocks follow the diagonal more closely: on Zen 4, 32 x 14 instead of the template's 64 x 84
(forward) and 64 x 56 (backward) ran a causal S=128 forward 12% faster and its backward 20%
(B=8, H=4, D=64), S=256 11% and 11-18%, S=512 11% and 4%; the AVX2 kernels (the avx2-desktop
target's, run there on 2 threads) at S=128 took 16 x 6 within 2% of the best pair, and 64 x 48
ran 33% (forward) and 21% (backward) longer. Without a mask it has no term that
tells block sizes apart beyond the padding: there every block pair measured within 4% at S=256
(the forward, BQ 32-128 x BK 84-256; the backward, BQ 32-128 x BK 28-112), and smaller blocks
pay per block in ways it does not count (each backward key block passes over every query). So
among configs it rates alike it keeps the template's default blocks, and measurement (the
tuner) decides the rest; a thread without a task is ruled out ("work per thread").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from uol_core.acg.space_core import Constraint, count_removed, keyword_test
from uol_core.hfl.roofline import fork_join_seconds
from uol_core.odl.ir import Op
from uol_core.odl.masks import causal_offset

KNOBS = ("threads", "bq", "bk")
MULTIPLES = (1, 2, 3, 4, 6, 8, 12, 16)  # blocks offered, in units of whole tiles


@dataclass(frozen=True)
class AttentionShape:
    """A recognised attention (or its gradient) at bound sizes on one target."""

    kind: str  # "forward" or "backward"
    S: int
    T: int
    D: int
    E: int
    slices: int
    q_unit: int  # queries of one register tile
    k_unit: int  # keys of one register tile (the backward: whole dot and dV/dK tiles)
    defaults: dict = field(default_factory=dict)  # the template's blocks, as it runs them
    causal: int | None = None  # c of a `j <= i + c` mask the kernels skip blocks by


_SHAPES: dict[tuple, AttentionShape | None] = {}
_REMEMBERED = 256


def attention_shape(op: Op, sizes: Mapping[str, int], target) -> AttentionShape | None:
    """The flash kernel `op` compiles to on `target`, or None when the C backend runs it with
    another template (recognising the gradient derives it again: remembered per op)."""
    key = (op, tuple(sorted(sizes.items())), getattr(target, "name", None),
           getattr(target, "l2_bytes", None))
    if key not in _SHAPES:
        if len(_SHAPES) >= _REMEMBERED:  # a long IDE session tries many sizes
            _SHAPES.clear()
        _SHAPES[key] = _recognise(op, sizes, target)
    return _SHAPES[key]


def _recognise(op: Op, sizes: Mapping[str, int], target) -> AttentionShape | None:
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.backends.c.attention import backward as c_attention_bwd
    from uol_core.backends.c.attention import forward as c_attention

    forward = c_attention.flash_plan(op)
    if forward is not None:
        kind, blocks = "forward", c_attention.FORWARD_BLOCKS
        S, T, D, E, slices = c_attention.attention_extents(op, forward, sizes)
        causal = causal_offset(op.stmts[0].expr, forward.i, forward.j)
    else:
        backward = c_attention_bwd.flash_grad_plan(op)
        if backward is None:
            return None
        kind, blocks = "backward", c_attention_bwd.BACKWARD_BLOCKS
        S, T, D, E, slices = c_attention_bwd.grad_extents(op, backward, sizes)
        causal = backward.causal
    if max(D, E) > c_attention.MAX_HEAD:
        return None  # the generic path runs it
    qu, ku = c_attention.block_units(target, backward=kind == "backward")
    shape = AttentionShape(kind, S, T, D, E, slices, qu, ku, causal=causal)
    defaults = {"bq": c_attention.whole_tiles(blocks["bq"], qu, S),
                "bk": c_attention.whole_tiles(blocks["bk"], ku, T)}
    if kind == "backward":  # the emitter halves the larger block until a task fits
        # deferred: at the top this import closes a circle, and fails while the modules load
        from uol_core.backends.c.attention.backward import shrink_blocks

        defaults["bq"], defaults["bk"] = shrink_blocks(
            defaults["bq"], defaults["bk"], qu, ku, lambda bq, bk: _fits(shape, target, bq, bk))
    return AttentionShape(kind, S, T, D, E, slices, qu, ku, defaults, causal)


def _fits(shape: AttentionShape, target, bq: int, bk: int) -> bool:
    """The rule on a block pair's working set (see the module's docstring)."""
    if shape.kind == "backward":
        # deferred: at the top this import closes a circle, and fails while the modules load
        from uol_core.backends.c.attention.backward import backward_fits_l2

        return backward_fits_l2(bq, bk, shape.D, shape.E, target)
    return 4 * bq * (shape.D + bk + shape.E + 4) <= int(getattr(target, "l2_bytes", 0) or 1 << 20)


def attention_domains_and_rules(shape: AttentionShape, target) -> tuple[dict[str, list],
                                                                          list[Constraint]]:
    """The knobs' domains and the named rules (with the HFL facts each reads)."""
    cores = int(target.cores or 1)
    qu, ku = shape.q_unit, shape.k_unit
    q_top, k_top = -(-shape.S // qu) * qu, -(-shape.T // ku) * ku
    domains = {"threads": sorted({1, cores}),
               "bq": sorted({qu * m for m in MULTIPLES if qu * m <= q_top} | {shape.defaults["bq"]}),
               "bk": sorted({ku * m for m in MULTIPLES if ku * m <= k_top} | {shape.defaults["bk"]})}
    tasks = ("slices * ceil(S / bq)" if shape.kind == "forward" else "slices * ceil(T / bk)")
    where = "half of L2" if shape.kind == "backward" else "L2"
    # (name, formula a person reads, the same test, its knobs, the HFL facts it uses)
    rows = [
        ("cores", f"threads <= {cores}", lambda threads: threads <= cores, ("threads",),
         ("cores",)),
        ("query block", f"bq % {qu} == 0 and bq <= {q_top}",
         lambda bq: bq % qu == 0 and bq <= q_top, ("bq",), ("vector_bits", "vector_registers")),
        ("key block", f"bk % {ku} == 0 and bk <= {k_top}",
         lambda bk: bk % ku == 0 and bk <= k_top, ("bk",), ("vector_bits", "vector_registers")),
        ("working set", f"a task's blocks (bq x bk) within {where}",
         lambda bq, bk: _fits(shape, target, bq, bk), ("bq", "bk"), ("l2_bytes",)),
        ("work per thread", f"threads == 1 or {tasks} >= threads",
         lambda threads, bq, bk: threads == 1 or _tasks(shape, bq, bk) >= threads,
         ("threads", "bq", "bk"), ("cores",)),
    ]
    rules = [count_removed(Constraint(name, formula, knobs, keyword_test(test, knobs), facts),
                           domains)
             for name, formula, test, knobs, facts in rows]
    return domains, rules


def _tasks(shape: AttentionShape, bq: int, bk: int) -> int:
    """Tasks the threads share: query blocks of every slice (forward), key blocks (backward)."""
    blocks = -(-shape.S // bq) if shape.kind == "forward" else -(-shape.T // bk)
    return shape.slices * blocks


def predict_attention_seconds(shape: AttentionShape, flops: float, target,
                              cfg: Mapping) -> float:
    """FLOPs at the FMA peak (HFL) on the config's share of the cores, scaled by the share of
    the scores the blocks compute (`computed_share`)."""
    threads = int(cfg.get("threads", 1))
    peak = float((target.peak_gflops or {}).get("fp32") or 1.0)
    share = threads / max(1, int(target.cores or 1))
    return flops * computed_share(shape, int(cfg["bq"]), int(cfg["bk"])) / (peak * 1e9 * share) \
        + fork_join_seconds(target, threads)


def computed_share(shape: AttentionShape, bq: int, bk: int) -> float:
    """Scores the kernel computes over the S x T of the op, as its loops visit them: every
    query block whole (the last one padded); under a causal mask the forward stops a query
    block's keys at its last query + c, in whole key blocks, and the backward starts a key
    block's queries at the query block holding its first key - c (c/attention/forward.py,
    c/attention/backward_body.py)."""
    S, T, c = shape.S, shape.T, shape.causal
    computed = 0
    if shape.kind == "forward":
        for q0 in range(0, S, bq):
            keys = T if c is None else max(0, min(T, q0 + min(bq, S - q0) + c))
            computed += bq * min(T, -(-keys // bk) * bk)
    else:
        padded = -(-S // bq) * bq
        for k0 in range(0, T, bk):
            first = 0 if c is None else max(0, k0 - c) // bq * bq
            computed += min(bk, T - k0) * max(0, padded - first)
    return computed / (S * T)


def distance_from_default(shape: AttentionShape, cfg: Mapping) -> int:
    """How far a config's blocks are from the template's (the tie-break among equals)."""
    return sum(abs(int(cfg[k]) - v) for k, v in shape.defaults.items())


def causal_note(shape: AttentionShape, configs: list[Mapping]) -> str | None:
    """What the model weighs under a causal mask, for the explanation: the block pair that
    computes the fewest scores against the template's own."""
    if shape.causal is None or not configs:
        return None
    least = min(configs, key=lambda c: (computed_share(shape, int(c["bq"]), int(c["bk"])),
                                        distance_from_default(shape, c)))
    bq, bk = int(least["bq"]), int(least["bk"])
    own = shape.defaults
    return (f"causal mask: the kernel skips the blocks past the diagonal, so the model prices "
            f"the scores each block pair computes: bq x bk = {bq} x {bk} computes "
            f"{computed_share(shape, bq, bk):.0%} of the {shape.S} x {shape.T} scores (padding "
            f"counts), the "
            f"template's {own['bq']} x {own['bk']} "
            f"{computed_share(shape, own['bq'], own['bk']):.0%}")
