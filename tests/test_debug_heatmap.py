"""The Debugger's access heatmap: each out-of-bounds access in its own panel, 1-D tensors as 1-D."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from profilers.figures.trace_views import MAX_CELLS, access_heatmap, integer_ticks
from uol_core.debug.recorder import Launch, MemEvent, TensorInfo, Trace
from uol_core.debug.trace_io import save_trace

BLOCK, N = 16, 40  # three programs of 16 lanes over 40 elements: the last program runs past


def store_past_the_end() -> Trace:
    """A 1-D kernel that loads x with a mask but stores y without one (OOB store, lanes 40-47)."""
    trace = Trace(sources={"k.py": "x = tl.load(x_ptr + offs, mask=m)\ntl.store(y_ptr + offs, x)\n"})
    trace.launches.append(Launch("scale", "k.py", (3, 1, 1),
                                 {"x": TensorInfo("x", (N,), "float32", 4),
                                  "y": TensorInfo("y", (N,), "float32", 4)},
                                 [(p, 0, 0) for p in range(3)]))
    for p in range(3):
        offs = np.arange(p * BLOCK, (p + 1) * BLOCK, dtype=np.int64)
        inside = offs < N
        trace.events.append(MemEvent("load", 0, (p, 0, 0), "x", 1, offs, inside,
                                     np.zeros(BLOCK, bool), 4))
        trace.events.append(MemEvent("store", 0, (p, 0, 0), "y", 2, offs, np.ones(BLOCK, bool),
                                     ~inside, 4))
    return trace


@pytest.fixture
def saved_trace_id(tmp_path, monkeypatch) -> str:
    """The trace saved where the Debugger service keeps its traces, under a fresh id."""
    from app.services import debugging

    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))
    tid = uuid.uuid4().hex[:12]
    save_trace(store_past_the_end(), debugging._root() / tid)
    return tid


def markers(fig) -> list:
    return [t for t in fig.data if t.type == "scatter"]


def test_oob_store_is_marked_among_the_stores(saved_trace_id) -> None:
    from app.callbacks.debugger import draw_heatmap

    fig = draw_heatmap("all", "y", 0, {"id": saved_trace_id})
    marks = markers(fig)
    assert len(marks) == 1, "one out-of-bounds store, nothing else"
    assert marks[0].xaxis == "x2", "the store must be drawn in the stores panel, not the loads"
    assert "store" in marks[0].name
    assert sorted(marks[0].x) == list(range(N, N + 8))  # the first offsets a finding keeps
    # the load of x was masked: its panel carries no mark
    assert markers(draw_heatmap("all", "x", 0, {"id": saved_trace_id})) == []


def test_one_dim_tensor_is_one_row_with_whole_ticks(saved_trace_id) -> None:
    from app.callbacks.debugger import draw_heatmap

    fig = draw_heatmap("all", "y", 0, {"id": saved_trace_id})
    stores = fig.data[1]
    assert np.asarray(stores.z).shape == (1, N), "40 elements: one row of 40, not folded"
    assert np.nan_to_num(np.asarray(stores.z, float)).tolist() == [[1.0] * N]
    assert fig.layout.xaxis2.title.text == "element"
    assert fig.layout.yaxis.showticklabels is False
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        assert axis.tickmode == "linear" and float(axis.dtick).is_integer()
        # both panels span the tensor and the marks past its end (offsets 40-47)
        assert tuple(axis.range) == (-0.5, N + 7.5)


def test_two_row_tensor_gets_whole_row_ticks() -> None:
    counts = np.ones((2, 8), np.int64)
    fig = access_heatmap(counts, counts, "t", (2, 8), {"load": [17]})
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.tickmode == "linear"
    assert tuple(fig.layout.yaxis.range) == (2.5, -0.5)  # rows 0-1 and the mark below them
    (mark,) = markers(fig)
    assert (mark.xaxis, list(mark.x), list(mark.y)) == ("x", [1], [2])  # below the last row


@pytest.mark.parametrize("length", [1, 2, 9, 10, 11, 40, 64, 100, 1000, 65536])
def test_integer_ticks_are_whole_and_few(length) -> None:
    ticks = integer_ticks(length)
    assert isinstance(ticks["dtick"], int) and ticks["dtick"] >= 1
    assert length / ticks["dtick"] <= 10


def test_long_one_dim_tensor_is_cut_and_says_so() -> None:
    counts = np.ones(MAX_CELLS + 100, np.int64)
    fig = access_heatmap(counts, counts, "v", (counts.size,))
    assert np.asarray(fig.data[0].z).shape == (1, MAX_CELLS)
    assert f"first {MAX_CELLS} of {counts.size} elements" in fig.layout.title.text
