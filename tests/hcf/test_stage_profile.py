"""A rank's stage work profiled outside the pipelining runtime, in its schedule's order."""

import pytest
import torch

from hcf_sim.pipelines.stage_model import PipeConfig, build_stage, even_split, full_state
from hcf_sim.pipelines.stage_profile import profile_stage_work

TINY = {"layers": 4, "d_model": 32, "seq": 8, "batch": 8, "stages": 2}


def _modules(cfg: PipeConfig, rank: int) -> list[torch.nn.Module]:
    split, weights = even_split(cfg.layers, cfg.virtual_stages), full_state(cfg)
    chunks = cfg.virtual_stages // cfg.stages
    return [build_stage(cfg, split, c * cfg.stages + rank, weights) for c in range(chunks)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
def test_profile_times_every_chunk_and_leaves_no_gradient(schedule):
    cfg = PipeConfig(**TINY, schedule=schedule, microbatches=4)
    for rank in (0, 1):
        modules = _modules(cfg, rank)
        work = profile_stage_work(cfg, rank, modules, warmup=1, repeats=3)
        assert work["chunks"] == len(modules) == (2 if schedule == "interleaved" else 1)
        assert work["rows"] == 2 and work["fwd_cpu"] > 0 and work["bwd_cpu"] > 0
        assert all(p.grad is None for m in modules for p in m.parameters())


def test_more_blocks_cost_more_work():
    # the work is measured, not scaled: 16x the blocks on a rank is more CPU per micro-batch
    # (15x on a quiet host; the bound leaves room for a loaded one, where a 4x step measured
    # only 1.3x: the small stage's few hundred microseconds inflate most)
    small, large = (PipeConfig(**{**TINY, "layers": n}, microbatches=2) for n in (2, 32))
    works = [profile_stage_work(c, 1, _modules(c, 1), warmup=1, repeats=5) for c in (small, large)]
    assert works[1]["fwd_cpu"] > 2 * works[0]["fwd_cpu"]
    assert works[1]["bwd_cpu"] > 2 * works[0]["bwd_cpu"]
