"""Large kernel outputs ask for transparent huge pages (runtime/pages.py)."""

from __future__ import annotations

import pytest
import torch

from uol_core.runtime import pages


@pytest.fixture
def fake_thp(tmp_path, monkeypatch):
    """A THP directory whose mode and page size the test writes."""
    def make(mode: str, size: str = "2097152"):
        (tmp_path / "enabled").write_text(mode + "\n")
        (tmp_path / "hpage_pmd_size").write_text(size + "\n")
        monkeypatch.setattr(pages, "THP_DIR", tmp_path)
        pages.huge_page_bytes.cache_clear()
    yield make
    pages.huge_page_bytes.cache_clear()


def test_huge_pages_follow_the_system_mode(fake_thp):
    fake_thp("always [madvise] never")
    assert pages.huge_page_bytes() == 2 * 1024 * 1024
    fake_thp("[always] madvise never", "1048576")
    assert pages.huge_page_bytes() == 1024 * 1024
    fake_thp("always madvise [never]")
    assert pages.huge_page_bytes() == 0
    fake_thp("always [madvise] never", "not a number")
    assert pages.huge_page_bytes() == 0


def test_only_tensors_spanning_two_huge_pages_are_advised(fake_thp):
    fake_thp("always [madvise] never")
    assert not pages.advise_huge(torch.empty(768, 1024))  # 3 MiB: under two huge pages
    assert not pages.advise_huge(torch.empty(16))
    fake_thp("always madvise [never]")
    assert not pages.advise_huge(torch.empty(8192, 1024))


@pytest.mark.skipif(not pages.huge_page_bytes(), reason="this system grants no transparent huge pages")
def test_a_large_output_is_advised_and_holds_what_is_written():
    out = pages.fresh_output((8192, 1024))
    assert pages.advise_huge(out)  # madvise accepted the range
    out.fill_(3.0)
    assert out.shape == (8192, 1024) and out.dtype == torch.float32
    assert float(out.sum()) == 3.0 * 8192 * 1024


def test_a_compiled_kernel_writes_its_large_output_correctly():
    from uol_core.api import compile as compile_op

    x = torch.randn(4096, 1024)
    kernel = compile_op("softmax", shapes={"X": tuple(x.shape)})
    torch.testing.assert_close(kernel(X=x), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
