"""The constraint space: named readable constraints, HFL numbers, counts, speed; model and explain."""

import time

from uol_core.acg.config import TileConfig
from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.gemm.cost_model import CostModel
from uol_core.backends.c.gemm.explain import explain
from uol_core.backends.c.gemm.space import build_space
from uol_core.ops import load_op
from uol_core.plans.gemm import lower_contraction

AVX2 = fixed_target()
AVX512 = fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512, registers=32)


def _space(sizes, target=AVX2, op="matmul"):
    return build_space(lower_contraction(load_op(op), sizes), target)


def test_gemm_space_is_fast_and_every_config_is_legal():
    start = time.perf_counter()
    space = _space({"M": 2048, "N": 2048, "K": 2048})
    assert time.perf_counter() - start < 1.5  # tens of ms on an idle machine
    assert len(space.configs) > 100
    for cfg in space.configs[::97]:
        assert not space.violated(cfg)
        nv = cfg.nr // 8
        assert cfg.mr * nv + nv + 1 <= AVX2.vector_registers
        assert cfg.mc % cfg.mr == 0


def test_constraints_are_named_formulas_with_hfl_numbers_and_counts():
    space = _space({"M": 512, "N": 512, "K": 512})
    names = {c.name for c in space.constraints}
    assert {"register file", "latency hiding", "L1 capacity", "L2 capacity", "problem fit",
            "divisibility", "parallel split", "prefetch budget", "unroll"} <= names
    by_name = {c.name: c for c in space.constraints}
    assert "<= 16" in by_name["register file"].formula
    assert str(AVX2.l1d_bytes) in by_name["L1 capacity"].formula
    assert ">= 8" in by_name["latency hiding"].formula  # 2 FMA units x 4 cycles
    assert by_name["register file"].removed > 0
    assert all(r["of"] == space.product_size for r in space.report())


def test_avx512_targets_get_wider_tiles():
    space = _space({"M": 1024, "N": 1024, "K": 1024}, AVX512)
    best = CostModel(space.plan, AVX512).rank(space.configs)[0][0]
    assert best.isa == "avx512" and best.nr % 16 == 0
    assert best.mr * (best.nr // 16) >= 8


def _rated(model, space, **knobs):
    """The model's rating of the first legal config with these knobs."""
    cfg = next(c for c in space.configs if all(getattr(c, k) == v for k, v in knobs.items()))
    return model.estimate(cfg).gflops


def test_wide_avx512_b_panels_may_stream_from_l2_and_narrow_or_avx2_ones_may_not():
    wide = dict(isa="avx512", mr=6, nr=64, kc=512)
    space = _space({"M": 2048, "N": 2048, "K": 2048}, AVX512)
    l1 = AVX512.l1d_bytes
    streamed = [c for c in space.configs if (c.mr + c.nr) * c.kc * 4 > l1]
    assert streamed and all(c.isa == "avx512" and c.nr >= 48 for c in streamed)
    assert any(all(getattr(c, k) == v for k, v in wide.items()) for c in streamed)
    avx2 = _space({"M": 2048, "N": 2048, "K": 2048})
    assert all((c.mr + c.nr) * c.kc * 4 <= AVX2.l1d_bytes for c in avx2.configs
               if c.path == "packed")


def test_deep_k_blocks_pay_most_where_c_outgrows_l2():
    """Each pass over k adds every tile into C; beyond L2 that update is dear (GemmCosts), so
    there the model rates the streamed kc=512 well above kc=128, and where C fits L2 it rates
    them close (the streaming's cost against fewer updates)."""
    knobs = dict(isa="avx512", mr=6, nr=64, path="packed", par="ir", threads=2, pf=0)
    gains = {}
    for sizes in ({"M": 2048, "N": 2048, "K": 2048}, {"M": 256, "N": 256, "K": 1024}):
        space = _space(sizes, AVX512)
        model = CostModel(space.plan, AVX512)
        deep, shallow = (_rated(model, space, kc=kc, **knobs) for kc in (512, 128))
        gains[sizes["M"]] = deep / shallow
    assert gains[2048] > 1.05 and gains[2048] > gains[256] + 0.04
    space = _space({"M": 2048, "N": 2048, "K": 2048}, AVX512)
    model = CostModel(space.plan, AVX512)
    best = model.rank(space.configs)[0][0]
    assert best.kc == 512 and "beyond L2" in explain(space, model, best).render()


def test_a_shallow_last_pass_over_k_is_rated_by_its_depth():
    """K = 513 in blocks of 512 is a full pass and a one-step one, which pays a whole tile
    update for one k step (measured on Zen 5, 1000x777x513, 8x48 tiles alternated: kc=512
    2.05x torch, kc=192 2.15x). Against kc=512, the model rates kc=192 (three passes of 171)
    higher at K = 513 than at K = 512, where kc=512 is one pass and 192 three uneven ones (it
    rated both sizes alike when it counted every pass kc deep)."""
    knobs = dict(isa="avx512", mr=8, nr=48, path="packed", par="ir", threads=2, pf=0)
    order = {}
    for k in (513, 512):
        space = _space({"M": 1000, "N": 777, "K": k}, AVX512)
        model = CostModel(space.plan, AVX512)
        order[k] = _rated(model, space, kc=192, **knobs) / _rated(model, space, kc=512, **knobs)
    assert order[513] > order[512] + 0.02
    cfg = next(c for c in space.configs if c.kc == 512 and c.mr == 8 and c.nr == 48)
    assert "in blocks of" not in explain(space, model, cfg).render()  # K = 512: whole passes
    space = _space({"M": 1000, "N": 777, "K": 513}, AVX512)
    cfg = next(c for c in space.configs if c.kc == 512 and c.mr == 8 and c.nr == 48)
    text = explain(space, CostModel(space.plan, AVX512), cfg).render()
    assert "K = 513 in blocks of 512: 2 passes of 256 k steps on average (the last 1)" in text


def test_tiny_and_prime_problems_still_have_configs():
    for sizes in ({"M": 1, "N": 1, "K": 1}, {"M": 7, "N": 13, "K": 3}):
        space = _space(sizes)
        assert space.configs
        assert all(c.kc == 64 for c in space.configs)  # no deeper k block than needed


def test_user_config_violations_are_named():
    space = _space({"M": 256, "N": 256, "K": 256})
    bad = TileConfig(mr=14, nr=32, kc=256, mc=96, threads=2)
    assert {c.name for c in space.violated(bad)} >= {"register file"}


def test_explanation_names_binding_constraints_roofline_and_provenance():
    space = _space({"M": 1024, "N": 1024, "K": 1024})
    model = CostModel(space.plan, AVX2)
    cfg = model.rank(space.configs)[0][0]
    exp = explain(space, model, cfg, measured={"gflops": 100.0, "median_s": 0.02})
    text = exp.render()
    assert "% of L2" in text and "% of L1d" in text and "vector registers" in text
    assert exp.roofline["bound"] in ("compute", "memory") and exp.model_rank == 1
    assert 0 < exp.measured["fraction_of_roofline"] <= 1
    assert any(f["field"] == "l2_bytes" and "assumed" in f["provenance"] for f in exp.hfl_facts)
    assert "micro-tile" in exp.picture


def test_model_calibration_learns_a_correction():
    space = _space({"M": 512, "N": 512, "K": 512})
    model = CostModel(space.plan, AVX2)
    top = [c for c, _ in model.rank(space.configs)[:3]]
    before = model.estimate(top[0]).gflops
    model.calibrate([(c, model.estimate(c).gflops * 0.5) for c in top])
    assert abs(model.estimate(top[0]).gflops - before * 0.5) < 1e-6 * before


def test_a_tiny_gemm_stays_on_one_thread_by_a_named_rule():
    """37x45x29 is 48K multiply-adds: split in two, each share is shorter than a fork and join
    (3000 cycles x 2 FMA units x 16 lanes here), so the 'parallel work' rule removes every
    2-thread config; at 64^3 (262K) two threads remain."""
    space = _space({"M": 37, "N": 45, "K": 29}, AVX512)
    rule = next(c for c in space.constraints
                if c.name == "parallel work" and ("isa", "avx512") in c.when)
    assert f"{37 * 45 * 29} >= threads * {3000 * 2 * 16}" in rule.formula and rule.removed > 0
    assert {c.threads for c in space.configs} == {1}
    assert 2 in {c.threads for c in _space({"M": 64, "N": 64, "K": 64}, AVX512).configs}
    model = CostModel(space.plan, AVX512)
    assert "parallel work" in str(explain(space, model, model.rank(space.configs)[0][0]))


def test_the_parallel_work_rule_reads_the_fork_and_join_cost_from_the_hfl():
    """The rule's threshold is the target's fork_join_cycles (an HFL fact with provenance):
    a costlier fork and join keeps a 256^3 GEMM on one thread that 3,000 cycles let split
    (for every ISA: AVX-512's 16 lanes and AVX2's 8)."""
    sizes = {"M": 256, "N": 256, "K": 256}
    assert AVX512.provenance("fork_join_cycles").kind == "assumed"
    assert "isa.toml" in AVX512.provenance("fork_join_cycles").source
    slow = fixed_target("test-avx512-slow-fork", isa=("avx512f", "avx2", "fma"),
                        vector_bits=512, registers=32, fork_join_cycles=1_000_000)
    rule = next(c for c in _space(sizes, slow).constraints
                if c.name == "parallel work" and ("isa", "avx512") in c.when)
    assert f"threads * {1_000_000 * 2 * 16}" in rule.formula
    assert "fork_join_cycles" in rule.provenance
    assert {c.threads for c in _space(sizes, slow).configs} == {1}
    assert 2 in {c.threads for c in _space(sizes, AVX512).configs}
