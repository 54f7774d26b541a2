"""Small torch modules to import as graphs (tests, benchmarks, `uol graph import`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """Two linear layers with a gelu between them."""

    def __init__(self, d_in: int = 256, hidden: int = 1024, d_out: int = 256) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then + mlp(ln(.)); no shape reads, so fx traces it."""

    def __init__(self, hidden: int = 512, heads: int = 8, mlp: int = 2048) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.proj = nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, mlp), nn.Linear(mlp, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.ln1(x)
        q, k, v = (p(a).unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        x = x + self.proj(o)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ResNetBasicBlock(nn.Module):
    """conv3x3-bn-relu, conv3x3-bn, identity shortcut, relu."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class SmallCNN(nn.Module):
    """conv-relu, maxpool, conv-relu, global average pool, linear; dropout stays a torch node."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 16, 3)
        self.pool, self.gap = nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)
        self.drop, self.fc = nn.Dropout(0.1), nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.gap(F.relu(self.conv2(x))).flatten(1)
        return self.fc(self.drop(x))
