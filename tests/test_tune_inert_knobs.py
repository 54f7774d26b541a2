"""The Studio's tune holds knobs that change nothing in the kernel (a Triton row kernel's BLOCK,
sized from its row) at the start's value, so the budget goes to configs that differ."""

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


def test_a_row_kernels_block_is_inert_and_held_while_num_warps_is_searched():
    space = space_for(SOFTMAX, "triton", "h200-sxm", tuple(sorted(SIZES.items())))
    start = space.resolve({})
    inert = inert_knobs(SOFTMAX, "triton", "h200-sxm", SIZES, start)
    assert "BLOCK" in inert and "num_warps" not in inert
    measured = []

    def run(cfg: dict) -> dict:  # each config's time from its num_warps: a definite optimum
        measured.append(cfg)
        return {"ok": True, "median_s": 1e-3 * (1 + abs(int(cfg["num_warps"]) - 8))}

    tune_queued(queued_session(space, None, 6, run, inert=inert))
    assert measured and {c["BLOCK"] for c in measured} == {start["BLOCK"]}
    assert len({int(c["num_warps"]) for c in measured}) > 1
    assert len({tuple(sorted(c.items())) for c in measured}) == len(measured)  # no repeats
