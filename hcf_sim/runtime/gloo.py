"""Real collectives on torch.distributed (gloo on CPU processes at 127.0.0.1, NCCL where GPUs exist): timing and our p2p algorithms."""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hcf_sim.errors import HcfError
from hcf_sim.runtime.compression import comm_hook, make_codec
from hcf_sim.runtime.training import free_port


def backend() -> str:
    """NCCL when this process sees a GPU, else gloo."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def ring_allreduce(t: torch.Tensor) -> torch.Tensor:
    """Ring all-reduce (reduce-scatter then all-gather) on isend/irecv: the same schedule the simulator times."""
    p, r = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(t, p))
    nxt, prv = (r + 1) % p, (r - 1) % p
    for phase in range(2):
        for step in range(p - 1):
            si = (r - step + phase) % p
            ri = (r - step - 1 + phase) % p
            buf = torch.empty_like(chunks[ri])
            req = dist.isend(chunks[si].contiguous(), nxt)
            dist.recv(buf, prv)
            req.wait()
            if phase == 0:
                chunks[ri] += buf
            else:
                chunks[ri].copy_(buf)
    return t


def recursive_doubling_allreduce(t: torch.Tensor) -> torch.Tensor:
    """Recursive-doubling all-reduce (power-of-two ranks): lg p exchanges of the whole buffer."""
    p, r = dist.get_world_size(), dist.get_rank()
    if p & (p - 1):
        raise HcfError(f"recursive doubling here needs a power-of-two rank count, got {p}")
    k = 1
    while k < p:
        buf = torch.empty_like(t)
        req = dist.isend(t, r ^ k)
        dist.recv(buf, r ^ k)
        req.wait()
        t += buf
        k <<= 1
    return t


RUNTIME_ALGOS = {"native": lambda t: dist.all_reduce(t), "ring": ring_allreduce,
                 "recursive_doubling": recursive_doubling_allreduce}


def _time(fn, iters: int, warmup: int, batch_seconds: float = 0.0) -> tuple[list[float], list[float]]:
    """Seconds per call, one sample per iteration, each the slowest rank's time.

    With `batch_seconds` > 0 a sample times back-to-back calls (as nccl-tests does) filling
    about that long; the count comes from the warm-up's agreed time, so every rank runs the same
    number of calls. Back-to-back batches average out the scheduler's quanta when ranks
    time-share cores; a single call then measures mostly when each rank was scheduled.
    """
    out, cpu, batch = [], [], 1
    for i in range(warmup + iters):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batch):
            fn()
        dt = torch.tensor([(time.perf_counter() - t0) / batch, (time.process_time() - c0) / batch],
                          dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank ends
        if i >= warmup:
            out.append(dt[0].item())
            cpu.append(dt[1].item())
        elif batch_seconds > 0:
            batch = max(1, min(200, math.ceil(batch_seconds / max(dt[0].item(), 1e-7))))
    return out, cpu


def bench(task: dict) -> dict:
    """Run one benchmark task inside an initialised process group; returns medians per size (rank 0's view).

    `cpu_median` is the busiest rank's CPU seconds per call (all its threads): what the ranks
    compete for when there are more of them than cores.
    """
    rows = []
    r = dist.get_rank()
    dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
    for size in task["sizes"]:
        n = max(1, size // 4)
        t = torch.ones(n, device=dev)
        if task["kind"] == "pingpong":
            def fn(t=t):
                if r == 0:
                    dist.send(t, 1)
                    dist.recv(t, 1)
                elif r == 1:
                    dist.recv(t, 0)
                    dist.send(t, 0)
            wall, cpu = _time(fn, task["iters"], task["warmup"], task.get("batch_seconds", 0.0))
            times, cpu = [x / 2 for x in wall], [x / 2 for x in cpu]  # one way
        else:
            algo = RUNTIME_ALGOS[task.get("algorithm", "native")]
            times, cpu = _time(lambda t=t, a=algo: a(t), task["iters"], task["warmup"],
                               task.get("batch_seconds", 0.0))
        rows.append({"size": n * 4, "median": statistics.median(times),
                     "p10": sorted(times)[len(times) // 10], "p90": sorted(times)[(9 * len(times)) // 10],
                     "cpu_median": statistics.median(cpu)})
    return {"kind": task["kind"], "ranks": dist.get_world_size(), "backend": dist.get_backend(), "rows": rows}


def _worker(rank: int, world: int, port: int, task: dict, out: str) -> None:
    torch.set_num_threads(1)  # one core per rank: the machine has few, and threads would time-share them
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        res = bench(task)
        if rank == 0:
            Path(out).write_text(json.dumps(res))
    finally:
        dist.destroy_process_group()


def run_local(task: dict, world: int) -> dict:
    """Spawn `world` gloo processes on 127.0.0.1 (a free port) and run one benchmark task."""
    if not 2 <= world <= 16:
        raise HcfError(f"local gloo runs need 2-16 processes, got {world}")
    task = {"iters": 10, "warmup": 3, **task}
    # spawn (not torchrun) so gloo takes its TCP ring path, not the shared-memory one (gloo PR #458)
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        mp.start_processes(_worker, args=(world, free_port(), task, out), nprocs=world, start_method="spawn")
        return json.loads(Path(out).read_text())


def main() -> None:
    """torchrun entry: `torchrun --nnodes N --nproc-per-node G -m hcf_sim.runtime.gloo` times all-reduce across real machines."""
    dist.init_process_group(backend())
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    sizes = [1 << k for k in range(10, 29, 2)]
    res = bench({"kind": "allreduce", "sizes": sizes, "iters": 20, "warmup": 5})
    if dist.get_rank() == 0:
        print(json.dumps(res, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()


def _selfcheck_worker(rank: int, world: int, store: str, out: str) -> None:
    from torch import nn

    torch.set_num_threads(1)
    # A file store in the run's private folder: no port to lose between choosing and binding it,
    # and a rendezvous that waits out a busy host (the gloo pairs themselves still use TCP).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    try:
        x = torch.arange(1000, dtype=torch.float32) * (rank + 1)
        ref = x.clone()
        dist.all_reduce(ref)
        ring_err = (ring_allreduce(x.clone()) - ref).abs().max().item()
        torch.manual_seed(0)
        model = nn.Linear(64, 32)
        ddp = nn.parallel.DistributedDataParallel(model)
        codec = make_codec("int8")
        ddp.register_comm_hook(codec, comm_hook)
        torch.manual_seed(rank)  # different data per rank, so averaging matters
        inp = torch.randn(16, 64)
        ddp(inp).pow(2).sum().backward()
        local = torch.func.grad(lambda w: (inp @ w.T + model.bias.detach()).pow(2).sum())(model.weight.detach())
        mean = local.clone()
        dist.all_reduce(mean)
        mean /= world
        rel = ((model.weight.grad - mean).norm() / mean.norm()).item()
        res = {"ring_max_abs_error": ring_err, "int8_grad_rel_error": rel,
               "int8_wire_bytes": codec.wire_bytes, "fp32_ring_bytes": codec.raw_bytes}
        if rank == 0:
            Path(out).write_text(json.dumps(res))
        dist.barrier()  # neither rank tears gloo down while the other still has a pair open
    finally:
        dist.destroy_process_group()


def selfcheck(world: int = 2) -> dict:
    """On `world` gloo processes: our ring all-reduce equals gloo's, and the int8 DDP hook averages gradients."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "check.json")
        for attempt in range(3):
            try:
                store = os.path.join(d, f"store-{attempt}")  # a fresh rendezvous per attempt
                mp.start_processes(_selfcheck_worker, args=(world, store, out), nprocs=world,
                                   start_method="spawn")
                break
            except mp.ProcessExitedException:
                # a rank that gloo aborted (a connect timed out on a very busy host): again,
                # after a pause that lets the load pass, at most three times in all
                if attempt == 2:
                    raise
                time.sleep(1.0 + attempt)
        return json.loads(Path(out).read_text())
