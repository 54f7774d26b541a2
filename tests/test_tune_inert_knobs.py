"""The Studio's tune spends its budget on configs that differ: a Triton row kernel sizes its tile
from the row, so its space holds num_warps alone (no BLOCK knob that would change nothing), and
the tune searches num_warps without repeats."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from app.services.kernels import inert_knobs
from app.services.knobs import space_for
from app.services.tune_runs import queued_session, tune_queued
from uol_core.ops import load_op

SOFTMAX = load_op("softmax").source
SIZES = {"R": 64, "C": 1000}


def test_a_row_kernel_searches_num_warps_alone():
    space = space_for(SOFTMAX, "triton", "h200-sxm", tuple(sorted(SIZES.items())))
    assert set(space.domains) == {"num_warps"}
    start = space.resolve({})
    inert = inert_knobs(SOFTMAX, "triton", "h200-sxm", SIZES, start)
    assert "num_warps" not in inert
    measured = []

    def run(cfg: dict) -> dict:  # each config's time from its num_warps: a definite optimum
        measured.append(cfg)
        return {"ok": True, "median_s": 1e-3 * (1 + abs(int(cfg["num_warps"]) - 8))}

    tune_queued(queued_session(space, None, 6, run, inert=inert))
    warps = [int(c["num_warps"]) for c in measured]
    assert len(warps) > 1 and len(set(warps)) == len(warps)  # every config differs
