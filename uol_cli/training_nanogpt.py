"""A nanoGPT block trained twice, with torch modules and with UOL's (entry point `run_nanogpt`).

The block (uol_core.graph.zoo.NanoGPTBlock: pre-norm, fused qkv projection, causal attention,
tanh-GELU MLP) and its twin with UOL's LayerNorm and Linear layers (c_fc fused with its GELU),
UOL's causal flash attention and, by choice, UOL's AdamW, from the same weights on the same
batches, in lockstep (each step runs the torch block, then the UOL one). The target is a fixed
random regression (MSE), so the losses of both must agree step by step. The result has the
shape of `training_demo.run_demo`'s, so the IDE draws either.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from uol_cli.training_demo import TrainResult
from uol_core.graph.zoo import NanoGPTBlock
from uol_core.torch.nn import UolAttention, swap_modules
from uol_core.torch.optim import AdamW

DIM, HEADS, BATCH, SEQ = 256, 4, 8, 128
LR = 1e-3


def _adamw(model: torch.nn.Module, kind: str) -> torch.optim.Optimizer:
    if kind == "uol":
        return AdamW(model.parameters(), lr=LR)
    return torch.optim.AdamW(model.parameters(), lr=LR)


def run_nanogpt(steps: int = 60, backend: str = "auto", seed: int = 0,
                optimizer: str = "uol",
                observe: Callable[[int, list, list], None] | None = None) -> dict:
    """Train the block and its UOL twin; `observe(step, losses, step_ms)` as in
    `training_demo.train_together` (the torch block first)."""
    torch.manual_seed(seed)
    reference = NanoGPTBlock(DIM, HEADS)
    ours = copy.deepcopy(reference)
    swapped = swap_modules(ours, backend)
    ours.attention = UolAttention(DIM // HEADS, backend, causal=True)
    swapped.append("attention (causal)")
    if optimizer == "uol":
        swapped.append("AdamW")
    models = [reference, ours]
    opts = [_adamw(reference, "torch"), _adamw(ours, optimizer)]
    gen = torch.Generator().manual_seed(seed + 1)
    batches = [(torch.randn(BATCH, SEQ, DIM, generator=gen),
                torch.randn(BATCH, SEQ, DIM, generator=gen)) for _ in range(4)]
    losses: list[list[float]] = [[], []]
    times: list[list[float]] = [[], []]
    for step in range(steps):
        x, y = batches[step % len(batches)]
        for model, opt, model_losses, model_times in zip(models, opts, losses, times):
            start = time.perf_counter()
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            model_times.append((time.perf_counter() - start) * 1e3)
            model_losses.append(loss.item())
        if observe:
            observe(step, losses, times)
    torch_run = TrainResult("torch", losses[0], times[0], None)  # a regression: no accuracy
    uol_run = TrainResult(f"uol ({backend})", losses[1], times[1], None, swapped)
    return {
        "model": f"nanoGPT block (dim {DIM}, {HEADS} heads, batch {BATCH} x seq {SEQ})",
        "steps": steps,
        "optimizer": optimizer,
        "torch": torch_run.to_dict(),
        "uol": uol_run.to_dict(),
        "final_loss_relative_gap": abs(losses[1][-1] - losses[0][-1]) / abs(losses[0][-1]),
        "max_abs_loss_gap": max(abs(a - b) for a, b in zip(losses[1], losses[0])),
        "speedup_vs_torch_eager": torch_run.median_step_ms / uol_run.median_step_ms,
    }
