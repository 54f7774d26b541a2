"""A Llama-style decoder block imports whole: rotary tables computed under no_grad and autocast
(a wrapped submodule in the exported program), GQA's repeat of K/V heads, RMSNorm, SiLU-gated
MLP, and attention masks built from sizes or buffers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from uol_core.graph.export_import import import_model
from uol_core.graph.run import compile_graph


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Rotary(nn.Module):
    """Rotary tables as Llama computes them: no_grad, autocast off, from a non-persistent buffer."""

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim),
                             persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, hidden: int = 64,
                 mask: str = "float") -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.mask = heads, kv_heads, dim // heads, mask
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.norm1, self.norm2, self.rotary = RMSNorm(dim), RMSNorm(dim), Rotary(self.head_dim)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        cos, sin = self.rotary(x, torch.arange(t).unsqueeze(0))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads  # GQA: each K/V head serves `groups` query heads
        k = k[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, -1)
        v = v[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, -1)
        if self.mask == "float":  # what Llama builds: -inf above the diagonal
            mask = torch.full((t, t), float("-inf")).triu(1)
        else:
            mask = torch.ones(t, t, dtype=torch.bool).tril()
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


@pytest.mark.parametrize("mask", ["float", "bool"])
def test_a_llama_style_decoder_block_imports_whole_and_verifies(mask):
    # it failed with "exported graph node submod_3: unexpected kind get_attr" (the rotary
    # tables' no_grad/autocast region), and the fx fallback could not trace it either
    torch.manual_seed(0)
    module = DecoderBlock(mask=mask).eval()
    x = torch.randn(2, 8, 32)
    graph = import_model(module, x)
    assert "torch.export" in graph.description
    assert [n.label for n in graph.nodes if n.kind == "torch" and n.label != "view"] == []
    compiled = compile_graph(graph, "c")
    got = compiled({"x": x, **graph.values})[graph.outputs[0]]  # checked against the module
    with torch.no_grad():
        torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-5)


def test_a_mask_computed_from_the_input_stays_in_torch_with_its_reason():
    class LiveMask(nn.Module):
        def forward(self, q, k, v):
            keep = (q.sum(-1, keepdim=True) > 0) & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    graph = import_model(LiveMask(), q, k, v)
    reasons = [n.label for n in graph.nodes if n.kind == "torch" and n.label != "view"]
    assert reasons and all("bool" in r for r in reasons)
    got = compile_graph(graph, "c")({"q": q, "k": k, "v": v, **graph.values})[graph.outputs[0]]
    torch.testing.assert_close(got, LiveMask()(q, k, v))


def test_without_functionalisation_the_wrapped_rotary_region_runs_in_torch():
    # the exported program as traced: the rotary tables are a wrap_with_set_grad_enabled call
    # on a submodule (get_attr), which stays one torch node
    from uol_core.graph.export_import import ExportImporter
    from uol_core.graph.load import validate

    torch.manual_seed(0)
    module = DecoderBlock().eval()
    x = torch.randn(1, 6, 32)
    program = torch.export.export(module, (x,), strict=False)
    assert any(n.op == "get_attr" for n in program.graph.nodes)
    graph = ExportImporter(program, "DecoderBlock").run()
    graph.module = module
    graph = validate(graph)
    assert [n.source for n in graph.nodes if n.kind == "torch" and n.label != "view"] == \
        ["aten.wrap_with_set_grad_enabled"]
    got = compile_graph(graph, "c")({"x": x, **graph.values})[graph.outputs[0]]
    with torch.no_grad():
        torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-5)
