"""The flash-attention kernels' search space (backends/c/attention/space.py): the knobs their
templates read, legal values the kernels run as they are, the working-set rule, tuning."""

import dataclasses
import re

import pytest
import torch

import uol_core
from uol_core import load_op
from uol_core.acg.fixtures import fixed_target, runnable_target
from uol_core.acg.session import open_session
from uol_core.backends.c.route import emit_any
from uol_core.backends.c.space import build_pattern_space, choose_pattern_config
from uol_core.odl.grad import derive_grad
from uol_core.runtime.tuningdb import TuningDB

AVX512 = fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512,
                      registers=32)
SIZES = {"B": 1, "NH": 8, "S": 256, "T": 256, "D": 64}


def _ops():
    grad = derive_grad(load_op("attention_batched"), recompute_wide=True)
    return {"forward": grad.forward_with_saves, "backward": grad.op}


def _blocks(text: str) -> tuple[int, int]:
    found = re.search(r"BQ=(\d+) BK=(\d+)", text)
    assert found, text[:400]
    return int(found[1]), int(found[2])


@pytest.mark.parametrize("kind, defaults", [("forward", (64, 84)), ("backward", (64, 56))])
def test_attention_gets_the_knobs_its_template_reads(kind, defaults):
    op = _ops()[kind]
    space = build_pattern_space(op, SIZES, AVX512)
    assert set(space.domains) == {"threads", "bq", "bk"}  # no chunk, vec or fuse: unread
    # whole 14-key x 32-query AVX-512 tiles, within the padded lengths
    assert all(v % 32 == 0 and v <= 256 for v in space.domains["bq"])
    assert all(v % 14 == 0 and v <= 266 for v in space.domains["bk"])
    cfg, _ = choose_pattern_config(op, SIZES, AVX512)
    assert (cfg["bq"], cfg["bk"]) == defaults  # the template's own blocks, as it runs them
    assert _blocks(emit_any(op, SIZES, AVX512, None).text) == defaults


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_every_legal_block_pair_is_what_the_kernel_runs(kind):
    op = _ops()[kind]
    space = build_pattern_space(op, SIZES, AVX512)
    for cfg in space.configs[:: max(1, len(space.configs) // 12)]:
        assert _blocks(emit_any(op, SIZES, AVX512, dict(cfg)).text) == (cfg["bq"], cfg["bk"])


def test_backward_tasks_stay_within_half_of_l2():
    """A small L2 shrinks the blocks, in the space as in the emitter (whose halving once
    looped forever once the query block was one tile and the key block still larger)."""
    small = dataclasses.replace(fixed_target("test-avx512-small-l2", isa=("avx512f", "avx2", "fma"),
                                             vector_bits=512, registers=32), l2_bytes=128 * 1024)
    op = _ops()["backward"]
    space = build_pattern_space(op, SIZES, small)
    rule = next(c for c in space.constraints if c.name == "working set")
    assert rule.removed > 0 and "half of L2" in rule.formula
    assert all(4 * 2 * c["bq"] * c["bk"] <= 64 * 1024 for c in space.configs)
    cfg, _ = choose_pattern_config(op, SIZES, small)  # the emitter's halving, foreseen
    assert _blocks(emit_any(op, SIZES, small, None).text) == (cfg["bq"], cfg["bk"])


def test_a_chosen_block_pair_compiles_and_matches_torch():
    target = runnable_target()
    q, k, v = (torch.randn(1, 2, 70, 32) for _ in range(3))
    kern = uol_core.compile("attention_batched", shapes={"B": 1, "NH": 2, "S": 70, "T": 70,
                                                         "D": 32},
                            target=target, config="bq=32,bk=12,threads=2")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)  # the op's
    torch.testing.assert_close(kern(Q=q, K=k, V=v), want, atol=2e-5, rtol=1e-4)


def test_tuning_attention_measures_block_pairs(tmp_path):
    db = TuningDB(tmp_path / "tune.sqlite")
    sizes = {"B": 1, "NH": 2, "S": 64, "T": 64, "D": 32}
    session = open_session(load_op("attention_batched"), sizes, db=db, min_seconds=0.02)
    try:
        result = session.tune(budget=2)
    finally:
        session.close()
    assert result.best is not None and {"bq", "bk", "threads"} <= set(result.best)
    assert all(t.result["status"] == "ok" for t in result.trials)  # verified before timing


def _causal_ops():
    grad = derive_grad(load_op("causal_attention"), recompute_wide=True)
    return {"forward": grad.forward_with_saves, "backward": grad.op}


def test_computed_share_counts_the_blocks_the_causal_loops_visit():
    """By hand, at S = T = 128 (forward) and 64 (backward), D = 64: the forward stops a query
    block's keys at its last query, in whole key blocks; the backward starts a key block's
    queries at the query block holding its first key."""
    from uol_core.backends.c.attention.space import attention_shape, computed_share

    forward = attention_shape(_causal_ops()["forward"], {"S": 128, "D": 64}, AVX512)
    assert forward.causal == 0
    # 32 x 14: query blocks end at 32, 64, 96, 128 -> keys 42, 70, 98, 128
    assert computed_share(forward, 32, 14) == 32 * (42 + 70 + 98 + 128) / 128**2
    assert computed_share(forward, 64, 84) == 64 * (84 + 128) / 128**2
    backward = attention_shape(_causal_ops()["backward"], {"S": 64, "D": 64}, AVX512)
    # key blocks at 0, 14, 28, 42, 56 (8 keys): queries from 0, 0, 0, 32, 32
    assert computed_share(backward, 32, 14) == (14 * 64 * 3 + 14 * 32 + 8 * 32) / 64**2
    plain = attention_shape(_ops()["forward"], SIZES, AVX512)
    assert plain.causal is None and computed_share(plain, 96, 14) == 288 / 256  # padding alone


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_causal_attention_gets_blocks_that_follow_the_diagonal(kind):
    op = _causal_ops()[kind]
    sizes = {"S": 128, "D": 64}
    cfg, space = choose_pattern_config(op, sizes, AVX512)
    assert (cfg["bq"], cfg["bk"]) == (32, 14)  # one register tile each way
    assert _blocks(emit_any(op, sizes, AVX512, dict(cfg)).text) == (32, 14)
    assert any("causal mask" in note and "32 x 14" in note for note in space.notes)
