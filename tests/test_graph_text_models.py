"""What the language models export imports whole and runs right: GEMMs with an input term
(addmm, baddbmm), batched GEMMs at any batch rank, lookups by int64 ids (embedding,
index_select, gather), concatenation and stacking at rank 4 (with a first step's empty cache),
chunk, expand and repeat, GQA's repeat of K/V heads, SDPA with bool, float and causal masks,
and 1-D convolution. Each module imports with no opaque node, compiles, and matches torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from uol_core.graph.aten_text import LOOKUP
from uol_core.graph.export_import import import_model
from uol_core.graph.run import compile_graph, make_inputs


def _opaque(graph) -> list[str]:
    return [f"{n.source}: {n.label}" for n in graph.nodes
            if n.kind == "torch" and n.label.startswith("opaque")]


def _check(module: nn.Module, *inputs: torch.Tensor):
    """Import (no opaque node), compile with the C backend, run, compare with the module."""
    torch.manual_seed(0)
    module = module.eval()
    graph = import_model(module, *inputs)
    assert "torch.export" in graph.description
    assert _opaque(graph) == []
    compiled = compile_graph(graph)
    out = compiled(dict(zip(graph.inputs, inputs)))
    with torch.no_grad():
        expected = module(*inputs)
    torch.testing.assert_close(next(iter(out.values())), expected, rtol=1e-4, atol=1e-4)
    return graph


class Conv1DProjection(nn.Module):
    """GPT-2's Conv1D: addmm(bias, x, W) with a [K, N] weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 24) / 4)
        self.bias = nn.Parameter(torch.randn(24))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, 16), self.weight).reshape(2, 5, 24)


def test_addmm_with_a_parameter_weight_is_the_library_linear():
    graph = _check(Conv1DProjection(), torch.randn(2, 5, 16))
    assert "linear_bias" in {n.source for n in graph.nodes if n.kind == "odl"}


class ScaledGemms(nn.Module):
    def forward(self, c, a, b, c3, a3, b3):
        return (torch.addmm(c, a, b, beta=0.5, alpha=2.0)
                + torch.baddbmm(c3, a3, b3, beta=0.25, alpha=1.5).sum(dim=0)
                + torch.bmm(a3, b3).mean(dim=0))


def test_addmm_baddbmm_bmm_with_run_time_operands_and_scales():
    _check(ScaledGemms(), torch.randn(7), torch.randn(6, 5), torch.randn(5, 7),
           torch.randn(1, 6, 7), torch.randn(3, 6, 5), torch.randn(3, 5, 7))


class BatchedAttention(nn.Module):
    """Hand-written attention on [B, H, S, D]: both GEMMs batched over two leading axes."""

    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) * 0.25 + mask
        return torch.softmax(scores, dim=-1) @ v


def test_batched_attention_with_two_batch_axes_builds_and_matches():
    # regression: the GEMM kernel's batch extent was a size macro named after the index
    # (`#define BATCH (D_i0 * D_i1)`), undeclared when the op's shapes are numbers
    qkv = [torch.randn(2, 3, 8, 16) for _ in range(3)]
    _check(BatchedAttention(), *qkv, torch.randn(8, 8))


class Embeddings(nn.Module):
    """Token and position embeddings (positions from arange, known at import)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(50, 16), nn.Embedding(12, 16)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        return self.tokens(ids) + self.positions(pos)


def test_embedding_by_int64_ids_is_a_lookup_with_an_int64_graph_input():
    ids = torch.tensor([[3, 49, 0, 7, 7, 12], [1, 2, 40, 41, 0, 5]])
    graph = _check(Embeddings(), ids)
    assert [s.dtype for s in graph.inputs.values()] == ["i64"]
    assert [n.source for n in graph.nodes if n.label == LOOKUP] == ["aten.embedding"]
    env = make_inputs(graph)
    ids_in = env[next(iter(graph.inputs))]
    assert ids_in.dtype == torch.int64 and int(ids_in.min()) >= 0 and int(ids_in.max()) <= 1


class Picks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(30, 8))

    def forward(self, x, ids, idx):
        rows = torch.index_select(self.table, 0, ids)  # [8, 8]
        picked = self.table[ids[:4]] + self.table[:, ids[:8]][:4]  # aten.index, two forms
        return rows.sum(dim=0) + torch.gather(x, 1, idx).sum(dim=1, keepdim=True) + picked


def test_index_select_and_gather_by_run_time_ids():
    graph = _check(Picks(), torch.randn(4, 8), torch.tensor([0, 7, 3, 3, 6, 1, 2, 5]),
                   torch.randint(0, 8, (4, 8)))
    assert {n.source for n in graph.nodes if n.label == LOOKUP} == {"aten.index_select", "aten.gather",
                                                                     "aten.index"}


class CacheAndRotate(nn.Module):
    """A first decoding step's cache (cat onto an empty 1-D tensor), rotate_half's rank-4 cat,
    a stack and a chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.tensor([]), persistent=False)

    def forward(self, k, x):
        keys = torch.cat([self.cache, k], dim=-2)
        half1, half2 = x.chunk(2, dim=-1)
        rotated = torch.cat((-half2, half1), dim=-1)
        stacked = torch.stack([keys, rotated, keys * 2.0], dim=2)  # [B, H, 3, S, D]
        return torch.cat([stacked, stacked + 1.0], dim=1).sum(dim=2)


def test_rank4_cat_with_an_empty_cache_stack_and_chunk():
    _check(CacheAndRotate(), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8))


class ExpandRepeat(nn.Module):
    def forward(self, x, row):
        return x.repeat(2, 1, 3) + row.expand(4, 3, 12) * 0.5


def test_expand_and_repeat():
    _check(ExpandRepeat(), torch.randn(2, 3, 4), torch.randn(1, 3, 12))


class GroupedQueryAttention(nn.Module):
    """GQA: 4 query heads over 2 key/value heads, repeated by repeat_interleave, by expand +
    reshape (Llama's repeat_kv) or by SDPA's enable_gqa."""

    def __init__(self, expand: bool | None) -> None:
        super().__init__()
        self.expand = expand

    def forward(self, q, k, v):
        if self.expand is None:  # SDPA repeats the heads itself
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if self.expand:
            b, g, s, d = k.shape
            k = k[:, :, None].expand(b, g, 2, s, d).reshape(b, g * 2, s, d)
            v = v[:, :, None].expand(b, g, 2, s, d).reshape(b, g * 2, s, d)
        else:
            k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("expand", [False, True, None], ids=["repeat_interleave", "expand", "enable_gqa"])
def test_grouped_query_attention_repeats_kv_heads(expand):
    _check(GroupedQueryAttention(expand), torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8),
           torch.randn(2, 2, 6, 8))


class MaskedAttention(nn.Module):
    """SDPA with a bool mask from a buffer (padding), or a float mask given at run time."""

    def __init__(self) -> None:
        super().__init__()
        allowed = torch.ones(1, 1, 6, 6, dtype=torch.bool)
        allowed[..., 4:] = False  # the last two keys are padding
        self.register_buffer("allowed", allowed, persistent=False)

    def forward(self, q, k, v, bias=None):
        mask = self.allowed if bias is None else bias
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_sdpa_with_a_bool_mask_from_a_buffer():
    qkv = [torch.randn(2, 2, 6, 8) for _ in range(3)]
    _check(MaskedAttention(), *qkv)


def test_sdpa_with_a_float_mask_at_run_time():
    qkv = [torch.randn(2, 2, 6, 8) for _ in range(3)]
    _check(MaskedAttention(), *qkv, torch.randn(1, 2, 6, 6))


class AudioFrontEnd(nn.Module):
    """Whisper's front end: conv1d, GELU, conv1d with stride 2."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(8, 16, 3, padding=1)
        self.conv2 = nn.Conv1d(16, 16, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv2(F.gelu(self.conv1(x)))


def test_conv1d_as_a_conv2d_of_height_one():
    graph = _check(AudioFrontEnd(), torch.randn(2, 8, 20))
    assert sum(n.kind == "odl" and n.op.name.startswith("conv2d") for n in graph.nodes) == 2


def test_sdpa_with_a_bool_mask_at_run_time():
    qkv = [torch.randn(2, 2, 6, 8) for _ in range(3)]
    allowed = torch.rand(2, 1, 6, 6) > 0.4
    allowed[..., 0] = True
    allowed[1, 0, 2] = False  # a query that sees no key: torch gives it zeros
    graph = _check(MaskedAttention(), *qkv, allowed)
    assert list(graph.inputs.values())[-1].dtype == "bool"
