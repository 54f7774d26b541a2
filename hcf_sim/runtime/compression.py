"""Gradient compression as DDP communication hooks on gloo: int8 ring, top-k with error feedback, PowerSGD, and torch's hooks."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from hcf_sim.errors import HcfError


def ring_bytes(nbytes: float, p: int) -> float:
    """Bytes one rank sends in a ring all-reduce of nbytes: 2(p-1)/p x nbytes."""
    return 2 * (p - 1) / p * nbytes


@dataclass
class Codec:
    """Hook state: which codec, its knobs, bytes this rank sent, codec compute seconds, error-feedback memory."""

    name: str
    density: float = 0.1  # top-k: share of entries kept
    rank: int = 2  # PowerSGD: matrix approximation rank
    wire_bytes: float = 0.0
    raw_bytes: float = 0.0  # what an fp32 ring all-reduce would have sent
    codec_s: float = 0.0
    memory: dict = field(default_factory=dict)
    torch_state: object | None = None


def _done(t: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(t)
    return fut


def _quant(x: torch.Tensor) -> torch.Tensor:
    # int8 with one fp32 scale per chunk, packed as 4 trailing bytes so one message carries both
    scale = x.abs().max().clamp_min(1e-30) / 127.0
    q = torch.round(x / scale).clamp_(-127, 127).to(torch.int8)
    return torch.cat([q, scale.reshape(1).to(torch.float32).view(torch.int8)])


def _dequant(buf: torch.Tensor) -> torch.Tensor:
    scale = buf[-4:].clone().view(torch.float32)  # clone: the view needs 4-byte alignment
    return buf[:-4].to(torch.float32) * scale


def _exchange(c: Codec, send: torch.Tensor, recv_numel: int, dst: int, src: int) -> torch.Tensor:
    out = torch.empty(recv_numel, dtype=send.dtype)
    req = dist.isend(send, dst)
    dist.recv(out, src)
    req.wait()
    c.wire_bytes += send.numel() * send.element_size()
    return out


def int8_ring_allreduce(c: Codec, flat: torch.Tensor) -> torch.Tensor:
    """Ring reduce-scatter re-quantising partial sums to int8 at each hop, then an all-gather of int8 chunks; returns the mean."""
    p, r = dist.get_world_size(), dist.get_rank()
    acc = [x.clone() for x in torch.tensor_split(flat, p)]
    nxt, prv = (r + 1) % p, (r - 1) % p
    t0 = time.perf_counter()
    for step in range(p - 1):
        si, ri = (r - step) % p, (r - step - 1) % p
        got = _exchange(c, _quant(acc[si]), acc[ri].numel() + 4, nxt, prv)
        acc[ri] += _dequant(got)
    own = (r + 1) % p
    packed = [None] * p
    packed[own] = _quant(acc[own])
    acc[own] = _dequant(packed[own])  # every rank must end with the same values
    for step in range(p - 1):
        si, ri = (own - step) % p, (own - step - 1) % p
        packed[ri] = _exchange(c, packed[si], acc[ri].numel() + 4, nxt, prv)
        acc[ri] = _dequant(packed[ri])
    c.codec_s += time.perf_counter() - t0  # includes the exchanges: the codec and the ring are one loop
    return torch.cat(acc) / p


def topk_allgather(c: Codec, key: int, flat: torch.Tensor) -> torch.Tensor:
    """Top-k by magnitude with error feedback; values and int32 indices all-gathered (top-k does not sum)."""
    p = dist.get_world_size()
    t0 = time.perf_counter()
    g = flat + c.memory.get(key, torch.zeros_like(flat))
    k = max(1, int(c.density * g.numel()))
    idx = torch.topk(g.abs(), k, sorted=False).indices
    vals = g[idx]
    mem = g.clone()
    mem[idx] = 0.0  # what was not sent is kept and added next step
    c.memory[key] = mem
    payload = torch.cat([vals, idx.to(torch.int32).view(torch.float32)])
    c.codec_s += time.perf_counter() - t0
    parts = [torch.empty_like(payload) for _ in range(p)]
    dist.all_gather(parts, payload)
    c.wire_bytes += (p - 1) * payload.numel() * 4  # ring all-gather: each rank forwards p-1 blocks
    t0 = time.perf_counter()
    out = torch.zeros_like(flat)
    for part in parts:
        out.index_add_(0, part[k:].view(torch.int32).long(), part[:k])
    c.codec_s += time.perf_counter() - t0
    return out / p


def powersgd_allreduce(c: Codec, bucket: dist.GradBucket) -> torch.Tensor:
    """Our PowerSGD: P = M Q, all-reduce P, orthonormalise, Q = M^T P, all-reduce Q, M ~ P Q^T, with error feedback and warm start."""
    p = dist.get_world_size()
    grads = bucket.gradients()
    outs: list[torch.Tensor | None] = [None] * len(grads)
    small = [i for i, g in enumerate(grads) if g.dim() < 2 or (g.shape[0] + g[0].numel()) * c.rank >= g.numel()]
    if small:  # biases and tiny matrices travel uncompressed, in one all-reduce
        flat = torch.cat([grads[i].reshape(-1) for i in small])
        dist.all_reduce(flat)
        c.wire_bytes += ring_bytes(flat.numel() * 4, p)
        for i, part in zip(small, torch.split(flat, [grads[i].numel() for i in small]), strict=True):
            outs[i] = part / p
    for i, g in enumerate(grads):
        if outs[i] is not None:
            continue
        t0 = time.perf_counter()
        key = (bucket.index(), i)
        m = g.reshape(g.shape[0], -1) + c.memory.get(key, 0.0)
        q = c.memory.get(("q", *key))
        if q is None or q.shape != (m.shape[1], c.rank):
            gen = torch.Generator().manual_seed(1234 + i)  # same seed on every rank: the same Q everywhere
            q = torch.randn(m.shape[1], c.rank, generator=gen)
        pm = m @ q
        c.codec_s += time.perf_counter() - t0
        dist.all_reduce(pm)
        t0 = time.perf_counter()
        pm = torch.linalg.qr(pm).Q
        q = m.T @ pm
        c.codec_s += time.perf_counter() - t0
        dist.all_reduce(q)
        q /= p
        c.wire_bytes += ring_bytes((pm.numel() + q.numel()) * 4, p)
        t0 = time.perf_counter()
        approx = pm @ q.T
        c.memory[key] = m - approx
        c.memory[("q", *key)] = q
        outs[i] = approx.reshape(g.shape)
        c.codec_s += time.perf_counter() - t0
    return torch.cat([o.reshape(-1) for o in outs])


def _torch_powersgd_bytes(state: powerSGD_hook.PowerSGDState, bucket: dist.GradBucket, p: int) -> float:
    # mirror the hook's own rule: compress a matrix only if (m+n) r x min_compression_rate < m n
    if state.iter < state.start_powerSGD_iter:
        return ring_bytes(bucket.buffer().numel() * 4, p)
    total = 0.0
    r = state.matrix_approximation_rank
    for g in bucket.gradients():
        m = g.reshape(g.shape[0], -1) if g.dim() >= 2 else None
        if m is not None and (m.shape[0] + m.shape[1]) * r * state.min_compression_rate < m.numel():
            total += (m.shape[0] + m.shape[1]) * r * 4
        else:
            total += g.numel() * 4
    return ring_bytes(total, p)


def comm_hook(c: Codec, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook for every codec; register with ddp.register_comm_hook(codec, comm_hook)."""
    p = dist.get_world_size()
    buf = bucket.buffer()
    c.raw_bytes += ring_bytes(buf.numel() * 4, p)
    if c.name == "none":
        c.wire_bytes += ring_bytes(buf.numel() * 4, p)
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0].div_(p))
    if c.name == "fp16":
        c.wire_bytes += ring_bytes(buf.numel() * 2, p)
        t0 = time.perf_counter()
        fut = default_hooks.fp16_compress_hook(None, bucket)
        c.codec_s += time.perf_counter() - t0
        return fut
    if c.name == "torch_powersgd":
        c.wire_bytes += _torch_powersgd_bytes(c.torch_state, bucket, p)
        t0 = time.perf_counter()
        fut = powerSGD_hook.powerSGD_hook(c.torch_state, bucket)
        c.codec_s += time.perf_counter() - t0
        return fut
    if c.name == "int8":
        out = int8_ring_allreduce(c, buf)
    elif c.name == "topk":
        out = topk_allgather(c, bucket.index(), buf)
    elif c.name == "powersgd":
        out = powersgd_allreduce(c, bucket)
    else:
        raise HcfError(f"unknown compression {c.name!r}")
    buf.copy_(out)
    return _done(buf)


def make_codec(name: str, density: float = 0.1, rank: int = 2, start_iter: int = 10) -> Codec:
    """Build the hook state for a codec name; torch_powersgd gets a PowerSGDState (start_powerSGD_iter >= 2)."""
    if name not in ("none", "fp16", "int8", "topk", "powersgd", "torch_powersgd"):
        raise HcfError(f"unknown compression {name!r}; choose none, fp16, int8, topk, powersgd or torch_powersgd")
    if not 0 < density <= 1:
        raise HcfError(f"top-k density must be in (0, 1], got {density}")
    c = Codec(name, density, rank)
    if name == "torch_powersgd":
        c.torch_state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                                    start_powerSGD_iter=max(2, start_iter), min_compression_rate=2)
    return c


def predicted_time(nbytes: float, ratio: float, codec_s_per_byte: float, allreduce_s) -> float:
    """Compressed collective time: T = T_codec(S) + T_coll(ratio x S) (the simulator uses measured ratio and cost)."""
    return codec_s_per_byte * nbytes + allreduce_s(ratio * nbytes)


def ddp_hook(name: str | None = "int8") -> tuple[Codec, Callable]:
    """(state, hook) for DistributedDataParallel.register_comm_hook, by codec name."""
    return make_codec(name or "int8"), comm_hook
