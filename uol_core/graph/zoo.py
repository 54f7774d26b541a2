"""The model zoo: stock and widely copied blocks, built here from torch.nn with random weights
(nothing is downloaded). Each entry gives a module and its example input at a "bench" size and
a "small" size (tests); `zoo(size)` builds them all.

    from uol_core.graph.zoo import zoo
    for name, (module, x) in zoo("small").items(): ...
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from uol_core.graph.examples import ResNetBasicBlock


class CausalSDPA(nn.Module):
    """torch's causal scaled-dot-product attention on [batch, heads, seq, head_dim], as a
    submodule so that a model's attention can be swapped by assignment (a module assigned over
    a method of the class would never be called: the class's method is found first)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class NanoGPTBlock(nn.Module):
    """GPT-2 block as in nanoGPT: pre-norm, fused qkv projection, causal SDPA, tanh GELU MLP."""

    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.c_fc, self.mlp_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.attention = CausalSDPA()  # UOL's causal kernel takes its place in the benchmark

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.attention(q, k, v)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    """Llama's RMSNorm: x / rms(x) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The half-rotation of rotary embeddings (Llama's layout: halves, not interleaved pairs)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    """Llama-style block: RMSNorm, rotary embeddings, grouped-query causal attention, SwiGLU MLP."""

    def __init__(self, dim: int = 256, heads: int = 8, kv_heads: int = 2, hidden: int = 688,
                 max_seq: int = 2048) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), inv)
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
        g = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(g)) * self.w3(g))


class ViTBlock(nn.Module):
    """Patch embedding (a strided conv) plus class token and position embedding, then one stock
    pre-norm encoder layer with GELU."""

    def __init__(self, image: int = 64, patch: int = 8, dim: int = 192, heads: int = 3) -> None:
        super().__init__()
        tokens = (image // patch) ** 2
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        return self.layer(x)


class ResNetBottleneck(nn.Module):
    """torchvision's Bottleneck: 1x1 reduce, 3x3, 1x1 expand, batch norms, identity shortcut."""

    def __init__(self, channels: int = 256, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm2d(width), nn.BatchNorm2d(width), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + x)


class MixerBlock(nn.Module):
    """MLP-Mixer block: token-mixing MLP across patches, channel-mixing MLP across features."""

    def __init__(self, tokens: int = 64, dim: int = 256, token_hidden: int = 128,
                 channel_hidden: int = 1024) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                       nn.Linear(token_hidden, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt block: 7x7 depthwise conv, channels-last LayerNorm, inverted MLP, layer scale."""

    def __init__(self, dim: int = 96) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6 * 1e5))  # 0.1: visible in the output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class UNetDownUp(nn.Module):
    """One UNet level: double conv, max-pool down, double conv, transposed-conv up, concat skip,
    double conv."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()

        def double(c_in: int, c_out: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU())

        self.enc, self.mid = double(channels, channels), double(channels, 2 * channels)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ConvTranspose2d(2 * channels, channels, 2, stride=2)
        self.dec = double(2 * channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.enc(x)
        y = self.up(self.mid(self.pool(skip)))
        return self.dec(torch.cat((y, skip), dim=1))


class SiLUMLP(nn.Module):
    """Linear-SiLU-linear-SiLU-linear."""

    def __init__(self, d_in: int = 256, hidden: int = 1024, d_out: int = 256) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.silu(self.fc2(F.silu(self.fc1(x)))))


def _resnet_basic(channels: int) -> nn.Module:
    return ResNetBasicBlock(channels)


def _encoder(dim: int, heads: int, norm_first: bool) -> nn.Module:
    return nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True,
                                      norm_first=norm_first)


# name -> (build(size) -> module, input shape at batch B as a function of B and size)
Builder = Callable[[str], nn.Module]
SMALL, BENCH = "small", "bench"
MODELS: dict[str, tuple[Builder, Callable[[int, str], tuple[int, ...]]]] = {
    "encoder_post_norm": (lambda s: _encoder(32 if s == SMALL else 256, 2 if s == SMALL else 4, False),
                          lambda b, s: (b, 8 if s == SMALL else 128, 32 if s == SMALL else 256)),
    "encoder_pre_norm": (lambda s: _encoder(32 if s == SMALL else 256, 2 if s == SMALL else 4, True),
                         lambda b, s: (b, 8 if s == SMALL else 128, 32 if s == SMALL else 256)),
    "nanogpt_block": (lambda s: NanoGPTBlock(32, 2) if s == SMALL else NanoGPTBlock(256, 4),
                      lambda b, s: (b, 8 if s == SMALL else 128, 32 if s == SMALL else 256)),
    "llama_block": (lambda s: LlamaBlock(32, 4, 2, 64, 64) if s == SMALL else LlamaBlock(),
                    lambda b, s: (b, 8 if s == SMALL else 128, 32 if s == SMALL else 256)),
    "vit_block": (lambda s: ViTBlock(16, 4, 32, 2) if s == SMALL else ViTBlock(),
                  lambda b, s: (b, 3, 16 if s == SMALL else 64, 16 if s == SMALL else 64)),
    "resnet_basic": (lambda s: _resnet_basic(8 if s == SMALL else 64),
                     lambda b, s: (b, 8 if s == SMALL else 64, 8 if s == SMALL else 28, 8 if s == SMALL else 28)),
    "resnet_bottleneck": (lambda s: ResNetBottleneck(16, 4) if s == SMALL else ResNetBottleneck(),
                          lambda b, s: (b, 16 if s == SMALL else 256, 8 if s == SMALL else 14,
                                        8 if s == SMALL else 14)),
    "mixer_block": (lambda s: MixerBlock(8, 32, 16, 64) if s == SMALL else MixerBlock(),
                    lambda b, s: (b, 8 if s == SMALL else 64, 32 if s == SMALL else 256)),
    "convnext_block": (lambda s: ConvNeXtBlock(16 if s == SMALL else 96),
                       lambda b, s: (b, 16 if s == SMALL else 96, 8 if s == SMALL else 28,
                                     8 if s == SMALL else 28)),
    "unet_down_up": (lambda s: UNetDownUp(8 if s == SMALL else 32),
                     lambda b, s: (b, 8 if s == SMALL else 32, 8 if s == SMALL else 32,
                                   8 if s == SMALL else 32)),
    "silu_mlp": (lambda s: SiLUMLP(32, 64, 16) if s == SMALL else SiLUMLP(),
                 lambda b, s: (b, 32 if s == SMALL else 256) if s == SMALL else (b * 64, 256)),
}


def build(name: str, size: str = BENCH, batch: int = 1, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """One zoo model in eval mode with seeded random weights, and a seeded random input."""
    build_module, input_shape = MODELS[name]
    torch.manual_seed(seed)
    module = build_module(size).eval()
    with torch.no_grad():  # batch norms get non-trivial statistics, so folding them is tested
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return module, torch.randn(*input_shape(batch, size))


def zoo(size: str = BENCH, batch: int = 1) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Every zoo model at `size` ("small" for tests, "bench" for benchmarks)."""
    return {name: build(name, size, batch) for name in MODELS}


__all__ = ["MODELS", "build", "zoo"]
