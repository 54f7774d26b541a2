"""A small DDP training (MLP on scikit-learn's digits) on gloo processes, with each compression hook."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from hcf_sim.errors import HcfError
from hcf_sim.runtime.compression import comm_hook, make_codec

CODECS = ("none", "fp16", "int8", "topk", "powersgd", "torch_powersgd")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the gloo rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data():
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:  # scikit-learn is a [dev] extra
        raise HcfError("`uol hcf train` needs scikit-learn: pip install 'uol-studio[dev]'") from exc
    x, y = load_digits(return_X_y=True)  # bundled with scikit-learn: no download
    xtr, xte, ytr, yte = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    f = torch.float32
    return (torch.tensor(xtr, dtype=f), torch.tensor(ytr), torch.tensor(xte, dtype=f), torch.tensor(yte))


def _worker(rank: int, world: int, port: int, codec_name: str, epochs: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        xtr, ytr, xte, yte = _data()
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
        codec = make_codec(codec_name)
        ddp.register_comm_hook(codec, comm_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        steps, step_s = 0, 0.0
        for _ in range(epochs):
            perm = torch.randperm(len(xtr), generator=gen)[rank::world]  # each rank its shard
            for i in range(0, len(perm) - 31, 32):
                idx = perm[i:i + 32]
                t0 = time.perf_counter()
                opt.zero_grad()
                nn.functional.cross_entropy(ddp(xtr[idx]), ytr[idx]).backward()
                opt.step()
                step_s += time.perf_counter() - t0
                steps += 1
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        stats = torch.tensor([codec.wire_bytes, codec.raw_bytes, codec.codec_s, step_s], dtype=torch.float64)
        dist.all_reduce(stats)
        stats /= world
        if rank == 0:
            Path(out).write_text(json.dumps({
                "compression": codec_name, "ranks": world, "epochs": epochs, "steps": steps,
                "wire_bytes": stats[0].item(), "fp32_bytes": stats[1].item(),
                "codec_ms": 1e3 * stats[2].item() / steps, "step_ms": 1e3 * stats[3].item() / steps,
                "accuracy": acc, "params": sum(p.numel() for p in model.parameters())}))
    finally:
        dist.destroy_process_group()


def train_one(codec: str, ranks: int = 2, epochs: int = 8) -> dict:
    """Spawn `ranks` gloo processes on 127.0.0.1 and train with one codec; returns bytes, step time, accuracy."""
    if codec not in CODECS:
        raise HcfError(f"unknown compression {codec!r}; choose one of {', '.join(CODECS)}")
    if not 1 <= ranks <= 8 or epochs < 1:
        raise HcfError(f"use 1-8 ranks and >= 1 epoch on one machine, got {ranks} ranks, {epochs} epochs")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        mp.start_processes(_worker, args=(ranks, free_port(), codec, epochs, out), nprocs=ranks,
                           start_method="spawn")
        return json.loads(Path(out).read_text())


def compare(names: list[str], ranks: int = 2, epochs: int = 8, progress: Callable[[], None] | None = None) -> list[dict]:
    """Train with each codec; add volume ratio and accuracy change against the uncompressed run."""
    res = []
    for n in names:
        res.append(train_one(n, ranks, epochs))
        if progress:
            progress()
    base = next((r for r in res if r["compression"] == "none"), None)
    for r in res:
        r["volume_ratio"] = r["wire_bytes"] / r["fp32_bytes"]
        r["accuracy_delta_points"] = 100 * (r["accuracy"] - base["accuracy"]) if base else None
    return res
