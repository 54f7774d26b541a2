"""The Studio's Triton stages service: rows tied to Triton and ODL lines, the bounded server
cache, and the one-line reasons a state has no stages."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from app.components.triton_stages_view import stage_html
from app.services import triton_stages
from app.services.kernels import compile_odl
from uol_core.ops import op_text
from uol_core.runtime.triton_stages import StagesError

pytest.importorskip("triton")


def _state(op: str, backend: str, target: str, sizes: dict) -> dict:
    res = compile_odl(op_text(op), backend, target, sizes)
    assert res.ok, res.error
    return {"ok": True, "op": op, "odl": op_text(op), "backend": backend, "target": target,
            "sizes": res.sizes, "config": res.config}


def test_h200_layernorm_stages_tie_rows_to_triton_and_odl_lines() -> None:
    state = _state("layernorm", "triton", "h200-sxm", {"R": 128, "C": 1024})
    view = triton_stages.stages_view(state, "ptx")
    assert view.stage == "ptx" and view.kernels == ["layernorm_rows"]
    assert [name for name, _ in view.stages] == ["ttir", "ttgir", "llir", "ptx"]
    assert ".target sm_90a" in view.text and "h200-sxm" in view.summary
    tied = [(kline, odl) for _, kline, odl in view.rows if kline]
    assert tied and all(odl for kline, odl in tied if kline > 10)  # kernel body: ODL known
    assert {odl for _, odl in tied if odl} <= {2, 3, 4, 5}  # the op's ODL lines
    blob = stage_html(view.rows)
    assert blob.count('class="stage-row') == len(view.rows) and "data-kline=" in blob
    assert "<" not in view.text or "&lt;" in blob  # stage text is escaped


def test_switching_stages_hits_the_cache_and_the_cache_is_bounded() -> None:
    state = _state("softmax", "triton", "h100-sxm", {"R": 64, "C": 256})
    first = triton_stages.stages_view(state, "ttir")
    before = triton_stages.cache_size()
    again = triton_stages.stages_view(state, "ttgir")
    assert triton_stages.cache_size() == before and again.stage == "ttgir"
    assert first.text != again.text and "#ttg.blocked" in again.text
    for i in range(triton_stages.CACHE_ENTRIES + 5):  # the bound holds whatever is cached
        triton_stages._cached(("bound", i), lambda i=i: i)
    assert triton_stages.cache_size() == triton_stages.CACHE_ENTRIES


def test_states_without_stages_say_why() -> None:
    with pytest.raises(StagesError, match="not a GPU target"):
        triton_stages.stages_view(_state("softmax", "triton", "graviton3", {"R": 8, "C": 64}))
    with pytest.raises(StagesError, match="Triton backend"):
        triton_stages.stages_view(_state("softmax", "c", "h100-sxm", {"R": 8, "C": 64}))
