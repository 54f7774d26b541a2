"""Large outputs are recycled only once nobody holds them (runtime/output_pool.py)."""

from __future__ import annotations

import threading

import pytest
import torch

from uol_core.runtime import output_pool, pages
from uol_core.runtime.output_pool import OutputPool

MIB = 2**20
SHAPE = (1024, 1024)  # 4 MiB of float32


def empty(shape, dtype):
    return torch.empty(shape, dtype=dtype)


def test_a_freed_output_is_handed_out_again():
    pool = OutputPool(64 * MIB)
    first = pool.take(SHAPE, torch.float32, empty)
    address = first.data_ptr()
    del first
    again = pool.take(SHAPE, torch.float32, empty)
    assert again.data_ptr() == address and pool.reused == 1 and pool.allocated == 1
    assert again.shape == SHAPE and again.is_contiguous() and again._base is None
    assert again.stride() == (1024, 1)


@pytest.mark.parametrize("keep", ["tensor", "view", "numpy", "graph"])
def test_a_held_output_is_never_handed_out(keep):
    pool = OutputPool(64 * MIB)
    out = pool.take(SHAPE, torch.float32, empty)
    out.fill_(7.0)
    holder = {"tensor": lambda t: t, "view": lambda t: t[3:5, :].reshape(-1),
              "numpy": lambda t: t.numpy(),
              "graph": lambda t: (t.requires_grad_() * 2.0).sum()}[keep](out)
    address = out.data_ptr()
    del out
    other = pool.take(SHAPE, torch.float32, empty)
    other.fill_(-1.0)
    assert other.data_ptr() != address and pool.reused == 0
    if keep in ("view", "numpy"):  # what the holder reads is still what was written
        assert float(torch.as_tensor(holder).min()) == 7.0
    del holder
    assert pool.take(SHAPE, torch.float32, empty).data_ptr() == address


def test_sizes_dtypes_and_shapes_share_buffers_only_by_bytes():
    pool = OutputPool(64 * MIB)
    a = pool.take(SHAPE, torch.float32, empty)
    address = a.data_ptr()
    del a
    b = pool.take((512, 1024), torch.float32, empty)  # other bytes: a new buffer
    assert b.data_ptr() != address
    c = pool.take((2048, 512), torch.int32, empty)  # the same 4 MiB, another dtype and shape
    assert c.data_ptr() == address and c.dtype == torch.int32 and c.shape == (2048, 512)


def test_the_pool_keeps_no_more_than_its_limit():
    pool = OutputPool(8 * MIB)  # two 4 MiB buffers
    held = [pool.take(SHAPE, torch.float32, empty) for _ in range(3)]
    assert pool.tracked_bytes() == 8 * MIB  # the third is a plain tensor, not kept
    del held
    assert pool.idle_bytes() == 8 * MIB
    big = pool.take((2048, 1024), torch.float32, empty)  # 8 MiB: both idle ones are dropped
    assert pool.tracked_bytes() == 8 * MIB and pool.idle_bytes() == 0
    del big
    assert pool.release_idle() == 8 * MIB and pool.tracked_bytes() == 0


def test_a_limit_of_zero_allocates_every_output():
    pool = OutputPool(0)
    first = pool.take(SHAPE, torch.float32, empty)
    del first
    pool.take(SHAPE, torch.float32, empty)
    assert pool.tracked_bytes() == 0 and pool.reused == 0


def test_threads_never_share_a_buffer():
    pool = OutputPool(256 * MIB)
    seen: list[list[int]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        for _ in range(50):
            out = pool.take(SHAPE, torch.float32, empty)
            out.fill_(float(slot))
            seen[slot].append(out.data_ptr())
            assert float(out.min()) == float(out.max()) == float(slot)  # nobody else wrote it

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(map(len, seen)) == 200 and pool.reused > 0


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(output_pool.ENV_LIMIT, "96")
    assert output_pool.default_limit_bytes() == 96 * MIB
    monkeypatch.setenv(output_pool.ENV_LIMIT, "0")
    assert output_pool.default_limit_bytes() == 0
    monkeypatch.setenv(output_pool.ENV_LIMIT, "lots")
    with pytest.warns(UserWarning, match="not a number of MiB"):
        assert output_pool.default_limit_bytes() > 0


def test_training_steps_on_recycled_outputs_match_torch(monkeypatch):
    """A layer norm's forward and backward, twice, the first step's results kept: the second
    step's outputs must neither overwrite them nor differ from torch's."""
    from uol_core.torch.nn import UolLayerNorm

    monkeypatch.setattr(output_pool, "POOL", OutputPool(256 * MIB))
    ours, ref = UolLayerNorm(1024), torch.nn.LayerNorm(1024)
    steps = []
    for seed in (0, 1, 1):
        x = torch.randn(2048, 1024, generator=torch.Generator().manual_seed(seed),
                        requires_grad=True)
        up = torch.randn(2048, 1024, generator=torch.Generator().manual_seed(seed + 10))
        y = ours(x)
        y.backward(up)
        steps.append((y.detach().clone(), y, x.grad.clone(), x.grad))
        xr = x.detach().clone().requires_grad_()
        ref(xr).backward(up)
        torch.testing.assert_close(y, ref(xr), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    for y_copy, y, grad_copy, grad in steps:  # later steps wrote into no held output
        assert torch.equal(y_copy, y) and torch.equal(grad_copy, grad)
    assert output_pool.POOL.allocated >= 4  # 8 MiB outputs went through the pool


def test_fresh_output_pools_only_large_tensors(monkeypatch):
    pool = OutputPool(256 * MIB)
    monkeypatch.setattr(output_pool, "POOL", pool)
    small = pages.fresh_output((256, 1024))  # 1 MiB: glibc's own
    large = pages.fresh_output((4096, 1024))
    assert pool.tracked_bytes() == 16 * MIB and small.shape == (256, 1024)
    address = large.data_ptr()
    del large
    assert pages.fresh_output((4096, 1024)).data_ptr() == address


def test_outputs_are_pooled_where_the_os_grants_no_huge_pages(monkeypatch):
    """The pool follows the output's size, not the page policy: a host with THP off still
    recycles a training step's outputs (the launch plan once asked for huge pages first)."""
    from uol_core.torch.nn import UolLayerNorm

    monkeypatch.setattr(pages, "huge_page_bytes", lambda: 0)
    pool = OutputPool(256 * MIB)
    monkeypatch.setattr(output_pool, "POOL", pool)
    norm, x = UolLayerNorm(1024), torch.randn(2048, 1024)
    with torch.no_grad():
        for _ in range(3):
            norm(x)
    assert pool.allocated >= 1 and pool.reused >= 2
