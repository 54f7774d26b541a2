"""The GPU tile space: hand-checked constraint cases, pruning counts and the cost ranking."""

from __future__ import annotations

from types import SimpleNamespace

from uol_core.backends.triton.space import first_rejections, gpu_space, predict, rank
from uol_core.ops import load_op

# A small hand-made GPU: 64 KiB shared memory, 16x8x16 MMA for f16, 100 SMs.
GPU = SimpleNamespace(smem_per_block_optin_bytes=65536, smem_per_block_bytes=49152,
                      registers_per_thread_max=255, warp_size=32, max_threads_per_block=1024,
                      mma_shapes={"fp16": [[16, 8, 16]], "tf32": [[16, 8, 8]]},
                      peak_gflops={"fp32": 10000.0, "fp16": 100000.0}, mem_bandwidth_gbps=1000.0,
                      cores=100)
BIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4,
       "GROUP_M": 8, "SPLIT_K": 1}


def test_shared_memory_overflow_is_rejected_and_named() -> None:
    space = gpu_space(load_op("matmul"), {"M": 1024, "N": 1024, "K": 1024}, GPU)
    # 4 B * (128*64 + 64*128) * 4 stages = 262144 B > 65536 B
    reasons = space.explain(BIG)
    assert len(reasons) == 1 and reasons[0].startswith("shared_memory")
    assert BIG not in space.configs
    ok = dict(BIG, num_stages=1)  # 65536 B: exactly fits
    assert space.explain(ok) == [] and ok in space.configs


def test_registers_warps_and_problem_fit() -> None:
    space = gpu_space(load_op("matmul"), {"M": 20, "N": 1024, "K": 1024}, GPU)
    cfg = dict(BIG, BLOCK_M=256, BLOCK_N=256, BLOCK_K=16, num_stages=1, num_warps=2)
    names = [r.split(":")[0] for r in space.explain(cfg)]
    assert "registers" in names  # 256*256/64 = 1024 accumulators per thread
    assert "problem_fit" in names  # BLOCK_M 256 > next_pow2(20) = 32
    few = dict(BIG, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_stages=1, num_warps=8)
    assert [r.split(":")[0] for r in space.explain(few)] == ["warps_per_tile"]


def test_counts_add_up_and_split_k_needs_a_bare_gemm() -> None:
    space = gpu_space(load_op("linear_bias_relu"), {"M": 512, "N": 512, "K": 4096}, GPU)
    assert space.product_size == 5 * 5 * 4 * 4 * 4 * 4 * 5  # the product of GEMM_DOMAINS
    removed = first_rejections(space)
    assert len(space.configs) + sum(removed.values()) == space.product_size
    assert removed["split_k"] > 0 and all(c["SPLIT_K"] == 1 for c in space.configs)
    bare = gpu_space(load_op("matmul"), {"M": 512, "N": 512, "K": 4096}, GPU)
    assert any(c["SPLIT_K"] > 1 for c in bare.configs)


def test_wave_quantisation_and_ranking() -> None:
    problem = {"M": 1280, "N": 128, "K": 64, "batch": 1, "bytes": 4, "dtype": "f32"}
    full = predict({"BLOCK_M": 128, "BLOCK_N": 128}, problem, GPU)  # 10 tiles on 100 SMs
    assert full["tiles"] == 10 and abs(full["wave_efficiency"] - 0.1) < 1e-9
    space = gpu_space(load_op("matmul"), {"M": 2048, "N": 2048, "K": 2048}, GPU)
    ranked = rank(space, GPU, top=5)
    times = [p["time_s"] for _, p in ranked]
    assert times == sorted(times) and len(ranked) == 5


def test_non_gemm_ops_get_the_blocked_space() -> None:
    space = gpu_space(load_op("relu"), {"M": 64, "N": 64}, GPU)
    assert space.configs and all(c["BLOCK"] >= 32 * c["num_warps"] for c in space.configs)


def test_a_row_kernel_is_constrained_by_the_block_it_launches_with() -> None:
    # a 1024-wide row is one BLOCK_C=1024 tile at every warp count: 8 warps own 4 elements
    # each (the generic BLOCK, which the row kernel never reads, once allowed 1 warp only)
    space = gpu_space(load_op("softmax"), {"R": 1024, "C": 1024}, GPU)
    assert set(space.domains) == {"num_warps"}
    assert [c["num_warps"] for c in space.configs] == [1, 2, 4, 8]
    assert "BLOCK_C=1024" in next(c.formula for c in space.constraints
                                   if c.name == "elements_per_thread")
    assert rank(space, GPU)[0][0]["num_warps"] == 4
    # a 64-wide row has 64 elements: 2 warps at most; a 16-wide row runs on one warp
    narrow = gpu_space(load_op("layernorm"), {"R": 8, "C": 64}, GPU)
    assert [c["num_warps"] for c in narrow.configs] == [1, 2]
    assert [c["num_warps"] for c in gpu_space(load_op("softmax"), {"R": 4, "C": 16},
                                              GPU).configs] == [1]
    # a row longer than one program's registers loops over BLOCK_C chunks sized by the warps
    long = gpu_space(load_op("softmax"), {"R": 8, "C": 100_000}, GPU)
    assert [c["num_warps"] for c in long.configs] == [1, 2, 4, 8]
    assert rank(long, GPU)[0][0]["num_warps"] == 8
