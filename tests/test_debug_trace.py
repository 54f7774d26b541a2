"""The trace recorder: per-program loads/stores, OOB findings with their line, views, file io."""

from __future__ import annotations

import os
import sys
import textwrap

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from uol_core.debug import (
    bytes_per_program,
    heatmap,
    load_kernel,
    load_trace,
    mask_ratios,
    oob_findings,
    save_trace,
    trace_kernel,
    trace_op,
)
from uol_core.ops import load_op

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def scale_missing_mask(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * 2.0, mask=offs < n)


@triton.jit
def scale_masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * 2.0, mask=offs < n)
'''


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_kernels")
    (folder / "user_kernels.py").write_text(textwrap.dedent(KERNELS))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def test_missing_mask_is_found_at_its_line(kernels) -> None:
    import torch

    fn = load_kernel("user_kernels:scale_missing_mask")
    x, y = torch.arange(10.0), torch.zeros(10)
    trace = trace_kernel(fn, (3,), x, y, 10, BLOCK=4)
    findings = oob_findings(trace)
    assert len(findings) == 1
    f = findings[0]
    line = textwrap.dedent(KERNELS).splitlines().index("    x = tl.load(x_ptr + offs)") + 1
    assert (f.kind, f.tensor, f.line) == ("load", "x", line)
    assert f.source == "x = tl.load(x_ptr + offs)"
    assert f.offsets == [10, 11] and f.programs == [(2, 0, 0)]
    assert torch.equal(y, torch.arange(10.0) * 2)  # the OOB lanes were suppressed, not read


def test_correct_kernel_has_no_finding_and_views_add_up(kernels) -> None:
    import torch

    fn = load_kernel("user_kernels:scale_masked")
    trace = trace_kernel(fn, (3,), torch.arange(10.0), torch.zeros(10), 10, BLOCK=4)
    assert oob_findings(trace) == []
    assert heatmap(trace, "x").tolist() == [1] * 10
    assert heatmap(trace, "y", program=(2,)).tolist() == [0] * 8 + [1, 1]
    ratios = {r["kind"]: r["masked_ratio"] for r in mask_ratios(trace)}
    assert ratios == {"load": 2 / 12, "store": 2 / 12}
    moved = bytes_per_program(trace)
    assert moved[(0, 2, 0, 0)] == {"load": 8, "store": 8, "atomic": 0}


def test_generated_kernel_trace_roundtrips_through_files(tmp_path) -> None:
    trace, _outs = trace_op(load_op("softmax"), sizes={"R": 3, "C": 5})
    assert oob_findings(trace) == []
    assert heatmap(trace, "X", kind="load").min() >= 1
    json_path, npz_path = save_trace(trace, tmp_path / "softmax_trace")
    again = load_trace(json_path)
    assert len(again.events) == len(trace.events)
    assert np.array_equal(heatmap(again, "Y"), heatmap(trace, "Y"))
    assert npz_path.exists()


def test_large_grids_are_sampled_and_say_so() -> None:
    trace, _ = trace_op(load_op("row_sum"), sizes={"R": 40, "C": 3}, max_programs=8)
    launch = trace.launches[0]
    assert launch.sampled and len(launch.recorded) == 8
    assert any("sampled" in n for n in trace.notes)
